"""A local SparkSession for tests that drive Spark in-process (not through the runner)."""

from __future__ import annotations

import os
import sys

from spark_app.runner.query import AUTH_SOCKET_TIMEOUT


def local_session(app: str, master: str = "local[1]", **conf: str):
    """A quiet local session (no UI, no progress bar) whose Python workers run this
    interpreter; `conf`: more Spark settings."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        AUTH_SOCKET_TIMEOUT[0]: AUTH_SOCKET_TIMEOUT[1],
        **conf,
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
