"""Kafka itself: the client settings a job's spec makes, the metadata and admin client (positions,
the group's offsets, partitions), its retry policy, the offsets admin run against a broker, and
the transactional writer the dead-letter topic and the exactly-once Kafka sink share.
Imports only `api`; the operator uses it too.
"""
