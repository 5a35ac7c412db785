"""What must hold after every event of a history (docs/semantics.md, "The simulation"):

- exactly once: each record appears at most once in what the sink's reader sees (per group:
  a new group starts where the user asked), and every
  record below the group's committed offset appears (the group never runs ahead of durable
  output); across a deletion, only what the deleted job had made durable but not committed
  may appear again;
- poison: a record that cannot be decoded never appears in the sink, and at most once per group
  in the committed dead-letter topic (its copy there counts as read for the group's offsets);
- one reader: never two drivers of the job reading at once, and no reading driver on a live
  node forced out (it would go on writing beside the next);
- a checkpoint belongs to one epoch of one job: a driver restores only its own epoch's;
- names are never reused: no pod name of a job is created twice;
- no needless relaunch: a relaunch for a changed spec (pod settings, the job) follows a
  change of those fields from what the running driver was launched with;
- the autoscaler decides on its own readings: a rescale from N executors is decided while the
  job's driver is one launched with N (not the one a hand-over is replacing);
- one leader: no replica writes once another holds the Lease;
- every failure the world caused reaches status and an Event (reported.py), and one Event:
  no two Warnings of the same reason name the same driver pod (reported.py);
- once faults stop, the job converges: Running (or Suspended), every record read, the group
  committed to the end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from streamingjob_operator.api.naming import LABEL_JOB, driver_pod_name
from streamingjob_operator.api.spec_models import StreamingJobSpec
from streamingjob_operator.rules.epochs import FIELD_CLASSES, REDEPLOY, RESTART

from .data import Checkpoint, Record
from .reported import Reports
from .world import NAMESPACE, World

# The messages of a relaunch for a changed spec (epochs.manual_trigger), and the class of
# fields whose change it names
SPEC_CHANGES = {"pod settings changed": RESTART, "job changed": REDEPLOY}


def same_fields(launched: dict[str, Any], spec: dict[str, Any], klass: str) -> bool:
    """Whether the fields of `klass` are the same in both specs (missing: unset)."""
    fields = StreamingJobSpec.model_fields
    aliases = [fields[name].alias or name for name, k in FIELD_CLASSES.items() if k == klass]
    return all(launched.get(alias) == spec.get(alias) for alias in aliases)


@dataclass(frozen=True)
class Violation:
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


class Checker:
    def __init__(self, world: World, name: str, available_since: Callable[[], float]) -> None:
        self.world = world
        self.name = name
        self.reports = Reports(world, name, available_since)
        self.seen: Counter[Record] = Counter()
        self.seen_by: Counter[tuple[str, int, Record]] = Counter()  # (group, era, record)
        self.eras: Counter[str] = Counter()  # per group: offsets actions that moved it
        # per partition: the offsets below were moved past by an offsets action (whichever
        # records they hold: an offset set by hand keeps no leader epoch, rule 16)
        self.skipped: dict[tuple[str, int], int] = {}
        self.deferred: list[Violation] = []  # found between two checks
        self.allowed: set[Record] = set()  # may appear twice: durable, uncommitted, deleted
        self.visible_count = 0
        self.dead: Counter[tuple[str, Record]] = Counter()  # dead-letter copies, by group
        self.dead_count = 0
        self.dead_read: set[Record] = set()
        self.owners: dict[str, tuple[str, int]] = {}  # checkpoint location -> (uid, epoch)
        self.groups: dict[str, str] = {}  # checkpoint location -> the group its driver read
        self.prefix: dict[tuple[str, str, int], int] = {}  # per group and partition: all
        # offsets below accounted for
        self.group = ""
        self.exists = False
        self.nonce: tuple[Any, Any] | None = None  # (job uid, deployedRedeployNonce) last seen
        self.target = 0  # the epoch targeted then
        self.deletions = 0
        self.told: list[Any] = []  # status.history at the last check
        self.decided = ""  # the time of status.autoscaler.lastDecision at the last check

    # --- what the history tells it -----------------------------------------------------

    def created(self, job: dict[str, Any]) -> None:
        self.group = job["spec"]["job"]["source"]["groupId"]
        self.exists = True

    def _gone(self, group: str) -> None:
        """The job was deleted: what it made durable but the group does not have yet may be
        read again by a job created later under the same name (nothing carries it over)."""
        for group_read, record in self.world.sinks.written:
            topic, partition, offset, _ = record
            if offset >= self.world.kafka.committed(group_read).get((topic, partition), 0):
                self.allowed.add(record)

    # --- the checks ----------------------------------------------------------------------

    def group_changed(self, group: str, job: dict[str, Any]) -> None:
        """A new group starts where the user asked (its own offsets, or the reset strategy):
        it may read again what another group read (duplicates count per group). Under
        last-state the job keeps its checkpoint, and so its position, across the change: the
        new group adopts the checkpoints the job has."""
        old, self.group = self.group, group
        # what the old group read and wrote past its committed offsets, a fresh start that
        # returns to it reads again (its own offsets are its position: rule 6)
        self._gone(old)
        if job.get("spec", {}).get("upgradeMode") == "last-state":
            starts = self.world.kafka.first_start  # the position's origin replaces the group's
            kept = {key: o for key, o in starts.items() if key[0] != group}
            starts.clear()
            starts.update({**kept, **{(group, tp): o for (g, tp), o in kept.items() if g == old}})
            status = job.get("status") or {}
            chain = [status.get("checkpointLocation"), status.get("previousCheckpointLocation")]
            for location in [*chain, *status.get("olderCheckpointLocations", [])]:
                if location:
                    self.groups[location] = group

    def offsets_moved(self, group: str, moved: dict[tuple[str, int], int]) -> None:
        """An offsets action set the group where the user asked: what it reads from there
        may repeat what it read before (a new era of the group), and what it moved past is
        skipped on purpose (never lost)."""
        self.deferred += self._exactly_once()  # the rows before the move: the old era
        self.eras[group] += 1
        for tp, offset in moved.items():
            self.skipped[tp] = max(offset, self.skipped.get(tp, 0))

    def check(self) -> list[Violation]:
        if self.exists and self.world.server.get("StreamingJob", NAMESPACE, self.name) is None:
            self.exists = False
            self._gone(self.group)
        found, self.deferred = self.deferred, []
        found += self._poison() + self._exactly_once() + self._one_reader()
        found += self._own_checkpoint() + self._names() + self._fenced()
        found += self._redeploys_start_fresh() + self._needless_relaunches()
        found += self._rescales_on_own_readings()
        found += [Violation("two leaders", what) for what in self.world.server.deposed]
        self.world.server.deposed.clear()
        found += [Violation("told twice", what) for what in self.reports.told_twice()]
        return found + [Violation("unreported", what) for what in self.reports.check()]

    def _redeploys_start_fresh(self) -> list[Violation]:
        """The decision table: a new redeployNonce, taken up (status.deployedRedeployNonce),
        targets a new epoch (fresh, from the group's offsets), in every state, a resume too."""
        job = self.world.server.get("StreamingJob", NAMESPACE, self.name)
        status = (job or {}).get("status") or {}
        handover = status.get("handover") or {}
        target = max(status.get("epoch", 0), handover.get("epoch", 0))
        nonce = (job or {}).get("metadata", {}).get("uid"), status.get("deployedRedeployNonce")
        before = self.nonce or (None, None)
        found = []
        taken_up = before[0] == nonce[0] and None not in (before[1], nonce[1])
        if taken_up and before[1] != nonce[1] and target <= self.target:
            found.append(
                Violation(
                    "redeploy restored",
                    f"redeployNonce {nonce[1]} taken up in epoch {target} (before: "
                    f"{self.target}): a redeploy must start a new epoch",
                )
            )
        self.nonce, self.target = nonce, target
        return found

    def _needless_relaunches(self) -> list[Violation]:
        """A relaunch for a changed spec replaces a driver launched with the same fields of
        that class (epochs.FIELD_CLASSES) as the spec now: a restore that changes nothing,
        and a rescale's step taken twice. The replaced driver is the one the entry before
        the relaunch names (a hand-over's go and a relaunch can come in one reconcile)."""
        job = self.world.server.get("StreamingJob", NAMESPACE, self.name)
        history = ((job or {}).get("status") or {}).get("history", [])
        told, self.told = self.told, history
        if job is None:
            return []
        found = []
        for before, entry in pairwise(history):
            klass = next((k for m, k in SPEC_CHANGES.items() if m in entry["message"]), None)
            if entry in told or klass is None:
                continue
            running = driver_pod_name(self.name, before["epoch"], before["attempt"])
            launched = self.world.server.launched_with.get(running)
            if launched is not None and same_fields(launched, job["spec"], klass):
                found.append(
                    Violation(
                        "needless relaunch",
                        f"{entry['reason']} ({entry['message']}) replaces {running}, launched "
                        f"with the same {klass}-class fields",
                    )
                )
        return found

    def _rescales_on_own_readings(self) -> list[Violation]:
        """A new autoscaler decision scales from the executor count the job's driver was
        launched with: the readings it decided on are that driver's."""
        job = self.world.server.get("StreamingJob", NAMESPACE, self.name)
        status = (job or {}).get("status") or {}
        last = (status.get("autoscaler") or {}).get("lastDecision") or {}
        if not last or last.get("time") == self.decided:
            return []
        self.decided = last["time"]
        driver = status.get("driverPod", "")
        launched = self.world.server.launched_with.get(driver)
        if launched is None:
            return []
        count = (launched.get("executor") or {}).get("instances", 1)
        if count == last["fromExecutors"]:
            return []
        return [
            Violation(
                "rescale on another run's readings",
                f"{last['action']} {last['fromExecutors']} -> {last['toExecutors']} decided while "
                f"the job's driver {driver} runs {count} executors",
            )
        ]

    def _stateless(self) -> bool:
        """Under last-state a changed group keeps the job's checkpoint, and so its position."""
        job = self.world.server.get("StreamingJob", NAMESPACE, self.name)
        return job is not None and job["spec"].get("upgradeMode") == "stateless"

    def _fenced(self) -> list[Violation]:
        """A reading driver stops between batches (its final commit) unless its node is lost:
        forcing a live one out lets the next driver start while it still writes. And no
        driver is placed on a node its operator counted lost when it created it (it would
        count as lost at once, and its successor too: world.schedule)."""
        found = [Violation("unfenced", what) for what in self.world.unfenced]
        found += [Violation("doomed placement", what) for what in self.world.doomed]
        self.world.unfenced.clear()
        self.world.doomed.clear()
        return found

    def _poison(self) -> list[Violation]:
        """Each poison record goes to the dead-letter topic once per group and never to the
        sink (across restores, redeploys, hand-overs, re-creations and driver kills)."""
        found = []
        copies = self.world.dead_letter.copies
        for group, record in copies[self.dead_count :]:
            self.dead[(group, record)] += 1
            self.dead_read.add(record)  # read, for the group's offsets (_exactly_once)
            if self.dead[(group, record)] > 1:
                found.append(
                    Violation("dead-letter duplicate", f"{record} twice in the dead-letter topic")
                )
        self.dead_count = len(copies)
        return found

    def _exactly_once(self) -> list[Violation]:
        found = []
        rows = self.world.sinks.written
        for group, record in rows[self.visible_count :]:
            self.seen[record] += 1
            key = (group, self.eras[group], record)
            self.seen_by[key] += 1
            again = record in self.allowed or record in self.world.kafka.reread
            if self.seen_by[key] > 1 and not again:
                found.append(Violation("duplicate", f"{record} appears twice in the sink"))
            if self.world.kafka.poison(record):
                found.append(Violation("poison in sink", f"{record} cannot be decoded"))
        self.visible_count = len(rows)
        for group, committed in self.world.kafka.groups.items():
            for tp, offset in sorted(committed.items()):
                found += self._lost(group, tp, offset)
        return found

    def _lost(self, group: str, tp: tuple[str, int], offset: int) -> list[Violation]:
        """The group's committed offset claims every record below it in the log as it is
        now, of leaders up to the epoch it was committed with (one with no epoch: all): each
        must be accounted for. (A newer leader's records below it, written after an unclean
        election truncated the log, are the next read's: rule 16.)"""
        kafka = self.world.kafka
        key = (group, *tp)
        prefix = min(self.prefix.get(key, 0), kafka.end[tp])  # truncated: written again
        while prefix < kafka.end[tp] and self._accounted(group, kafka.record(tp, prefix)):
            prefix += 1
        self.prefix[key] = prefix
        epoch = kafka.committed_epochs(group).get(tp)
        claimed = epoch is None or kafka.written_in(tp, prefix) <= epoch
        if offset <= prefix or prefix >= kafka.end[tp] or not claimed:
            return []
        below = range(prefix, min(offset, kafka.end[tp]))
        missing = [o for o in below if not self._accounted(group, kafka.record(tp, o))]
        what = f"group {group} committed {tp[0]}-{tp[1]} at {offset} (leader epoch {epoch})"
        told = "are not in the sink (nor dead-lettered, nor told lost)"
        return [Violation("lost", f"{what} but offsets {missing[:5]} {told}")]

    def _accounted(self, group: str, record: Record) -> bool:
        """In the sink, dead-lettered, moved past by an offsets action, deleted by retention
        before the group first started (from the log start), or deleted before any read of it
        and said so (failOnDataLoss=false): counted in status by the driver, or in the
        executor's log when deleted between the plan and the read."""
        kafka = self.world.kafka
        topic, partition, offset, _ = record
        return bool(
            offset < kafka.first_start.get((group, (topic, partition)), 0)
            or self.seen[record]
            or offset < self.skipped.get((topic, partition), 0)
            or record in self.dead_read
            or record in kafka.lost_told
            or record in kafka.lost_logged
        )

    def _one_reader(self) -> list[Violation]:
        readers = self.world.readers(self.name)
        if len(readers) > 1:
            names = ", ".join(f"{d.pod} ({d.stage})" for d in readers)
            return [Violation("two readers", f"drivers reading at once: {names}")]
        return []

    def _own_checkpoint(self) -> list[Violation]:
        found = []
        for driver in self.world.readers(self.name):
            owner = self.owners.setdefault(driver.location, (driver.uid, driver.epoch))
            self.groups[driver.location] = driver.group  # the last to read it (last-state)
            source = self.groups.get(driver.caught_up_from, driver.group)
            if driver.caught_up_from and source != driver.group and self._stateless():
                found.append(
                    Violation(
                        "catch-up across groups",
                        f"{driver.pod} committed to group {driver.group} the position of "
                        f"{driver.caught_up_from}, read by group {source}",
                    )
                )
            # judged once, under the upgrade mode of the catch-up (a later switch to
            # stateless does not make a last-state catch-up wrong: seed 312)
            driver.caught_up_from = ""
            if owner != (driver.uid, driver.epoch) and driver.start_path:
                found.append(
                    Violation(
                        "foreign checkpoint",
                        f"{driver.pod} (job {driver.uid}, epoch {driver.epoch}) runs on "
                        f"{driver.location}, written by job {owner[0]} epoch {owner[1]}",
                    )
                )
                self.owners[driver.location] = (driver.uid, driver.epoch)
        if self.world.files.deletions != self.deletions:  # a cleanup Job ran
            self.deletions = self.world.files.deletions
            for location in list(self.owners):
                if Checkpoint(self.world.files, location).newest("offsets") is None:
                    del self.owners[location]  # deleted: a new owner may come
        return found

    def _names(self) -> list[Violation]:
        reused = [key for key, n in self.world.server.created.items() if n > 1]
        self.world.server.created.clear()  # reported once
        return [
            Violation("name reused", f"pod {name} of job {uid} created twice")
            for uid, name in reused
        ]

    def converged(self) -> list[Violation]:
        return converged(self.world, self.name)


def converged(world: World, name: str) -> list[Violation]:
    """Once faults stop: the job Running (or Suspended, or held Invalid after a refusal)
    with its group at the log end."""
    job = world.server.get("StreamingJob", NAMESPACE, name)
    if job is None:
        return []
    status = job.get("status") or {}
    phase = status.get("phase")
    if phase == "Invalid" and job["metadata"]["uid"] in world.refused:
        return []  # the runner refused the spec: held until a new target (rule 6)
    fails_on_loss = job["spec"]["job"]["source"].get("failOnDataLoss", True)
    if job["metadata"]["uid"] in world.data_loss_held and fails_on_loss:
        return []  # failing on records retention deleted unread: the user decides (rule 15)
    if job["spec"].get("suspend"):
        return [] if phase == "Suspended" else [_stuck(world, name, phase, status)]
    if phase != "Running":
        return [_stuck(world, name, phase, status)]
    group = job["spec"]["job"]["source"]["groupId"]
    committed = world.kafka.committed(group)
    behind = {
        f"{t}-{p}": (committed.get((t, p), 0), end)
        for (t, p), end in world.kafka.end.items()
        if committed.get((t, p), 0) < end  # or past it where no unclean election cut it back
        or (committed.get((t, p), 0) > end and (t, p) not in world.kafka.truncated)
    }
    if behind:
        return [Violation("no convergence", f"group behind the log end: {behind}")]
    return []


def _stuck(world: World, name: str, phase: Any, status: dict[str, Any]) -> Violation:
    pods = [p["metadata"]["name"] for p in world.pods()]
    job_pods = [p for p in world.pods() if p["metadata"]["labels"].get(LABEL_JOB) == name]
    return Violation(
        "no convergence",
        f"phase {phase} ({status.get('message', '')}) after the faults ended; "
        f"pods {pods} ({len(job_pods)} of the job)",
    )
