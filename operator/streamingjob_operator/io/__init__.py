"""The operator's edges: the one module that talks to the API server (k8s), its own view of Kafka
and of the nodes, the metrics it serves, and the error types its callers turn into kopf
outcomes.
"""
