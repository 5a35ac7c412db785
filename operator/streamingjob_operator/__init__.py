"""StreamingJob operator: keeps Spark Structured Streaming jobs that read Kafka running.

`kopf run -m streamingjob_operator` imports this package, which registers the handlers.
"""

from streamingjob_operator import handlers as handlers
