"""The Helm chart: its CRD copy, `helm lint`, and the rendered manifests (`helm template`).

helm comes from `scripts/k8s-toolchain.sh helm` (built once from the Go module proxy, cached;
after that the call costs well under a second), so these tests never skip for a missing helm.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamingjob_operator.api.models import API_GROUP, PLURAL
from streamingjob_operator.children.rbac import build_role
from streamingjob_operator.settings import PREFIX, OperatorSettings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "streamingjob-operator"
RELEASE, RELEASE_NS = "sj", "streamingjob-system"
SCHEMA_ERROR = "values don't meet the specifications of the schema"

APPLY_VERBS = ("create", "patch", "delete")  # a child: applied, and deleted with its job
# The operator's own API calls (operator/streamingjob_operator/io/k8s.py, plus kopf's watches and
# patches), as (apiGroup, resource, verb):
OPERATOR_CALLS = {
    *((API_GROUP, PLURAL, v) for v in ("get", "list", "watch", "patch")),
    (API_GROUP, f"{PLURAL}/status", "update"),  # KubeApi.replace_status (PUT)
    (API_GROUP, f"{PLURAL}/finalizers", "update"),  # blockOwnerDeletion on children
    *(("", "pods", v) for v in ("list", "watch", "create", "delete")),
    # children: server-side apply (KubeApi.apply: a PATCH, and `create` when it creates)
    *(("", "configmaps", v) for v in ("get", "create", "patch", "delete")),
    *(("", r, v) for r in ("services", "serviceaccounts") for v in APPLY_VERBS),
    *(("rbac.authorization.k8s.io", r, v) for r in ("roles", "rolebindings") for v in APPLY_VERBS),
    ("", "events", "create"),
    ("batch", "jobs", "create"),  # the checkpoint cleanup Job, create-only
    *(("policy", "poddisruptionbudgets", v) for v in APPLY_VERBS),
}  # fmt: skip
# Read-only node view (nodes.NodeTracker), granted apart: nodes cluster-wide, node leases in
# kube-node-lease.
NODE_VIEW_RULES = {("", "nodes", "list"), ("", "nodes", "watch")}
NODE_LEASE_RULES = {("coordination.k8s.io", "leases", v) for v in ("list", "watch")}


def _driver_grants() -> set[tuple[str, str, str]]:
    """What the operator grants each driver (builders.build_role): RBAC escalation prevention
    means it must hold all of it itself, for any job name (so without resourceNames)."""
    job = {"metadata": {"name": "any", "namespace": "ns", "uid": "u"}}
    return {
        (group, resource, verb)
        for rule in build_role(job, "any-e1-a1-driver", 1)["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


EXPECTED_RULES = OPERATOR_CALLS | _driver_grants()
# The credential Secrets jobs name (checked, and read by the lag reader): only where jobs run,
# never cluster-wide unless asked (rbac.clusterWideSecrets).
SECRET_RULES = {("", "secrets", "get")}


@functools.cache
def helm_binary() -> str:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "k8s-toolchain.sh"), "helm"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return str(Path(out.stdout.strip().splitlines()[-1]) / "helm")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def render(*args: str, namespace: str = RELEASE_NS) -> list[dict[str, Any]]:
    """`helm template` of the chart, parsed; extra args are helm flags (--set, -f, ...)."""
    out = helm("template", RELEASE, str(CHART), "--namespace", namespace, *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def rule_set(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    for rule in rules:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[key], f"wildcard in {rule}"
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def assert_least_privilege(rules: list[dict[str, Any]], expected=EXPECTED_RULES) -> None:
    got = rule_set(rules)
    assert got == expected, (
        f"RBAC rules differ from the operator's calls + driver grants; "
        f"extra: {sorted(got - expected)}; missing: {sorted(expected - got)}"
    )


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return c


def env_of(docs: list[dict[str, Any]]) -> dict[str, str]:
    """name → value; a value from the pod's own fields shows as `fieldRef:<path>`."""
    return {
        e["name"]: e["value"]
        if "value" in e
        else f"fieldRef:{e['valueFrom']['fieldRef']['fieldPath']}"
        for e in container(docs)["env"]
    }


# --- the CRD copy, lint, metadata ----------------------------------------------------------


def test_chart_crd_is_a_byte_copy_of_the_generated_crd():
    source = (ROOT / "crds" / "streamingjob.yaml").read_bytes()
    copy = (CHART / "crds" / "streamingjob.yaml").read_bytes()
    assert copy == source, (
        "charts/streamingjob-operator/crds/streamingjob.yaml differs from crds/streamingjob.yaml; "
        "run `make crd` (regenerates and copies it into the chart) or copy it: "
        "cp crds/streamingjob.yaml charts/streamingjob-operator/crds/streamingjob.yaml"
    )
    assert [p.name for p in (CHART / "crds").iterdir()] == ["streamingjob.yaml"]


@pytest.mark.parametrize(
    "values", [[], ["--set-json", 'watchNamespaces=["team-a","team-b"]']], ids=["all", "ns"]
)
def test_helm_lint_strict(values: list[str]):
    helm("lint", "--strict", str(CHART), "--namespace", RELEASE_NS, *values)


def test_app_version_is_the_project_version_and_the_default_tag():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == project["version"]
    image = container(render())["image"]
    assert image == f"streamingjob/operator:{project['version']}"
    assert container(render("--set", "image.tag=0.2.0-rc1"))["image"].endswith(":0.2.0-rc1")


def test_every_value_has_a_helm_docs_comment():
    """Each leaf value (or an ancestor mapping documented as a whole) has a `# --` comment."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    keys: list[tuple[int, str, bool, bool]] = []  # indent, key, documented, is_leaf
    comment: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped)
            continue
        match = re.match(r"^( *)([A-Za-z][\w.-]*):(.*)$", line)
        if match:
            indent, key, rest = len(match.group(1)), match.group(2), match.group(3).strip()
            keys.append((indent, key, any(c.startswith("# --") for c in comment), rest != ""))
        comment = []
    undocumented, stack = [], []  # stack: (indent, documented)
    for indent, key, documented, is_leaf in keys:
        while stack and stack[-1][0] >= indent:
            stack.pop()
        covered = documented or any(d for _, d in stack)
        if is_leaf and not covered:
            undocumented.append(key)
        stack.append((indent, covered))
    assert not undocumented, f"values without a `# --` comment: {undocumented}"


# --- the Deployment --------------------------------------------------------------------------


def test_deployment_defaults():
    docs = render()
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["namespace"] == RELEASE_NS
    # two replicas, one acting through the Lease; a new pod waits before an old one goes
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = deployment["spec"]["template"]["spec"]
    (spread,) = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert spread["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert spread["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}

    c = container(docs)
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not sc.get("privileged")
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/tmp"}

    tag = c["image"].rpartition(":")[2]
    assert tag and tag != "latest" and "@" not in c["image"]
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]

    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    probe = c["livenessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["args"] == ["streamingjob-operator"]  # settings, namespaces included, from env


def test_env_sets_every_operator_setting():
    env = env_of(render())
    assert set(env) == {PREFIX + field.upper() for field in OperatorSettings.model_fields}
    assert env["STREAMINGJOB_NAMESPACES"] == ""
    assert env["STREAMINGJOB_METRICS_PORT"] == "9090"
    # each replica is its pod in the Lease, and the Lease lives in the release namespace
    assert env.pop("STREAMINGJOB_LEADER_IDENTITY") == "fieldRef:metadata.name"
    assert env.pop("STREAMINGJOB_LEASE_NAMESPACE") == "fieldRef:metadata.namespace"
    assert env.pop("STREAMINGJOB_LEASE_NAME") == one(render(), "Deployment")["metadata"]["name"]
    # the chart's defaults are the operator's defaults, and they parse
    parsed = OperatorSettings.from_env(env)
    assert parsed == OperatorSettings()


def test_without_leader_election_one_replica_recreated():
    docs = render("--set", "leaderElection.enabled=false", "--set", "replicaCount=1")
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert env_of(docs)["STREAMINGJOB_LEADER_ELECTION"] == "false"
    assert not of_kind(docs, "PodDisruptionBudget")
    assert "affinity" not in deployment["spec"]["template"]["spec"]
    assert not [d for d in docs if d["metadata"]["name"].endswith("-leader")]
    proc = helm(
        "template", RELEASE, str(CHART), "--set", "leaderElection.enabled=false",
        "--set", "replicaCount=2", check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "needs leaderElection.enabled=true" in proc.stderr


def test_env_values_parse_as_settings():
    args = ["--set", "config.workers=1000000", "--set", "config.fencingPollSeconds=0.25"]
    args += ["--set", "metrics.enabled=false", "--set", "config.logLevel=DEBUG"]
    docs = render(*args)
    parsed = OperatorSettings.from_env(env_of(docs))
    assert parsed.leader_identity == "fieldRef:metadata.name"  # the kubelet fills it in
    assert (parsed.workers, parsed.fencing_poll_seconds) == (1_000_000, 0.25)
    assert (parsed.metrics_port, parsed.log_level) == (0, "DEBUG")
    assert not of_kind(docs, "Service")
    assert "metrics" not in {p["name"] for p in container(docs)["ports"]}


# --- RBAC ------------------------------------------------------------------------------------


def node_view(docs: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """(the nodes ClusterRole + binding, the node-lease Role + binding); they are checked
    apart from the operator's main rules."""
    suffixes = ("-nodes", "-node-leases")
    picked = [d for d in docs if d["metadata"]["name"].endswith(suffixes)]
    for doc in picked:
        docs.remove(doc)
    return [d for d in picked if d["kind"].startswith("Cluster")], [
        d for d in picked if not d["kind"].startswith("Cluster")
    ]


def leader_lease_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Takes the leader-election Role + binding out of `docs` (checked apart): create leases
    in the release namespace, and get/update only the release's own Lease."""
    picked = [d for d in docs if d["metadata"]["name"].endswith("-leader")]
    for doc in picked:
        docs.remove(doc)
    (role,) = [d for d in picked if d["kind"] == "Role"]
    (binding,) = [d for d in picked if d["kind"] == "RoleBinding"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == RELEASE_NS
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    return role["rules"]


LEADER_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": [f"{RELEASE}-streamingjob-operator"],
        "verbs": ["get", "update"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},  # on the Lease
]


def assert_node_view(cluster: list[dict], leases: list[dict]) -> None:
    (nodes_role,) = [d for d in cluster if d["kind"] == "ClusterRole"]
    (lease_role,) = [d for d in leases if d["kind"] == "Role"]
    assert rule_set(nodes_role["rules"]) == NODE_VIEW_RULES
    assert rule_set(lease_role["rules"]) == NODE_LEASE_RULES
    assert lease_role["metadata"]["namespace"] == "kube-node-lease"
    for binding in [*cluster, *leases]:
        if binding["kind"].endswith("Binding"):
            assert binding["subjects"][0]["namespace"] == RELEASE_NS


def _secret_grants(docs: list[dict[str, Any]]) -> dict[str, set[tuple[str, str, str]]]:
    """Where the rendered RBAC lets the operator read Secrets: namespace ("*": cluster-wide)
    → the rules granting it there."""
    found: dict[str, set[tuple[str, str, str]]] = {}
    for role in [*of_kind(docs, "ClusterRole"), *of_kind(docs, "Role")]:
        if any("secrets" in rule["resources"] for rule in role["rules"]):
            where = role["metadata"]["namespace"] if role["kind"] == "Role" else "*"
            found[where] = found.get(where, set()) | rule_set(role["rules"])
    return found


def test_cluster_rbac_is_exactly_the_least_privilege_set():
    docs = render()
    assert_node_view(*node_view(docs))
    assert leader_lease_rules(docs) == LEADER_RULES
    role = one(docs, "ClusterRole")
    assert_least_privilege(role["rules"])
    assert _secret_grants(docs) == {}  # no Secret anywhere unless asked for
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    account = one(docs, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": RELEASE_NS}
    ]
    assert not of_kind(docs, "Role") and not of_kind(docs, "RoleBinding")


def test_watch_namespaces_gives_namespaced_roles_only():
    docs = render(
        "--set-json",
        'watchNamespaces=["team-a","team-b","{{ .Release.Namespace }}"]',
    )
    assert_node_view(*node_view(docs))  # the one cluster-wide grant: reading nodes
    assert leader_lease_rules(docs) == LEADER_RULES
    assert not of_kind(docs, "ClusterRole") and not of_kind(docs, "ClusterRoleBinding")
    watched = ["team-a", "team-b", RELEASE_NS]
    roles = {r["metadata"]["namespace"]: r for r in of_kind(docs, "Role")}
    bindings = {b["metadata"]["namespace"]: b for b in of_kind(docs, "RoleBinding")}
    assert sorted(roles) == sorted(bindings) == sorted(watched)
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    for ns in watched:
        assert_least_privilege(roles[ns]["rules"], EXPECTED_RULES | SECRET_RULES)
        assert bindings[ns]["roleRef"]["kind"] == "Role"
        assert bindings[ns]["roleRef"]["name"] == roles[ns]["metadata"]["name"]
        assert bindings[ns]["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": RELEASE_NS}
        ]
    assert env_of(docs)["STREAMINGJOB_NAMESPACES"] == ",".join(watched)


def test_watching_all_namespaces_reads_secrets_only_where_asked():
    """Watching every namespace, `get secrets` cluster-wide would read every Secret of the
    cluster: it is granted per namespace (rbac.secretNamespaces), or cluster-wide only when
    asked for by name (rbac.clusterWideSecrets)."""
    docs = render("--set-json", 'rbac.secretNamespaces=["team-a","team-b"]')
    assert _secret_grants(docs) == {"team-a": SECRET_RULES, "team-b": SECRET_RULES}
    bindings = {
        b["metadata"]["namespace"]: b
        for b in of_kind(docs, "RoleBinding")
        if b["metadata"]["name"].endswith("-secrets")
    }
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    for ns in ("team-a", "team-b"):
        assert bindings[ns]["roleRef"]["kind"] == "Role"
        assert bindings[ns]["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": RELEASE_NS}
        ]
    wide = render("--set", "rbac.clusterWideSecrets=true")
    assert _secret_grants(wide) == {"*": SECRET_RULES}  # a ClusterRole of its own
    (binding,) = [
        b for b in of_kind(wide, "ClusterRoleBinding") if b["metadata"]["name"].endswith("-secrets")
    ]
    assert binding["roleRef"]["kind"] == "ClusterRole"
    # watching a list, the watched namespaces' Roles carry it and nothing else does
    namespaced = render(
        "--set-json", 'watchNamespaces=["team-a"]',
        "--set-json", 'rbac.secretNamespaces=["team-b"]',
        "--set", "rbac.clusterWideSecrets=true",
    )  # fmt: skip
    assert set(_secret_grants(namespaced)) == {"team-a"}


def test_rbac_and_service_account_can_be_left_to_the_user():
    docs = render(
        "--set", "rbac.create=false", "--set", "serviceAccount.create=false",
        "--set", "serviceAccount.name=existing",
    )  # fmt: skip
    assert not {d["kind"] for d in docs} & {"ClusterRole", "Role", "ServiceAccount"}
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "existing"


# --- metrics ---------------------------------------------------------------------------------


def test_metrics_service_and_no_service_monitor_by_default():
    docs = render()
    assert not of_kind(docs, "ServiceMonitor")
    assert not of_kind(docs, "PrometheusRule")
    assert [c["metadata"]["name"] for c in of_kind(docs, "ConfigMap")] == []
    service = one(docs, "Service")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_service_monitor_when_enabled():
    docs = render(
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.serviceMonitor.labels.release=prometheus",
    )  # fmt: skip
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # per-job series carry the job's namespace and job labels, not the target's
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    service_labels = one(docs, "Service")["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service_labels.items()


def test_alert_rules_and_dashboard_when_enabled():
    """The PrometheusRule is files/alerts.yaml (the file promtool tests against the operator's
    real metrics: tests/integration/operator/test_op_kafka.py); the dashboard's queries use
    only metrics the operator serves."""
    docs = render(
        "--set", "metrics.prometheusRule.enabled=true",
        "--set", "metrics.prometheusRule.labels.release=prometheus",
        "--set", "metrics.dashboard.enabled=true",
    )  # fmt: skip
    rule = one(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"StreamingJobLagGrowing", "StreamingJobNoProgress", "StreamingJobFailed"} <= alerts
    dashboard = one(docs, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(dashboard["data"]["streamingjobs.json"])
    exprs = " ".join(t["expr"] for p in board["panels"] for t in p["targets"])
    used = set(re.findall(r"streamingjob_[a-z_]+", exprs))
    served = {
        "streamingjob_consumer_lag",
        "streamingjob_consumer_committed_offset",
        "streamingjob_consumer_log_end_offset",
        "streamingjob_seconds_since_progress",
        "streamingjob_job_restarts_total",
        "streamingjob_job_phase",
        "streamingjob_job_degraded",
        "streamingjob_job_start_path",
        "streamingjob_offset_commit_failures",
    }
    assert used and used <= served, used - served
    # metrics off: neither
    off = render(
        "--set", "metrics.enabled=false",
        "--set", "metrics.prometheusRule.enabled=true",
        "--set", "metrics.dashboard.enabled=true",
    )  # fmt: skip
    assert not of_kind(off, "PrometheusRule") and not of_kind(off, "ConfigMap")


# --- security ----------------------------------------------------------------------------------


def test_the_operator_pod_meets_the_restricted_pod_security_standard():
    spec = one(render(), "Deployment")["spec"]["template"]["spec"]
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True


def test_network_policy_is_optional_and_opens_only_the_operators_ports():
    assert not of_kind(render(), "NetworkPolicy")
    docs = render(
        "--set", "networkPolicy.enabled=true",
        "--set-json", 'networkPolicy.egressTo=[{"ipBlock": {"cidr": "10.0.0.0/8"}}]',
    )  # fmt: skip
    policy = one(docs, "NetworkPolicy")["spec"]
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["ingress"]
    assert {p["port"] for p in ingress["ports"]} == {8080, 9090} and "from" not in ingress
    dns, servers = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert [p["port"] for p in servers["ports"]] == [443, 6443, 9092, 9093, 9094]
    assert servers["to"] == [{"ipBlock": {"cidr": "10.0.0.0/8"}}]


# --- values.schema.json ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--set", "replicaCount=-1"],
        ["--set", "leaderElection.leaseDurationSeconds=0"],
        ["--set", "replicaCount=one"],
        ["--set", "image.tag=latest"],
        ["--set", "image.pullPolicy=Sometimes"],
        ["--set", "config.workers=many"],
        ["--set", "config.fencingPollSeconds=0"],
        ["--set", "config.nodeLostGraceSeconds=0"],
        ["--set", "config.kubeletLeaseRenewSeconds=0"],
        ["--set-json", 'watchNamespaces="team-a"'],
        ["--set", "metrics.port=70000"],
        ["--set", "replicas=1"],  # a typo of replicaCount: unknown keys are rejected
    ],
    ids=lambda a: a[1],
)
def test_schema_rejects_bad_values(args: list[str]):
    proc = helm("template", RELEASE, str(CHART), *args, check=False)
    assert proc.returncode != 0, f"helm template accepted {args}"
    assert SCHEMA_ERROR in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (
            "config.nodeLostGraceSeconds=30",
            "config.nodeLostGraceSeconds=30 is shorter than 3.5 * "
            "config.kubeletLeaseRenewSeconds=10",
        ),
        (
            "leaderElection.renewDeadlineSeconds=12",  # 15 < 12 + min(30, 12 / 2)
            "leaderElection.leaseDurationSeconds=15, leaderElection.renewDeadlineSeconds=12, "
            "leaderElection.retryPeriodSeconds=2, config.apiTimeoutSeconds=30",
        ),
        (
            "leaderElection.retryPeriodSeconds=10",
            "leader election needs renewDeadlineSeconds > retryPeriodSeconds",
        ),
    ],
    ids=lambda v: v.split("=")[0] if "=" in v and " " not in v else "",
)
def test_timing_rules_are_refused_by_the_templates_naming_both_values(value, named):
    """The rules of timing.py, which JSON schema cannot state: the templates fail with them
    (the operator refuses the same settings at start-up:
    tests/unit/operator/rules/test_timing.py)."""
    proc = helm("template", RELEASE, str(CHART), "--set", value, check=False)
    assert proc.returncode != 0, f"helm template accepted {value}"
    assert named in proc.stderr, proc.stderr


def test_timing_values_that_fit_render_and_parse():
    docs = render(
        "--set", "config.nodeLostGraceSeconds=8.75", "--set", "config.kubeletLeaseRenewSeconds=2.5",
        "--set", "leaderElection.leaseDurationSeconds=18",
        "--set", "leaderElection.renewDeadlineSeconds=12",
    )  # fmt: skip
    parsed = OperatorSettings.from_env(env_of(docs))
    assert (parsed.node_lost_grace_seconds, parsed.node_silent_seconds) == (8.75, 5)
    assert parsed.election_timing.request_timeout_seconds == 6


def test_schema_is_valid_json_with_every_top_level_value():
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_latest_is_refused_even_past_the_schema():
    """The template refuses `latest` too (e.g. with --skip-schema-validation)."""
    proc = helm(
        "template", RELEASE, str(CHART), "--set", "image.tag=latest",
        "--skip-schema-validation", check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "not latest" in proc.stderr
