"""The cluster's nodes in the simulated world: kubelets that renew their leases (or stop: a
node lost, a node frozen, a control-plane outage silencing them all) and the node lifecycle
controller that marks the pods of a node whose lease went stale. Mixed into world.World,
whose API server, drivers and pods it reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamingjob_operator.rules.observed import iso
from streamingjob_operator.rules.timing import watch_quiet_seconds

from .cluster import Server
from .driver import Driver
from .driver_world import Failing
from .timeline import Timeline

LEASE_RENEW_SECONDS = 10.0
NODE_MONITOR_GRACE = 40.0  # the node lifecycle controller's: then it marks and taints a node
LEAST_GRACE = 35.0  # the least nodeLostGraceSeconds the operator accepts
QUIET = watch_quiet_seconds(LEASE_RENEW_SECONDS)  # no renewal at all: the view is distrusted


@dataclass
class Node:
    name: str
    alive: bool = True
    phase: float = 0.0  # when in each renewal interval its kubelet renews
    renewed: float = 0.0  # its lease's last renewal
    seen: float = 0.0  # the last renewal the operators' watches have delivered
    frozen_until: float = -1.0  # its kubelet and processes stand still until then


class Nodes(Timeline):
    """The nodes and their leases (World's part): every method runs inside World, whose
    fields these are."""

    server: Server
    nodes: dict[str, Node]
    drivers: dict[str, Driver]
    api_back_at: float
    api_down_at: float
    watch_stalled_until: float

    if TYPE_CHECKING:  # World's own

        def pods(self) -> list[dict[str, Any]]: ...

        def pod(self, name: str) -> dict[str, Any] | None: ...

        def pod_changed(self, pod: dict[str, Any]) -> None: ...

        def failed(self, driver: Failing, cause: str) -> None: ...

    def add_node(self) -> Node:
        node = Node(f"node-{len(self.nodes) + 1}", phase=self.delay(0, LEASE_RENEW_SECONDS))
        node.renewed = node.seen = self.clock.t
        self.nodes[node.name] = node
        self.at(node.phase, "renew", node.name)
        return node

    def renew(self, name: str) -> None:
        node = self.nodes[name]
        if not node.alive:
            return
        self.at(LEASE_RENEW_SECONDS, "renew", name)
        if self.server.down() or self.frozen(name):
            return  # the kubelet cannot reach the API server, or stands still: no renewal
        node.renewed = self.clock.t
        for pod in self.pods():  # its pods' Ready again (the kubelet's status sync)
            conditions = pod["status"].get("conditions") or []
            if pod["spec"].get("nodeName") == name and conditions:
                pod["status"]["conditions"] = []
                self.pod_changed(pod)
        lease = {"metadata": {"name": name}, "spec": {"renewTime": iso(self.clock())}}
        lease["spec"]["renewTime"] += f"#{self.clock.t}"  # distinct even within a second
        self.at(max(self.watch_stalled_until - self.clock.t, 0) + self.delay(0, 1), "lease", lease)

    def kill_node(self, name: str) -> None:
        node = self.nodes[name]
        node.alive = False
        for driver in self.drivers.values():
            if driver.node == name and driver.alive:
                driver.exit(137)  # gone with the node; its pod object stays as it was
                self.failed(driver, "NodeLost")
        self.log(f"node {name} lost")
        self.add_node()  # the cluster autoscaler's replacement

    def freeze_node(self, name: str, seconds: float) -> None:
        """The node stands still (a VM paused, a kernel stalled: `docker pause` on kind): no
        renewal, no kubelet, its processes halted where they were. When it thaws they go on
        from there, and its kubelet kills the ones whose pods the API server no longer has
        a moment later: the window in which a stale driver may still write. No failure is
        the operator's to tell: a node back within the grace lost nothing, and a driver on a
        node silent long enough to count as lost may be replaced before what it does after
        the thaw (a crash) reaches its pod."""
        node = self.nodes[name]
        node.frozen_until = thaw = self.clock.t + seconds
        # silent from its last renewal to the first one after the thaw (the renewals' phase)
        if thaw + (node.phase - thaw) % LEASE_RENEW_SECONDS - node.renewed >= LEAST_GRACE:
            for driver in self.drivers.values():
                driver.counted_lost |= driver.node == name and driver.alive
        self.log(f"node {name} frozen for {seconds:g} s")
        self.at(seconds, "thaw", name)

    def frozen(self, node: str) -> bool:
        return self.clock.t < self.nodes[node].frozen_until

    def silent_for_a_grace(self, node: Node) -> bool:
        """No renewal of its kubelet has reached the operators for the least grace they accept:
        frozen, or thawed but its renewal not seen yet. A driver there may be forced out (the
        grace's trade-off: what it writes on, the checkpoint's logs arbitrate). Counted from
        the control plane's return after an outage of the operators' quiet window or more
        (it silences every kubelet); a shorter one counts as silence, as the least grace
        allows for (timing.check_node_grace; seed 230 of stop 59)."""
        long_outage = self.api_back_at - self.api_down_at >= QUIET
        since = max(node.seen, self.api_back_at) if long_outage else node.seen
        return self.clock.t - since >= LEAST_GRACE

    def _until_thawed(self, node: str, kind: str, arg: Any) -> bool:
        """Holds an event of a frozen node's kubelet or process until it thaws."""
        if not self.frozen(node):
            return False
        self.at(self.nodes[node].frozen_until - self.clock.t + self.delay(0, 2), kind, arg)
        return True

    def thaw(self, name: str) -> None:
        self.log(f"node {name} thawed")
        for uid, driver in self.drivers.items():
            if driver.node == name and driver.alive and self.orphaned(driver):
                self.at(self.delay(1, 5), "kill", uid)  # the kubelet's sync finds it orphaned

    def orphaned(self, driver: Driver) -> bool:
        """Its pod is gone from the API server (force-deleted): a process its kubelet has
        yet to kill."""
        pod = self.pod(driver.pod)
        return pod is None or pod["metadata"]["uid"] != driver.uid_of_pod

    def node_lifecycle(self) -> None:
        """The node lifecycle controller: pods of a node whose lease is older than its
        node-monitor grace (40 s) get Ready=Unknown, unless every node is that old (its full
        disruption mode: the control plane, not the nodes, is suspect)."""
        if self.server.down():
            self.api_back_at = self.server.faults.outage_until
            return
        stale = self.tainted()
        for pod in self.pods():
            if pod["spec"].get("nodeName") in stale and pod["status"].get("phase") == "Running":
                conditions = pod["status"].setdefault("conditions", [])
                if not any(c.get("status") == "Unknown" for c in conditions):
                    since = iso(self.clock())
                    conditions.append(
                        {"type": "Ready", "status": "Unknown", "lastTransitionTime": since}
                    )
                    self.pod_changed(pod)

    def tainted(self) -> set[str]:
        """The nodes the controller has marked (their pods Unknown, no new pods): leases
        older than its grace, counted from when it saw them as of the control plane's return;
        none when every node is that old (its full disruption mode: the control plane, not
        the nodes, is suspect)."""
        seen = {n.name: max(n.renewed, self.api_back_at) for n in self.nodes.values()}
        stale = {name for name, at in seen.items() if self.clock.t - at > NODE_MONITOR_GRACE}
        return set() if len(stale) == len(self.nodes) else stale
