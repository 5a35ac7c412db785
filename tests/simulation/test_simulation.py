"""The simulation tier (simulation/, docs/semantics.md "The simulation"): histories of user
acts and faults against the operator's real reconcile, every invariant checked after every
event. CI runs at least 200,000 steps; `make simulate SEEDS=…` and `make simulate-soak` run
more."""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime

import pytest

from simulation import losses
from simulation.history import Act
from simulation.search import explore, run, shrink, story
from spark_app.api.sink_rules import Progress
from spark_app.sinks import dead_letter
from streamingjob_operator.rules import decide

pytestmark = pytest.mark.unit

CI_STEPS = 200_000


@pytest.mark.timeout(900)  # about 1 min on two idle cores; CI runs it beside its other tiers
def test_every_history_keeps_every_invariant():
    """Seeds from 0 up, in batches on every core, until 200,000 steps ran: no violation."""
    started, steps, histories, out = time.monotonic(), 0, 0, io.StringIO()
    first = 0
    while steps < CI_STEPS:
        done, ran, broken = explore(range(first, first + 16), out=out)
        histories, steps, first = histories + done, steps + ran, first + 16
        assert not broken, out.getvalue()
    took = time.monotonic() - started
    print(
        f"\n{histories} histories, {steps} steps, 0 violations "
        f"({took:.1f} s, {steps / took:.0f} steps/s)"
    )


def test_the_workers_are_not_forks_of_the_caller(monkeypatch):
    """A fork of a process with threads copies the objects they were changing (CI, stop 48:
    a worker's garbage collector crashed on one). The workers start from a clean server: a
    change made in the caller after the import (here a `run` that fails) never reaches them."""
    from simulation import search

    def broken(seed, acts=None):
        raise AssertionError("a worker forked from the test process")

    monkeypatch.setattr(search, "run", broken)
    histories, steps, failing = explore(range(1), jobs=1)
    assert (histories, failing) == (1, []) and steps > 0


def test_a_seed_replays_exactly():
    a, b = run(3), run(3)
    assert (a.steps, a.trace) == (b.steps, b.trace)


def test_the_simulation_sees_a_reading_driver_forced_out(monkeypatch):
    """A world where the operator force-deletes every pod it deletes (the fencing rule
    broken on purpose): the simulation finds it and shrinks the history to a few acts."""
    from simulation import cluster

    original = cluster.SimApi.delete_pod

    def always_force(self, namespace, name, *, force=False):
        return original(self, namespace, name, force=True)

    monkeypatch.setattr(cluster.SimApi, "delete_pod", always_force)
    acts = [Act(0.0, "create"), Act(5.0, "produce", 3), Act(30.0, "redeploy")]
    outcome = run(1, acts)
    assert outcome.violations and outcome.violations[0].rule in ("unfenced", "two readers")
    small = shrink(outcome)
    assert len(small.plan) <= 3
    assert "broken:" in story(small)


def _without_progress_check(monkeypatch):
    """The dead-letter writer's progress check broken on purpose: every poison record read
    is written again, also below the offset a committed transaction handled."""
    original = dead_letter.transaction_of
    monkeypatch.setattr(
        dead_letter,
        "transaction_of",
        lambda records, progress, end, read, kept=None: original(records, Progress(-1), end, read),
    )


def test_the_simulation_sees_a_poison_record_dead_lettered_twice_after_a_restore(monkeypatch):
    """A driver killed after its batch's dead-letter transaction, before the sink and
    commits/N: the restored driver runs the batch again and, without the progress check,
    writes its poison records a second time."""
    from simulation.acts import CRASH_STAGES

    acts = [
        Act(0.0, "create"),
        Act(100.0, "crash-driver", CRASH_STAGES.index("sink")),
        Act(109.5, "produce", 807),
    ]
    assert not run(16, acts).violations  # the real writer: once
    _without_progress_check(monkeypatch)
    outcome = run(16, acts)
    assert outcome.violations and outcome.violations[0].rule == "dead-letter duplicate"


def test_the_simulation_sees_a_poison_record_dead_lettered_twice_after_a_kill_between_two(
    monkeypatch,
):
    """A driver killed between two partitions' dead-letter transactions of one batch: the
    restored driver runs the batch again; only the progress check keeps the first
    partition's poison records from being written twice."""
    from simulation.acts import CRASH_STAGES

    acts = [
        Act(0.0, "create"),
        Act(100.0, "crash-driver", CRASH_STAGES.index("dead-letter+1")),
        Act(109.5, "produce", 806),  # partition 0
        Act(109.5, "produce", 807),  # partition 1
    ]
    outcome = run(16, acts)
    assert not outcome.violations
    assert any("crashed at dead-letter+1" in line for line in outcome.trace)
    _without_progress_check(monkeypatch)
    outcome = run(16, acts)
    assert outcome.violations and outcome.violations[0].rule == "dead-letter duplicate"


def test_the_simulation_sees_a_poison_record_dead_lettered_twice_after_a_reset(monkeypatch):
    """Found by `python -m simulation 0-63` with the hole (seed 16, shrunk to these acts): an
    offsets action resets the group, the job reads the poison records again."""
    acts = [Act(0.0, "create", 1), Act(109.5, "produce", 807), Act(214.4, "offsets-action", 569)]
    assert not run(16, acts).violations
    _without_progress_check(monkeypatch)
    outcome = run(16, acts)
    assert outcome.violations and outcome.violations[0].rule == "dead-letter duplicate"


def test_the_simulation_sees_a_failure_told_by_two_warnings(monkeypatch):
    """Found by `python -m simulation 0-63` once it counted Warnings per driver pod (seed 9,
    shrunk to these acts): the running driver crashed, its standby took over, and the
    hand-over's next step told the failure again. Fixed, it is told once; a rule that tells
    every driver failure twice (broken on purpose) is caught."""
    from simulation.acts import CRASH_STAGES
    from streamingjob_operator.rules import phases

    # the stage by name: the shrunk history's 272 meant "plan" among the stages of its day
    crash = Act(187.2, "crash-driver", CRASH_STAGES.index("plan"))
    acts = [Act(0.0, "create"), Act(149.0, "standby", 494), crash]
    assert not run(9, acts).violations
    original = phases.on_driver_gone

    def told_twice(job, d, *args, **kwargs):
        d = original(job, d, *args, **kwargs)
        d.events += [e for e in d.events if e.reason == "DriverFailed"]
        return d

    monkeypatch.setattr(phases, "on_driver_gone", told_twice)
    outcome = run(9, acts)
    assert outcome.violations and outcome.violations[0].rule == "told twice"


def _kafka_sink_acts(stage: str, redeploy_at: float | None = None) -> list[Act]:
    """Seed 4's job writes to the exactly-once Kafka sink; its driver is killed at `stage`
    of the first batch, which reads three partitions (three transactions)."""
    from simulation.acts import CRASH_STAGES

    acts = [
        Act(0.0, "create"),
        Act(1.0, "crash-driver", CRASH_STAGES.index(stage)),
        *(Act(5.0, "produce", 800 + p) for p in range(3)),
    ]
    return acts + ([Act(redeploy_at, "redeploy")] if redeploy_at is not None else [])


@pytest.mark.parametrize("stage", ["commit", "sink+1"])
def test_the_simulation_sees_kafka_sink_output_twice_after_a_restore(monkeypatch, stage):
    """A driver killed after all (commit) or some (sink+1) of its batch's sink transactions,
    before commits/N: the restored driver runs the batch again, and without the replay
    decision (`sink_rules.already_committed`) writes the committed ranges a second time."""
    from simulation import kafka_out

    outcome = run(4, _kafka_sink_acts(stage))
    assert not outcome.violations
    assert any(f"crashed at {stage}" in line for line in outcome.trace)
    assert any("start -> restore" in line for line in outcome.trace)
    monkeypatch.setattr(kafka_out, "already_committed", lambda *_: False)
    outcome = run(4, _kafka_sink_acts(stage))
    assert outcome.violations and outcome.violations[0].rule == "duplicate"


def test_the_simulation_sees_kafka_sink_output_twice_after_a_redeploy(monkeypatch):
    """A driver killed after its batch's sink transactions, before commits/N, then a
    redeploy: the new epoch's catch-up must move the group past the committed ranges
    (`eos_progress.merge`), or the new checkpoint writes them again."""
    from simulation import kafka_out

    outcome = run(4, _kafka_sink_acts("commit", redeploy_at=18.0))
    assert not outcome.violations
    assert any("e2-a1-driver: start -> catch-up" in line for line in outcome.trace)
    monkeypatch.setattr(kafka_out, "merge", lambda durable, _planned, _committed: durable)
    outcome = run(4, _kafka_sink_acts("commit", redeploy_at=18.0))
    assert outcome.violations and outcome.violations[0].rule == "duplicate"


def test_the_simulation_sees_an_iceberg_batch_twice_when_expiry_hides_its_snapshot(monkeypatch):
    """Seed 0's job writes an Iceberg table; its driver is killed after the table's commit of
    a batch, before commits/N, while maintenance (a compaction's commit, then snapshot
    expiry) runs beside it. The restore finds the batch through the table property the same
    commit set (`iceberg_sink.recorded_batch`); read from snapshot summaries alone, as
    Flink's sink does, the batch is gone with its snapshot and is written again."""
    from simulation import data
    from simulation.acts import CRASH_STAGES
    from spark_app.sinks import iceberg_sink

    acts = [
        Act(0.0, "create"),
        *(Act(5.0, "produce", 800 + p) for p in range(3)),
        Act(30.0, "crash-driver", CRASH_STAGES.index("commit")),
        *(Act(31.0, "produce", 810 + p) for p in range(3)),
        *(Act(round(34 + 0.5 * i, 1), "table-maintenance") for i in range(16)),
    ]
    outcome = run(0, acts)
    assert not outcome.violations
    assert any("crashed at commit" in line for line in outcome.trace)

    def summaries_only(_properties, summaries, app):
        return iceberg_sink.recorded_batch({}, summaries, app)

    monkeypatch.setattr(data, "recorded_batch", summaries_only)
    outcome = run(0, acts)
    assert outcome.violations and outcome.violations[0].rule == "duplicate"


def test_the_simulation_sees_records_retention_deleted_skipped_silently(monkeypatch):
    """Found by `python -m simulation 0-95` once retention could delete records (seed 10,
    shrunk to these acts): the job deleted and created again after retention passed its
    group's committed offsets; the reset strategy started it at the log start and the group
    committed past records nobody read, told nowhere. Now the fresh start checks the offset
    it resumes from (`data_loss.resumed_from`): failOnDataLoss=true fails naming them, and
    switched to false it skips and counts them (status `DataLoss`, an Event)."""
    from spark_app.source import data_loss

    acts = [
        Act(0.0, "create", 1),
        Act(5.7, "node-freeze", 435),
        Act(6.4, "leader-partition", 488),
        Act(10.6, "produce", 992),
        Act(15.4, "produce", 953),
        Act(66.2, "redeploy", 333),
        Act(82.8, "produce", 156),
        Act(85.1, "produce", 129),
        Act(138.2, "retention", 614),
        Act(298.0, "delete", 615),
        Act(400.0, "create", 336),
    ]
    outcome = run(10, acts)
    assert not outcome.violations
    assert any("were deleted by retention" in line for line in outcome.trace)
    skipped = run(10, [*acts, Act(500.0, "fail-on-data-loss")])
    assert not skipped.violations  # converged: Running, the group at the log end

    def the_start_chosen(decisions):
        return {tp: d.offset for tp, d in decisions.items()}

    monkeypatch.setattr(data_loss, "resumed_from", the_start_chosen)
    outcome = run(10, acts)
    assert outcome.violations and outcome.violations[0].rule == "lost"


def test_the_simulation_sees_a_failure_that_raced_its_deletion_told_nowhere(monkeypatch):
    """Found by `python -m simulation 0-95` (seed 78, shrunk to these acts): a redeploy's
    reconcile saw the driver running and deleted it; the driver had just failed, and its pod
    went with the deletion before any list showed its end. Its last state reaches the
    operator through the pod watch (`Seen.driver_event`) and is told once; without it, no
    Event names the failure."""
    from streamingjob_operator.seen import Seen

    acts = [
        Act(0.0, "create"),
        Act(2.6, "offsets-action", 434),
        Act(222.9, "handover-mode", 721),
        Act(510.4, "crash-driver", 673),
        Act(510.8, "redeploy", 656),
    ]
    assert not run(78, acts).violations
    monkeypatch.setattr(Seen, "driver_event", lambda self, namespace, job, body: None)
    outcome = run(78, acts)
    assert outcome.violations and outcome.violations[0].rule == "unreported"


def test_the_simulation_sees_a_driver_placed_on_a_node_counted_lost(monkeypatch):
    """Found by `python -m simulation 0-127` once its scheduler took a silent node until the
    node lifecycle controller's 40 s mark (seed 80, shrunk): a restart targeted before node-3
    was lost, its driver created after the operator counted node-3 lost (grace 35 s) and
    placed there. Each driver is now created off the nodes counted lost; without that rule
    (broken on purpose), the placement is caught."""
    from streamingjob_operator.rules import handover, phases, standby

    acts = [
        Act(0.0, "create", 1), Act(1.3, "change-job", 279), Act(2.2, "suspend", 591),
        Act(5.8, "offsets-action", 620), Act(24.2, "suspend", 474),
        Act(68.0, "leader-partition", 54), Act(73.9, "pull-fails", 832),
        Act(144.3, "leader-partition", 972), Act(388.9, "redeploy", 213),
        Act(444.3, "operator-upgrade", 199), Act(506.3, "restart", 805),
        Act(507.9, "node-lost", 311),
    ]  # fmt: skip
    assert not run(80, acts).violations
    for module in (phases, standby, handover):
        monkeypatch.setattr(module, "off_lost_nodes", lambda job, avoided: sorted(avoided))
    outcome = run(80, acts)
    assert outcome.violations and outcome.violations[0].rule == "doomed placement"


def _step_load_acts(seed: int) -> list[Act]:
    """A job handed over warm and autoscaled: 2 records/s for 200 s (more than one executor
    reads), then 1 every 2-4 s (less than half of what two read)."""
    import random

    rng = random.Random(seed)
    acts = [Act(0.0, "create", 0), Act(3.0, "autoscaler", 0)]
    t = 5.0
    while t < 800:
        acts.append(Act(t, "produce", (3 if t < 200 else 1) + 20 * rng.randrange(50)))
        t += 2.0 if t < 200 else rng.choice([2.0, 3.0, 4.0])
    return acts


def test_the_simulations_autoscaler_follows_a_step_load_once_per_step(monkeypatch):
    """The autoscaler act reaches decisions (its window fits the operator's readings) and each
    step of the load is one rescale, one warm hand-over; a relaunch the spec does not call
    for (the pod hash forgotten at a hand-over's go, on purpose) is caught."""
    from simulation import world
    from streamingjob_operator.rules import handover

    monkeypatch.setattr(world, "WARM_UPS", (45.0,))  # readings come during each hand-over
    outcome = run(2, _step_load_acts(2))  # seed 2: handed over warm (drawn)
    assert not outcome.violations, story(outcome)
    started = [line.split()[1] for line in outcome.trace if " started on " in line]
    assert started == ["orders-e1-a1-driver", "orders-e1-a2-driver", "orders-e1-a3-driver"]
    assert sum("-> waiting" in line for line in outcome.trace) == 2  # each waited for a go

    started_go = handover._started

    def forgetful(job, d, waiting):
        d.status.deployed_pod_hash = "forgotten"
        return started_go(job, d, waiting)

    monkeypatch.setattr(handover, "_started", forgetful)
    outcome = run(2, _step_load_acts(2))  # seed 2: handed over warm (drawn)
    assert outcome.violations and outcome.violations[0].rule == "needless relaunch"


def test_the_simulation_sees_a_thawed_nodes_driver_forced_out_after_an_outage(monkeypatch):
    """Found by `python -m simulation 0-63` once a node could freeze and thaw (seed 39,
    shrunk): node-3 frozen for 91 s while the leader changed twice, thawed during an API-server
    outage; the leader after it counted the driver's old Ready=Unknown mark from before the
    outage and forced the healthy driver out. A mark now counts from the view's start; with
    the old count (on purpose) the history breaks the fencing rule again."""
    from streamingjob_operator.io.nodes import NodeTracker

    acts = [
        Act(0.0, "create", 1), Act(197.9, "node-freeze", 871), Act(217.6, "leader-pause", 983),
        Act(264.2, "leader-pause", 40), Act(267.5, "api-outage", 954),
    ]  # fmt: skip
    assert not run(39, acts).violations
    monkeypatch.setattr(NodeTracker, "view_since", lambda self: datetime.min.replace(tzinfo=UTC))
    outcome = run(39, acts)
    assert outcome.violations and outcome.violations[0].rule == "unfenced"


SEED_212 = [
    Act(0.0, "create", 1), Act(4.0, "standby", 112), Act(9.0, "operator-crash", 735),
    Act(65.7, "restart", 121), Act(365.9, "handover-mode", 171),
    Act(492.8, "handover-mode", 480), Act(523.2, "redeploy", 118),
    Act(525.3, "fail-on-data-loss", 546),
]  # fmt: skip
SEED_704 = [
    Act(0.0, "create"), Act(10.1, "handover-mode", 852), Act(98.0, "fail-on-data-loss", 235),
    Act(173.8, "standby", 851), Act(207.7, "fail-on-data-loss", 815),
    Act(221.8, "fail-on-data-loss", 820),
]  # fmt: skip


def test_the_simulation_sees_a_change_before_a_hand_overs_driver_relaunch_it_needlessly(
    monkeypatch,
):
    """Found by `python -m simulation 0-255` (seed 212, shrunk to these acts; seed 624 is
    the same with a pod setting): a change came between a redeploy and the creation of its
    waiting driver, which was then built from the newer spec and, once it had taken over,
    restarted for the change it already ran. Such a hand-over is now undone and the act
    decided anew against what runs; without that rule (cut on purpose), the relaunch is
    caught. Seed 704 (`0-1279`) found the first form of the fix wanting: it replaced the
    hand-over by another one also when the change was reverted before the driver existed."""
    from streamingjob_operator.rules import handover

    assert not run(704, SEED_704).violations
    assert not run(212, SEED_212).violations
    monkeypatch.setattr(handover, "unlaunched", lambda st, pods: None)
    outcome = run(212, SEED_212)
    assert outcome.violations and outcome.violations[0].rule == "needless relaunch"


def test_the_simulation_sees_a_group_change_restore_that_never_ran_own_the_checkpoint(
    monkeypatch,
):
    """Found by `python -m simulation 0-1279` (seed 1140, shrunk to these acts): a group
    change under last-state targeted a restore of epoch 1, the operator crashed before it
    ran, and a stateless change then redeployed: the new epoch caught up from epoch 1's
    checkpoint into the new group, whose reads it never held. The checkpoint's group is now
    the group of the run that started on it (the runner's report); with the old rule (the
    restore's target took the new group at once), the catch-up is caught."""
    from streamingjob_operator.rules import epochs, phases

    acts = [
        Act(0.0, "create", 1), Act(133.4, "operator-crash", 417), Act(352.1, "upgrade-mode", 932),
        Act(354.3, "upgrade-mode", 43), Act(441.3, "produce", 122),
        Act(456.7, "change-group", 998), Act(458.8, "upgrade-mode", 158),
        Act(472.2, "change-job", 720),
    ]  # fmt: skip
    assert not run(1140, acts).violations

    def old_rule(job, st, epoch, attempt):
        epochs.set_target(job, st, epoch, attempt)
        st.checkpoint_group_id = job.spec.job.source.group_id or ""

    monkeypatch.setattr(phases, "set_target", old_rule)
    outcome = run(1140, acts)
    assert outcome.violations and outcome.violations[0].rule == "catch-up across groups"


def test_the_simulation_sees_a_new_leader_force_out_a_driver_an_outage_kept_from_stopping(
    monkeypatch,
):
    """Found by `python -m simulation 0-1279` (seed 1080, shrunk to these acts): the leader
    asked a driver to stop (a redeploy), its node froze, the leader was cut off and the API
    server went out; the other replica's first look after the outage, with no renewal seen
    yet, counted the driver's deletion as unconfirmed since before the outage and forced it
    out while its node was about to thaw. A deletion now counts from when this operator's
    view could have seen a kubelet confirm it; with the old count (on purpose) the history
    breaks the fencing rule again."""
    from streamingjob_operator.io.nodes import NodeTracker

    acts = [
        Act(0.0, "create"), Act(24.0, "node-freeze", 330), Act(438.1, "standby", 649),
        Act(439.0, "produce", 326), Act(439.4, "redeploy", 403),
        Act(439.9, "handover-mode", 363), Act(442.6, "leader-partition", 384),
        Act(444.1, "node-freeze", 793), Act(445.6, "api-outage", 224),
    ]  # fmt: skip
    assert not run(1080, acts).violations
    monkeypatch.setattr(
        NodeTracker, "confirmable_since", lambda self: datetime.min.replace(tzinfo=UTC)
    )
    outcome = run(1080, acts)
    assert outcome.violations and outcome.violations[0].rule == "unfenced"


def test_the_simulation_sees_a_group_offset_past_a_truncated_log_read_as_a_recreated_topic(
    monkeypatch,
):
    """Found by `python -m simulation 0-47` once leaders could be elected unclean (seed 23):
    the job read orders-1 to 10 and its group committed there; an unclean election cut the
    log to 8; the job failed on it (failOnDataLoss=true); a resume redeployed, and its fresh
    start read the offset past the end as a recreated topic's and read 1..7 again from the
    log start. Now a committed offset with its leader epoch is kept (`resolve_start`), as a
    restore keeps its checkpoint's: the fresh start fails on it too."""
    from spark_app.api import offsets as off

    acts = [
        Act(0.0, "create", 1),
        Act(49.8, "upgrade-mode", 782),
        Act(131.0, "produce", 429),
        Act(521.1, "leader-election", 295),
        Act(544.9, "offsets-action", 419),
    ]
    outcome = run(23, acts)
    assert not outcome.violations
    assert any("orders-1 ends at 8, before offset 10" in line for line in outcome.trace)
    resolve = off.resolve_start

    def without_the_epoch(*args, committed_epoch=None):
        return resolve(*args[:7])

    monkeypatch.setattr(off, "resolve_start", without_the_epoch)
    outcome = run(23, acts)
    assert outcome.violations and outcome.violations[0].rule == "duplicate"


def test_the_simulation_sees_a_new_leaders_poison_record_below_the_dead_letter_progress(
    monkeypatch,
):
    """Found by `python -m simulation 48-399` once leaders could be elected unclean (seed
    49, shrunk to these acts): an unclean election cut orders-0 from 17 to 12 and the new
    leader wrote 12..22; the restored driver's read went on from 12 (failOnDataLoss=false),
    but the dead-letter writer skipped the new poison record 12 as below its progress (17,
    an older leader's records): neither in the sink nor dead-lettered. Now a read that began
    below its batch's start is named in the progress it commits (`dead_letter.read_name`),
    and another read's progress skips none of its records."""
    acts = [
        Act(0.0, "create", 0),
        Act(53.6, "produce", 936),
        Act(329.5, "fail-on-data-loss", 894),
        Act(438.3, "leader-election", 880),
        Act(446.5, "produce", 650),
    ]
    assert not run(49, acts).violations
    original = dead_letter.transaction_of
    monkeypatch.setattr(
        dead_letter,
        "transaction_of",
        lambda records, progress, end, read, kept=None: original(records, progress, end, ""),
    )
    outcome = run(49, acts)
    assert outcome.violations and outcome.violations[0].rule == "lost"


def test_the_simulation_sees_a_failure_a_suspend_met_told_nowhere(monkeypatch):
    """Found by `python -m simulation 0-399` once the act list grew (seed 219): a restart
    (failOnDataLoss switched) targeted attempt 2, an offsets action suspended the job, the
    leader crashed before its delete of attempt 1 reached the API server, attempt 1 then
    failed; the next leader suspended the job and removed the pod, telling nothing. Now a
    suspend tells the failures it finds (`decide._tell_replaced_failures`)."""

    acts = [
        Act(0.0, "create", 1),
        Act(436.6, "operator-crash", 997),
        Act(480.5, "crash-driver", 188),
        Act(512.7, "produce", 239),
        Act(513.8, "fail-on-data-loss", 41),
        Act(515.8, "offsets-action", 632),
    ]
    assert not run(219, acts).violations
    monkeypatch.setattr(decide, "_tell_replaced_failures", lambda job, d: None)
    outcome = run(219, acts)
    assert outcome.violations and outcome.violations[0].rule == "unreported"


# seed 49's history to a batch planned orders-0 [17, 28) in leader epoch 0, and an unclean
# election that cuts the log to 23 before the batch's read
PLANNED_THEN_CUT = [
    Act(0.0, "create", 0),
    Act(53.6, "produce", 936),
    Act(329.5, "fail-on-data-loss", 894),
    Act(400.0, "produce", 650),
    Act(400.15, "leader-election", 880),
]


def test_the_simulation_sees_an_unclean_election_between_a_batchs_plan_and_its_read(
    monkeypatch,
):
    """A history built on seed 49's: batch N planned orders-0 [17, 28) with the leader epoch
    of that moment; an unclean election cut the log to 23 and the new leader wrote 23..33
    before N's read, which read 17..27 (the new leader's from 23). Batch N+1 starts at 28
    with N's end epoch, whose log ends at 23 now: it read on from 23 (failOnDataLoss=false)
    and wrote 23..27 again. Now a read ends at a later leader's first record below its end
    (`partition_range.written_after_the_plan`), so consecutive reads meet in the log as it is."""
    acts = [*PLANNED_THEN_CUT, Act(400.16, "produce", 650)]
    assert not run(49, acts).violations
    monkeypatch.setattr(losses, "written_after_the_plan", lambda p, epoch: False)
    outcome = run(49, acts)
    assert outcome.violations and outcome.violations[0].rule == "duplicate"


def test_the_simulation_sees_an_unmoved_partition_stamped_with_a_later_leaders_epoch(
    monkeypatch,
):
    """Found by `python -m simulation 0-1279` (seed 204, five acts): the job read orders-1 to
    2; an unclean election cut it to 0; the new leader wrote 0..1 again. The next batch left
    orders-1 at 2 (the log end) but stamped 2 with the new leader's epoch, so no read found
    the truncation and the group committed the new leader's 0..1 unread. Now a partition a
    batch does not move keeps its start's epoch (`offsets.plan_end`)."""
    from spark_app.api import offsets

    acts = [
        Act(0.0, "create", 1),
        Act(258.5, "produce", 181),
        Act(375.6, "produce", 818),
        Act(375.8, "leader-election", 387),
        Act(428.1, "produce", 41),
    ]
    assert not run(204, acts).violations

    def stamped_anew(begin, begin_epochs, log_ends, epochs, max_rows):
        end = offsets.rate_limit(begin, log_ends, max_rows) if max_rows else dict(log_ends)
        end = {tp: max(o, begin.get(tp, 0)) for tp, o in end.items()}
        return end, offsets.epochs_at(end, log_ends, epochs)

    monkeypatch.setattr(offsets, "plan_end", stamped_anew)
    outcome = run(204, acts)
    assert outcome.violations and outcome.violations[0].rule == "lost"


def test_a_count_that_grows_twice_in_a_run_is_told_once_per_growth():
    """A slip of the checker's (seed 215 of `0-1279`): two unclean elections each cut a log
    below the job's position, and the operator told each growth of the run's skipped offsets
    in its own Event ("3 more offsets skipped (6 in this run)"), as it should; the checker
    counted the second as the first told again."""
    acts = [
        Act(0.0, "create", 1),
        Act(0.2, "fail-on-data-loss", 415),
        Act(40.7, "produce", 384),
        Act(47.5, "produce", 439),
        Act(479.6, "leader-election", 864),
        Act(594.6, "leader-election", 473),
    ]
    assert not run(215, acts).violations


def test_a_change_of_group_under_last_state_carries_where_the_position_began():
    """A slip of the checker's (seed 674 of `0-1279`): a suspended job changed its group
    twice, was resumed (a fresh start in the second group, from the log start retention had
    moved), then changed back to the first under last-state. The checkpoint's position came
    along with where it began, but the checker kept what the first group had carried from
    the job's first group at the first change (offset 0), and counted what retention deleted
    before the position began as lost."""
    acts = [
        Act(0.0, "create", 1),
        Act(16.5, "suspend", 793),
        Act(145.5, "produce", 988),
        Act(173.2, "retention", 146),
        Act(259.9, "change-group", 615),
        Act(275.5, "change-group", 767),
        Act(527.2, "resume", 86),
        Act(573.3, "change-group", 687),
    ]
    assert not run(674, acts).violations


def test_the_simulation_sees_a_dead_letter_progress_of_an_older_leaders_log(monkeypatch):
    """Found by `python -m simulation 0-1279` (seed 775, five acts): the job read orders-1 to
    10; an unclean election cut it to 5 and the new leader wrote 5.. again; an offsets action
    moved the group back to the log start, and the redeploy's read skipped the new leader's
    poison record 7 as below the dead-letter progress (10), which the older leader's records
    made. Now the progress keeps the leader epoch its read was planned in, and a read of a
    later one asks where that epoch's log ends (`dead_letter.progress_epoch_to_check`)."""
    acts = [
        Act(0.0, "create", 1),
        Act(136.0, "produce", 249),
        Act(261.2, "leader-election", 151),
        Act(289.7, "offsets-action", 650),
        Act(334.6, "produce", 889),
    ]
    assert not run(775, acts).violations
    monkeypatch.setattr(
        dead_letter, "progress_epoch_to_check", lambda progress, records, read: None
    )
    outcome = run(775, acts)
    assert outcome.violations and outcome.violations[0].rule == "lost"


def test_the_simulation_sees_a_read_wait_past_where_an_unclean_election_cut_the_log(
    monkeypatch,
):
    """Seed 215's open finding, on a history built on seed 49's: batch N planned orders-0
    [17, 28) in leader epoch 0; an unclean election cut the log to 23 before N's read and
    the topic stayed idle. The read waited for 23..27, failed after pollTimeoutMs, and each
    restore waited again: the job never caught up. Now a read stalled for pollTimeoutMs asks
    where its plan's leader's log ends and ends there (`leader_epochs.ended_with_its_epoch`)."""
    acts = PLANNED_THEN_CUT
    assert not run(49, acts).violations
    monkeypatch.setattr(losses.LossRules, "_ended_with_its_epoch", lambda self, w, p: False)
    outcome = run(49, acts)
    assert outcome.violations and outcome.violations[0].rule == "no convergence"


def test_the_simulation_sees_a_standby_left_warming_for_a_job_held_invalid(monkeypatch):
    """Found by `python -m simulation 1280-2559` (seed 2307, five acts): a standby took over
    on a restart and exited 2 (a refused spec), so the job is held Invalid; the standby
    launched for it (attempt 3) stayed Warming, and its node's loss was told nowhere. Now a
    job held Invalid keeps no standby, as a Failed one keeps none (`decide`)."""
    acts = [
        Act(0.0, "create", 1),
        Act(204.6, "standby", 822),
        Act(255.0, "driver-exit", 441),
        Act(499.3, "restart", 493),
        Act(576.4, "node-lost", 709),
    ]
    assert not run(2307, acts).violations
    monkeypatch.setattr(decide, "HELD", ("Failed", "Completed"))
    outcome = run(2307, acts)
    assert outcome.violations and outcome.violations[0].rule == "unreported"
