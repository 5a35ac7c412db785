"""A deterministic simulation of the job protocol: the operator's real reconcile against an
in-memory cluster, Kafka and sinks, histories of acts and faults (docs/semantics.md)."""
