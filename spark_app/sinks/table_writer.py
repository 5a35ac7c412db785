"""What both table sinks' foreachBatch functions share (spark_app/sinks/delta_sink.py,
spark_app/sinks/iceberg_sink.py): the newest batch the table holds for the query's app id,
read once at its first batch and then kept, and the tests' fault point after a commit."""

from __future__ import annotations

import os
import signal
from typing import Any

# A fault point for tests: the driver (its whole process group, the JVM too) is SIGKILLed
# right after the table committed this batch id, before Spark writes commits/<id>.
CRASH_AFTER_COMMIT_ENV = "STREAMJOB_TEST_CRASH_AFTER_TABLE_COMMIT"


class TableWriter:
    """A query's writer of one table: `write` appends a batch unless `has` it (a restore's
    replay). The table is read once, at the query's first batch, and again only after a
    failed write (its commit may have landed all the same); from then on the newest batch is
    kept here and each commit goes through the table opened then."""

    def __init__(self, table: Any, app_id: str):
        self.table, self.app_id = table, app_id
        self.crash_after = os.environ.get(CRASH_AFTER_COMMIT_ENV)
        self._read = False  # the state below was read (and not lost to a failure)
        self._opened: Any = None  # the open table; None while there is none
        self._done: int | None = None  # the newest batch of app_id in the table

    def __call__(self, frame, batch_id: int) -> None:
        self.write(frame.toArrow(), batch_id)
        if self.crash_after == str(batch_id):  # a test's crash between the table and commits/N
            os.killpg(os.getpgid(0), signal.SIGKILL)

    def write(self, rows: Any, batch_id: int) -> bool:
        raise NotImplementedError

    def newest_in(self, opened: Any) -> int | None:
        """The newest batch of the app id in `opened` (the table `table.open()` gave)."""
        raise NotImplementedError

    def has(self, batch_id: int) -> bool:
        if not self._read:
            self._opened = self.table.open()
            self._done = None if self._opened is None else self.newest_in(self._opened)
            self._read = True
        return self._done is not None and self._done >= batch_id
