"""The job's driver process: preflight, the query it starts and supervises, the group offsets it
writes from the checkpoint, the warm standby and hand-over, its report, and the offsets CLI. The
top layer; nothing imports it but `spark_app.__main__`.
"""
