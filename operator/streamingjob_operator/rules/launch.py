"""One launch of a job's driver as one value: what decide recorded as the target (driver pod,
epoch, attempt, checkpoint locations, nodes to avoid) and where the image keeps spark-submit
and the runner. The reconciler builds it from status; the builders read it."""

from __future__ import annotations

from dataclasses import dataclass

from streamingjob_operator.api.status_models import StreamingJobStatus, WaitingDriver
from streamingjob_operator.rules.epochs import catch_up_chain


@dataclass(frozen=True)
class Launch:
    driver_pod: str
    epoch: int
    attempt: int
    checkpoint_location: str
    # the earlier epochs' checkpoints a fresh start catches up from, newest first (none: no
    # catch-up)
    previous_checkpoints: tuple[str, ...] = ()
    avoid_nodes: tuple[str, ...] = ()  # a lost node, kept off by the attempt after the loss
    entrypoint: str = "/opt/streamingjob/run_job.py"
    spark_submit: str = "/opt/spark/bin/spark-submit"
    wait_for_go: bool = False  # a warm hand-over's next driver: waits for go.json (handover.py)
    # a standby (standby.py): kept off the nodes of the job's other drivers where it can be
    away_from_drivers: bool = False

    @classmethod
    def of(cls, st: StreamingJobStatus, *, entrypoint: str, spark_submit: str) -> Launch:
        """The launch status targets (decide wrote it before the launch)."""
        return cls(
            driver_pod=st.driver_pod,
            epoch=st.epoch,
            attempt=st.attempt,
            checkpoint_location=st.checkpoint_location,
            previous_checkpoints=catch_up_chain(
                st.previous_checkpoint_location, st.older_checkpoint_locations
            ),
            avoid_nodes=tuple(st.avoid_nodes),
            entrypoint=entrypoint,
            spark_submit=spark_submit,
        )

    @classmethod
    def waiting(cls, st: StreamingJobStatus, *, entrypoint: str, spark_submit: str) -> Launch:
        """The next driver of the warm hand-over status.handover records."""
        assert st.handover is not None
        h = st.handover
        previous = catch_up_chain(h.previous_checkpoint_location, h.older_checkpoint_locations)
        return cls._waits_for_go(h, previous, False, entrypoint, spark_submit)

    @classmethod
    def standby(cls, st: StreamingJobStatus, *, entrypoint: str, spark_submit: str) -> Launch:
        """The standby status.standby records: the running epoch's checkpoints."""
        assert st.standby is not None
        previous = catch_up_chain(st.previous_checkpoint_location, st.older_checkpoint_locations)
        return cls._waits_for_go(st.standby, previous, True, entrypoint, spark_submit)

    @classmethod
    def _waits_for_go(
        cls,
        w: WaitingDriver,
        previous: tuple[str, ...],
        away: bool,
        entrypoint: str,
        spark_submit: str,
    ) -> Launch:
        return cls(
            driver_pod=w.pod,
            epoch=w.epoch,
            attempt=w.attempt,
            checkpoint_location=w.checkpoint_location,
            previous_checkpoints=previous,
            avoid_nodes=tuple(w.avoid_nodes),
            wait_for_go=True,
            away_from_drivers=away,
            entrypoint=entrypoint,
            spark_submit=spark_submit,
        )
