"""Kafka itself: the client settings a job's spec makes, the metadata and admin client (positions,
the group's offsets, partitions), its retry policy, and the offsets admin run against a broker.
Imports only `api`; the operator uses it too.
"""
