"""Where records go: the Kafka sink, the Delta Lake table sink and its maintenance, the dead-letter
topic. Imports `formats` and `api`.
"""
