"""Where records go: the Kafka sinks (exactly-once and at-least-once), the Delta Lake table sink
and its maintenance, the dead-letter topic. Imports `formats`, `kafka` and `api`.
"""
