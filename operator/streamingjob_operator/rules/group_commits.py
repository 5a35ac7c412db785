"""The runner's offset commits to the consumer group, as status shows them (semantics rule 3:
commits failing never fail the job, but never only in a metric either): status.groupCommits,
condition GroupCommitFailing (status.set_conditions), a Warning Event each time more fail and
a Normal one when a commit succeeds again.

The runner counts its commits per run (report `commits`: failed, succeeded); a relaunch
starts them from zero (epochs.set_target) but keeps `failing`, which only a commit that
succeeds clears: a relaunch alone does not make a broker take the commits.
"""

from __future__ import annotations

from datetime import datetime

from streamingjob_operator.api.status_models import StreamingJobStatus
from streamingjob_operator.api.status_records import GroupCommitsStatus
from streamingjob_operator.rules.history import Event
from streamingjob_operator.rules.observed import Report, iso


def apply(st: StreamingJobStatus, report: Report, now: datetime) -> list[Event]:
    """Records the current run's commits; returns the Events of what changed."""
    failed = report.commit_failures
    if failed is None:  # the runner does not commit (commitOffsetsOnCheckpoints off)
        return []
    succeeded = report.commit_successes or 0
    was = st.group_commits or GroupCommitsStatus()
    gc = was.model_copy(update={"group": st.checkpoint_group_id or was.group})
    gc.failed, gc.succeeded = failed, succeeded
    st.group_commits = gc
    if failed > was.failed:
        if not was.failing:
            gc.failing, gc.since = True, iso(now)
        return [Event("Warning", "GroupCommitFailing", failing_message(gc, failed - was.failed))]
    if was.failing and succeeded > was.succeeded:
        gc.failing, gc.since = False, ""
        message = f"offset commits to group {gc.group} succeed again"
        return [Event("Normal", "GroupCommitsRecovered", message)]
    return []


def failing_message(gc: GroupCommitsStatus, more: int | None = None) -> str:
    """What the Event (`more`: failed since the last report) and the condition say: the
    group, the count, what it costs."""
    count = gc.failed if more is None else more
    news = f"{count} more" if count != gc.failed else f"{count}"
    return (
        f"{news} offset commits to group {gc.group} failed ({gc.failed} in this run, failing "
        f"since {gc.since}); the job keeps running and its checkpoint is the truth, but the "
        "group's offsets and lag fall behind until commits succeed (the driver's log says why)"
    )
