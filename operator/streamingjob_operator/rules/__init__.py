"""The protocol's rules, pure: what the operator observed as values, the decision (decide and the
rules it composes: phases, restarts, epochs, fencing, hand-over, standby, offsets actions, the
autoscaler's model), status as an API, the Lease rules and the timing they share. No I/O;
imports only `api`.
"""
