"""Pure builders: golden-ish assertions on the children of one job."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from spark_app.api.manifest import load_manifest
from streamingjob_operator.api.models import StreamingJobStatus
from streamingjob_operator.api.naming import (
    LABEL_ATTEMPT,
    LABEL_DRIVER,
    LABEL_EPOCH,
    LABEL_JOB,
    driver_host_name,
    driver_pod_name,
    go_configmap_name,
    report_configmap_name,
    service_name,
)
from streamingjob_operator.children.builders import (
    BLOCK_MANAGER_PORT,
    DRIVER_PORT,
    build_disruption_budget,
    build_go_configmap,
    build_report_configmap,
    build_service,
)
from streamingjob_operator.children.cleanup import build_cleanup_job, checkpoint_cleanup_paths
from streamingjob_operator.children.driver_pod import (
    build_driver_pod,
    build_executor_template,
    build_job_configmap,
    spark_confs,
)
from streamingjob_operator.children.pod_parts import (
    merge,
    secret_references,
    spark_memory_mib,
)
from streamingjob_operator.children.rbac import build_role, build_role_binding
from streamingjob_operator.children.validation import SPARK_CONF_GUARDRAILS, check_spec, guardrail
from streamingjob_operator.rules.launch import Launch
from tests.unit.operator.helpers_operator import BASE_SPEC, make_spec

pytestmark = pytest.mark.unit

UID = "0f1e2d3c-0000-4000-8000-00000000000a"
JOB = {
    "apiVersion": "sparkkafka.dev/v1alpha1",
    "kind": "StreamingJob",
    "metadata": {"name": "orders", "namespace": "team", "uid": "uid-1", "generation": 3},
    "spec": {
        **BASE_SPEC,
        "checkpoint": {"location": "s3a://ckpt/base", "maxCheckpointAgeSeconds": 60},
        "kafkaCredentials": {"secretName": "kafka-creds"},
    },
    "status": {"epoch": 1},
}
SPEC = make_spec(
    kafkaCredentials={"secretName": "kafka-creds"},
    env=[{"name": "TZ", "value": "UTC"}],
    volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
    volumeMounts=[{"name": "ckpt", "mountPath": "/mnt/ckpt"}],
    tolerations=[{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}],
    nodeSelector={"pool": "spark"},
    driver={"cores": 2, "memory": "2g", "memoryOverhead": "512m"},
    executor={"instances": 3, "cores": 2, "memory": "4g"},
)
POD_NAME = driver_pod_name("orders", 2, 3)
LOC = "s3a://ckpt/base/team/orders/epoch-2"


def pod(spec=SPEC):
    return build_driver_pod(
        JOB, spec, Launch(POD_NAME, epoch=2, attempt=3, checkpoint_location=LOC)
    )


def _owned(obj):
    (ref,) = obj["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": "sparkkafka.dev/v1alpha1",
        "kind": "StreamingJob",
        "name": "orders",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_driver_pod_identity_labels_and_owner():
    p = pod()
    assert p["metadata"]["name"] == "orders-e2-a3-driver"
    labels = p["metadata"]["labels"]
    assert labels[LABEL_JOB] == "orders" and labels["spark-role"] == "driver"
    assert labels[LABEL_EPOCH] == "2" and labels[LABEL_ATTEMPT] == "3"
    _owned(p)
    assert p["spec"]["restartPolicy"] == "Never"


def test_driver_runs_spark_submit_client_mode_with_runner_contract():
    (c,) = pod()["spec"]["containers"]
    assert "command" not in c  # the image's entrypoint: tini → entrypoint.sh submit
    assert c["args"][:2] == ["submit", "/opt/spark/bin/spark-submit"]
    args = c["args"][2:]
    assert args[:6] == [
        "--master",
        "k8s://https://kubernetes.default.svc:443",
        "--deploy-mode",
        "client",
        "--name",
        "orders",
    ]
    tail = args[args.index("/opt/streamingjob/run_job.py") :]
    assert tail == [
        "/opt/streamingjob/run_job.py",
        "--manifest",
        "/etc/streamingjob/job.yaml",
        "--epoch",
        "2",
        "--attempt",
        "3",
        "--checkpoint-location",
        LOC,
        "--report-configmap",
        "orders-report",
    ]
    assert pod()["spec"]["terminationGracePeriodSeconds"] == 30
    confs = dict(a.split("=", 1) for a in args[1::2] if "=" in a and a.startswith("spark."))
    assert confs["spark.kubernetes.driver.pod.name"] == POD_NAME
    assert confs["spark.kubernetes.executor.podNamePrefix"] == POD_NAME
    # its own address: hostname + subdomain in the headless Service (one per driver)
    assert confs["spark.driver.host"] == f"{POD_NAME}.{service_name('orders')}.team.svc"
    assert pod()["spec"]["hostname"] == POD_NAME
    assert pod()["spec"]["subdomain"] == service_name("orders")
    assert "--wait-for-go" not in args
    assert "STREAMJOB_POD_NAME" not in {e["name"] for e in c["env"]}
    assert confs["spark.driver.port"] == str(DRIVER_PORT)
    assert confs["spark.driver.blockManager.port"] == str(BLOCK_MANAGER_PORT)
    assert confs["spark.driver.bindAddress"] == "0.0.0.0"
    assert confs["spark.kubernetes.executor.useDriverPodIP"] == "false"  # via the Service
    assert confs["spark.executor.instances"] == "3"
    assert confs["spark.kubernetes.namespace"] == "team"
    assert confs["spark.kubernetes.authenticate.executor.serviceAccountName"] == "orders-driver"
    assert confs[f"spark.kubernetes.executor.label.{LABEL_EPOCH}"] == "2"


def test_a_launch_carries_what_status_targets_and_where_the_image_keeps_the_runner():
    st = StreamingJobStatus(
        driver_pod=POD_NAME,
        epoch=2,
        attempt=3,
        checkpoint_location=LOC,
        previous_checkpoint_location="s3a://ckpt/base/team/orders/epoch-1",
        avoid_nodes=["w1"],
    )
    launch = Launch.of(st, entrypoint="/app/run.py", spark_submit="/spark/bin/spark-submit")
    assert launch == Launch(
        POD_NAME, 2, 3, LOC, ("s3a://ckpt/base/team/orders/epoch-1",), ("w1",),
        "/app/run.py", "/spark/bin/spark-submit",
    )  # fmt: skip
    args = build_driver_pod(JOB, SPEC, launch)["spec"]["containers"][0]["args"]
    assert args[:2] == ["submit", "/spark/bin/spark-submit"] and "/app/run.py" in args


def test_the_earlier_epochs_checkpoints_are_passed_newest_first_only_when_given():
    previous = ("s3a://ckpt/base/team/orders/epoch-2", "s3a://ckpt/base/team/orders/epoch-1")
    launch = Launch(
        POD_NAME, epoch=3, attempt=1, checkpoint_location=LOC, previous_checkpoints=previous
    )
    args = build_driver_pod(JOB, SPEC, launch)["spec"]["containers"][0]["args"]
    assert args[-4:] == ["--previous-checkpoint", previous[0], "--previous-checkpoint", previous[1]]
    assert "--previous-checkpoint" not in pod()["spec"]["containers"][0]["args"]


def test_ports_resources_and_security():
    p = pod()
    (c,) = p["spec"]["containers"]
    assert {port["containerPort"] for port in c["ports"]} == {7078, 7079, 4040}
    assert c["resources"]["requests"] == {"cpu": "2", "memory": "2560Mi"}
    assert c["resources"]["limits"] == {"memory": "2560Mi"}
    assert p["spec"]["securityContext"]["runAsNonRoot"] is True
    assert p["spec"]["securityContext"]["runAsUser"] == 185
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_cpu_request_overrides_cores_for_the_pods_only():
    spec = make_spec(
        driver={"cores": 1, "cpuRequest": "100m"},
        executor={"cores": 2, "cpuRequest": "250m"},
    )
    (c,) = pod(spec)["spec"]["containers"]
    assert c["resources"]["requests"]["cpu"] == "100m"
    confs = spark_confs(JOB, spec, POD_NAME, 2, 3)
    assert confs["spark.kubernetes.executor.request.cores"] == "250m"
    assert confs["spark.executor.cores"] == "2"  # Spark's task slots stay whole cores
    assert "spark.kubernetes.executor.request.cores" not in spark_confs(JOB, SPEC, POD_NAME, 2, 3)


def test_secrets_only_through_secret_key_refs():
    p = pod()
    (c,) = p["spec"]["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["KAFKA_SASL_USERNAME"]["valueFrom"]["secretKeyRef"] == {
        "name": "kafka-creds",
        "key": "username",
    }
    assert "value" not in env["KAFKA_SASL_PASSWORD"]
    assert env["KAFKA_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
    assert env["TZ"]["value"] == "UTC"
    for item in c["env"]:
        if item["name"] in ("KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD"):
            assert set(item) == {"name", "valueFrom"}


def test_volumes_tolerations_node_selector_and_config_mount():
    p = pod()
    names = [v["name"] for v in p["spec"]["volumes"]]
    assert names == ["streamingjob-config", *SCRATCH, "ckpt"]
    (c,) = p["spec"]["containers"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"/etc/streamingjob", "/mnt/ckpt", *SCRATCH_PATHS}
    assert p["spec"]["tolerations"] == [
        {"key": "spark", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert p["spec"]["nodeSelector"] == {"pool": "spark"}


def test_pod_template_merges_but_operator_fields_win():
    spec = make_spec(
        podTemplate={
            "metadata": {"labels": {"team": "x", "spark-role": "hijack"}},
            "spec": {
                "priorityClassName": "high",
                "restartPolicy": "Always",
                "containers": [{"name": "driver", "image": "evil", "stdin": True}],
            },
        }
    )
    p = pod(spec)
    assert p["metadata"]["labels"]["team"] == "x"
    assert p["metadata"]["labels"]["spark-role"] == "driver"
    assert p["spec"]["priorityClassName"] == "high"
    assert p["spec"]["restartPolicy"] == "Never"
    (c,) = p["spec"]["containers"]
    assert c["image"] == "repo/streamingjob:1" and c["stdin"] is True


def test_merge_named_lists():
    base = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    ours = {"env": [{"name": "B", "value": "x"}, {"name": "C", "value": "3"}]}
    assert merge(base, ours)["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "x"},
        {"name": "C", "value": "3"},
    ]


def test_job_configmap_holds_a_manifest_the_runner_accepts():
    cm = build_job_configmap(JOB, SPEC)
    _owned(cm)
    manifest = yaml.safe_load(cm["data"]["job.yaml"])
    assert "status" not in manifest
    assert manifest["spec"]["checkpoint"] == {"location": "s3a://ckpt/base"}
    parsed = load_manifest(manifest)
    assert parsed.metadata.name == "orders"
    template = yaml.safe_load(cm["data"]["executor-template.yaml"])
    assert template == build_executor_template(SPEC, "orders")
    (c,) = template["spec"]["containers"]
    assert c["name"] == "executor"
    assert any(e["name"] == "KAFKA_SASL_PASSWORD" and "valueFrom" in e for e in c["env"])
    assert template["spec"]["volumes"] == [
        *({"name": n, "emptyDir": {}} for n in SCRATCH),
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}},
    ]


SCRATCH = ["streamingjob-scratch-tmp", "streamingjob-scratch-work", "streamingjob-scratch-home"]
SCRATCH_PATHS = {"/tmp", "/opt/streamingjob/work", "/home/spark"}
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def test_every_pod_meets_the_restricted_pod_security_standard():
    """Non-root uid 185, RuntimeDefault seccomp, no capabilities, no privilege escalation,
    read-only root filesystem with emptyDirs where Spark, Python and the runner write."""
    template = build_executor_template(SPEC, "orders")
    cleanup = build_cleanup_job(JOB, SPEC, ["s3a://ckpt/base/ns/orders"], "orders-cleanup")
    for spec in (pod()["spec"], template["spec"], cleanup["spec"]["template"]["spec"]):
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 185
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (c,) = spec["containers"]
        assert c["securityContext"] == RESTRICTED_CONTAINER
        assert {m["mountPath"] for m in c["volumeMounts"]} >= SCRATCH_PATHS
    # the cleanup Job reads no Kafka
    (c,) = cleanup["spec"]["template"]["spec"]["containers"]
    assert not any(e["name"].startswith("KAFKA_") for e in c["env"])


def test_the_kafka_ca_is_a_secret_file_in_the_driver_and_the_executors():
    spec = make_spec(
        kafkaCredentials={"secretName": "kafka-creds", "caSecret": {"name": "kafka-ca"}}
    )
    assert spec.kafka_credentials.sasl_mechanism == "SCRAM-SHA-512"
    assert spec.kafka_credentials.security_protocol == "SASL_SSL"
    for built in (pod(spec)["spec"], build_executor_template(spec, "orders")["spec"]):
        volume = next(v for v in built["volumes"] if v["name"] == "streamingjob-kafka-ca")
        assert volume["secret"]["secretName"] == "kafka-ca"
        assert volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
        (c,) = built["containers"]
        env = {e["name"]: e for e in c["env"]}
        assert env["KAFKA_SSL_CA_LOCATION"]["value"] == "/etc/streamingjob-kafka-ca/ca.crt"
        mount = next(m for m in c["volumeMounts"] if m["name"] == "streamingjob-kafka-ca")
        assert mount == {
            "name": "streamingjob-kafka-ca",
            "mountPath": "/etc/streamingjob-kafka-ca",
            "readOnly": True,
        }
    refs = {field: (name, keys) for field, name, keys in secret_references(spec)}
    assert refs["spec.kafkaCredentials.caSecret.name"] == (
        "kafka-ca",
        {"spec.kafkaCredentials.caSecret.key": "ca.crt"},
    )


def test_service_selects_the_current_driver_headless():
    svc = build_service(JOB)
    _owned(svc)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {LABEL_JOB: "orders", "spark-role": "driver"}
    assert {p["port"] for p in svc["spec"]["ports"]} == {7078, 7079, 4040}


PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def test_a_waiting_driver_waits_for_the_go_and_knows_its_name():
    """A warm hand-over's next driver (handover.py): --wait-for-go, its pod name from the
    downward API, its own address (the running driver has another)."""
    launch = Launch(POD_NAME, epoch=2, attempt=3, checkpoint_location=LOC, wait_for_go=True)
    built = build_driver_pod(JOB, SPEC, launch)
    (c,) = built["spec"]["containers"]
    assert c["args"][-1] == "--wait-for-go"
    env = {e["name"]: e for e in c["env"]}
    assert env["STREAMJOB_POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    running = spark_confs(JOB, SPEC, "orders-e2-a2-driver", 2, 2)["spark.driver.host"]
    assert running.startswith("orders-e2-a2-driver.") and f"{POD_NAME}." not in running


def test_a_standby_and_every_executor_prefer_nodes_without_another_drivers_pods():
    """A standby (standby.py) and its executors stay apart from the running driver and its
    executors where the scheduler can: a node lost takes one driver's pods, not both.
    Preferred, not required (a one-node cluster still gets a standby), beside the user's."""
    user = {"weight": 5, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone"}}
    spec = make_spec(podTemplate={"spec": {"affinity": {"podAntiAffinity": {PREFERRED: [user]}}}})
    apart = {
        "weight": 100,
        "podAffinityTerm": {
            "labelSelector": {"matchLabels": {LABEL_JOB: "orders"}},
            "mismatchLabelKeys": [LABEL_DRIVER],  # the job's pods of another driver
            "topologyKey": "kubernetes.io/hostname",
        },
    }
    standby = Launch(
        POD_NAME, 1, 2, checkpoint_location=LOC, wait_for_go=True, away_from_drivers=True
    )
    built = build_driver_pod(JOB, spec, standby)
    assert built["spec"]["affinity"]["podAntiAffinity"][PREFERRED] == [user, apart]
    assert built["metadata"]["labels"][LABEL_DRIVER] == POD_NAME  # what the others mismatch
    plain = build_driver_pod(JOB, spec, Launch(POD_NAME, 1, 2, checkpoint_location=LOC))
    assert plain["spec"]["affinity"]["podAntiAffinity"][PREFERRED] == [user]
    template = build_executor_template(spec, "orders")
    assert template["spec"]["affinity"]["podAntiAffinity"][PREFERRED] == [user, apart]
    confs = spark_confs(JOB, spec, POD_NAME, 1, 2)
    assert confs[f"spark.kubernetes.executor.label.{LABEL_DRIVER}"] == POD_NAME


def test_a_standbys_executors_do_not_inherit_the_nodes_the_running_attempt_avoids():
    """After a node loss the running attempt avoids that node (required); the standby's
    executors must not: they would be forced onto the running driver's node (seen on kind:
    the second node loss then froze the standby's first batch)."""
    cm = build_job_configmap(JOB, SPEC, avoid_nodes=["w1"])
    running = yaml.safe_load(cm["data"]["executor-template.yaml"])
    spare = yaml.safe_load(cm["data"]["standby-executor-template.yaml"])
    assert "nodeAffinity" in running["spec"]["affinity"]
    assert "nodeAffinity" not in spare["spec"]["affinity"]
    assert spare == build_executor_template(SPEC, "orders")
    standby = Launch(
        POD_NAME, 1, 2, checkpoint_location=LOC, wait_for_go=True, away_from_drivers=True
    )
    for launch, path in (
        (standby, "standby-executor-template.yaml"),
        (Launch(POD_NAME, 1, 2, checkpoint_location=LOC), "executor-template.yaml"),
    ):
        args = build_driver_pod(JOB, SPEC, launch)["spec"]["containers"][0]["args"]
        assert f"spark.kubernetes.executor.podTemplateFile=/etc/streamingjob/{path}" in args


def test_a_dotted_job_name_gives_a_hostname_without_dots():
    assert driver_host_name("orders.v2-e1-a1-driver") == "orders-v2-e1-a1-driver"


def test_role_names_both_drivers_executors_during_a_hand_over():
    role = build_role(JOB, POD_NAME, 2, handing_over_to="orders-e3-a1-driver")
    names = role["rules"][2]["resourceNames"]  # delete, patch
    assert f"{POD_NAME}-exec-1" in names and "orders-e3-a1-driver-exec-14" in names
    assert len(names) == 2 * (2 + 4 + 8)
    assert role["rules"][1]["resourceNames"] == [POD_NAME, "orders-e3-a1-driver", *names]


def test_role_is_the_least_a_driver_needs():
    """Least privilege (docs/operator/security.md): pods created, listed and watched (RBAC
    has no name for a pod not yet created, and Spark lists and watches its executors by
    label); read, deleted and patched only by this driver's names; its own report ConfigMap
    read and patched (the runner's merge patches of report.json and handover.json), its go
    ConfigMap only read; nothing else (no Secrets, Services, PVCs, other ConfigMaps, no
    deletecollection, no update)."""
    role = build_role(JOB, POD_NAME, 2)
    _owned(role)
    executors = [f"{POD_NAME}-exec-{i}" for i in range(1, 2 + 4 + 8 + 1)]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "list", "watch"]},
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": [POD_NAME, *executors],
            "verbs": ["get"],
        },
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": executors,
            "verbs": ["delete", "patch"],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["orders-report"],
            "verbs": ["get", "patch"],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["orders-go"],
            "verbs": ["get"],
        },
    ]


def _grants(role: dict, verb: str, resource: str, name: str) -> bool:
    """Whether the Role lets `verb` reach `resource` `name`, as the API server decides."""
    return any(
        resource in rule["resources"]
        and verb in rule["verbs"]
        and ("resourceNames" not in rule or name in rule["resourceNames"])
        for rule in role["rules"]
    )


def test_a_driver_cannot_write_the_go_that_fences_it():
    """The go of a warm hand-over is the operator's word that the running driver's pods are
    gone: in a ConfigMap of its own, which the drivers may read but never write."""
    role = build_role(JOB, POD_NAME, 2, handing_over_to="orders-e3-a1-driver")
    go = go_configmap_name("orders")
    assert go != report_configmap_name("orders")
    assert _grants(role, "get", "configmaps", go)
    for verb in ("create", "update", "patch", "delete"):
        assert not _grants(role, verb, "configmaps", go), verb
    built = build_go_configmap(JOB)
    assert built["metadata"]["name"] == go and "data" not in built  # go.json: the signal's
    # the waiting driver reads its go there; the running one is told nothing of it
    waiting = Launch(POD_NAME, 2, 3, checkpoint_location=LOC, wait_for_go=True)
    args = build_driver_pod(JOB, SPEC, waiting)["spec"]["containers"][0]["args"]
    assert args[args.index("--go-configmap") + 1] == go
    plain = build_driver_pod(JOB, SPEC, Launch(POD_NAME, 2, 3, checkpoint_location=LOC))
    assert "--go-configmap" not in plain["spec"]["containers"][0]["args"]
    # reading pods by name: its own and its executors, both drivers' during a hand-over
    assert _grants(role, "get", "pods", "orders-e3-a1-driver")
    assert _grants(role, "get", "pods", f"{POD_NAME}-exec-3")
    assert not _grants(role, "get", "pods", "other-e1-a1-driver")


def test_what_the_role_leaves_out_spark_does_not_try():
    # Spark's own names for the executors of this driver
    confs = spark_confs(JOB, SPEC, POD_NAME, 1, 1)
    assert confs["spark.kubernetes.executor.podNamePrefix"] == POD_NAME
    # what the Role leaves out, Spark must not try: its executor ConfigMap, PVCs, Services
    assert confs["spark.kubernetes.executor.disableConfigMap"] == "true"
    assert confs["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert confs["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    binding = build_role_binding(JOB)
    assert binding["subjects"][0]["name"] == "orders-driver"
    assert "data" not in build_report_configmap(JOB)  # the runner's keys: never applied by us


def test_executors_get_no_api_token():
    user = make_spec(podTemplate={"spec": {"automountServiceAccountToken": True}})
    assert build_executor_template(user, "orders")["spec"]["automountServiceAccountToken"] is False


def test_reserved_spark_confs_are_rejected_by_name():
    spec = make_spec(sparkConf={"spark.kubernetes.driver.pod.name": "x", "spark.ok": "1"})
    (problem,) = check_spec(spec)
    assert problem.field == "spec.sparkConf['spark.kubernetes.driver.pod.name']"
    user = make_spec(sparkConf={"spark.sql.shuffle.partitions": "4"})
    assert spark_confs(JOB, user, POD_NAME, 1, 1)["spark.sql.shuffle.partitions"] == "4"


@pytest.mark.parametrize("reserved", sorted(SPARK_CONF_GUARDRAILS))
def test_every_guardrail_refuses_its_key_naming_it_and_the_field_to_use(reserved):
    key = reserved + "x" if reserved.endswith(".") else reserved
    (problem,) = check_spec(make_spec(sparkConf={key: "1"}))
    assert problem.field == f"spec.sparkConf[{key!r}]"
    assert SPARK_CONF_GUARDRAILS[reserved] in str(problem)


def test_the_confs_the_operator_sets_are_all_guarded():
    """A user value for any of them would be silently overridden (or worse, not)."""
    ours = spark_confs(JOB, make_spec(executor={"cpuLimit": "1", "cpuRequest": "1"}), "p", 1, 1)
    assert [key for key in ours if guardrail(key) is None] == []


@pytest.mark.parametrize(
    "allowed",
    [
        "spark.sql.shuffle.partitions",
        "spark.kubernetes.executor.annotation.team",
        "spark.kubernetes.allocation.batch.size",
        "spark.kubernetes.container.image.pullSecrets",
        "spark.executor.extraJavaOptions",
        "spark.driver.extraJavaOptions",
    ],
)
def test_ordinary_spark_confs_pass(allowed):
    assert check_spec(make_spec(sparkConf={allowed: "1"})) == []


def test_long_names_fit_dns_labels():
    long = "a" * 100
    name = driver_pod_name(long, 123, 45)
    assert len(name) <= 63 and name.endswith("-e123-a45-driver")
    assert driver_pod_name(long, 1, 1) != driver_pod_name("a" * 99, 1, 1)
    assert len(service_name(long)) <= 63


def test_spark_memory():
    assert spark_memory_mib("512m") == 512
    assert spark_memory_mib("2g") == 2048
    assert spark_memory_mib("1048576k") == 1024


def test_checkpoint_cleanup_only_for_mounted_file_paths():
    spec = make_spec(
        checkpoint={"location": "file:///mnt/ckpt/jobs"},
        volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
        volumeMounts=[{"name": "ckpt", "mountPath": "/mnt/ckpt"}],
    )
    paths = checkpoint_cleanup_paths(spec, "team", "orders", UID, [])
    assert paths == [f"/mnt/ckpt/jobs/team/orders/{UID}"]
    job = build_cleanup_job(JOB, spec, paths, "orders-ckpt-cleanup")
    assert "ownerReferences" not in job["metadata"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["rm", "-rf", "--", *paths]
    other_store = make_spec(checkpoint={"location": "gs://bucket/ckpt"})
    assert checkpoint_cleanup_paths(other_store, "team", "orders", UID, []) is None
    unmounted = make_spec(checkpoint={"location": "file:///elsewhere"})
    assert checkpoint_cleanup_paths(unmounted, "team", "orders", UID, []) is None


def test_the_cleanup_deletes_this_jobs_checkpoints_never_another_of_the_same_name():
    """Finding 1 of issue 41: the cleanup Job is not awaited; a job created again under the
    same name meanwhile keeps its own directory. Epochs an earlier operator laid out without
    the uid (recorded in status) go too."""
    spec = make_spec()
    legacy = "s3a://ckpt/base/team/orders/epoch-3"
    own = f"s3a://ckpt/base/team/orders/{UID}"
    recorded = [f"{own}/epoch-5", f"{own}/epoch-4", legacy, ""]
    assert checkpoint_cleanup_paths(spec, "team", "orders", UID, recorded) == [own, legacy]


S3 = {
    "endpoint": "http://minio.storage:9000",
    "region": "us-east-1",
    "pathStyleAccess": True,
    "credentialsSecret": {"name": "s3-creds"},
}


def _env_names(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def test_s3_credentials_reach_driver_executors_and_cleanup_only_by_secret_ref():
    spec = make_spec(s3=S3)
    pod = build_driver_pod(
        JOB, spec, Launch("orders-e1-a1-driver", epoch=1, attempt=1,
        checkpoint_location="s3a://ckpt/base/team/orders/epoch-1"),
    )  # fmt: skip
    template = build_executor_template(spec, "orders")
    paths = checkpoint_cleanup_paths(spec, "team", "orders", UID, [])
    assert paths == [f"s3a://ckpt/base/team/orders/{UID}"]
    cleanup = build_cleanup_job(JOB, spec, paths, "orders-ckpt-cleanup")
    containers = [
        pod["spec"]["containers"][0],
        template["spec"]["containers"][0],
        cleanup["spec"]["template"]["spec"]["containers"][0],
    ]
    for container in containers:
        env = _env_names(container)
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
            "name": "s3-creds",
            "key": "accessKeyId",
        }
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
            "name": "s3-creds",
            "key": "secretAccessKey",
        }
    # the store's settings are Spark confs of the runner's session, never a credential
    args = " ".join(pod["spec"]["containers"][0]["args"])
    assert "secretAccessKey" not in args and "AWS_" not in args
    command = cleanup["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:4] == [
        "java",
        "-cp",
        "/opt/streamingjob/hadoop-conf:/opt/spark/jars/*",
        "org.apache.hadoop.fs.FsShell",
    ]
    assert command[-5:] == ["-rm", "-r", "-f", "-skipTrash", *paths]
    assert "fs.s3a.endpoint=http://minio.storage:9000" in command
    assert "fs.s3a.path.style.access=true" in command


def test_s3_spec_gives_the_s3a_session_confs():
    from spark_app.api.manifest import S3Spec

    conf = S3Spec.model_validate(S3).hadoop_conf()
    assert conf == {
        "spark.hadoop.fs.s3a.endpoint": "http://minio.storage:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
        ),
    }
    # without a Secret: S3A's default chain (IRSA, instance profile), AWS endpoints
    assert S3Spec.model_validate({}).hadoop_conf() == {
        "spark.hadoop.fs.s3a.path.style.access": "false"
    }


def test_every_secret_the_pods_read_is_checked_before_a_launch():
    spec = make_spec(s3=S3, kafkaCredentials={"secretName": "kafka-creds", "passwordKey": "pw"})
    assert secret_references(spec) == [
        (
            "spec.kafkaCredentials.secretName",
            "kafka-creds",
            {
                "spec.kafkaCredentials.usernameKey": "username",
                "spec.kafkaCredentials.passwordKey": "pw",
            },
        ),
        (
            "spec.s3.credentialsSecret.name",
            "s3-creds",
            {
                "spec.s3.credentialsSecret.accessKeyIdKey": "accessKeyId",
                "spec.s3.credentialsSecret.secretAccessKeyKey": "secretAccessKey",
            },
        ),
    ]


def test_disruption_budget_keeps_the_running_drivers_executors_from_eviction():
    running = driver_pod_name("orders", 1, 1)
    pdb = build_disruption_budget(JOB, running, 3)
    assert pdb["kind"] == "PodDisruptionBudget" and pdb["metadata"]["name"] == "orders-executors"
    # pods of a pod: only an integer minAvailable works (maxUnavailable lets evictions pass)
    assert pdb["spec"]["minAvailable"] == 3 and "maxUnavailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"]["matchLabels"] == {
        "sparkkafka.dev/job": "orders",
        "spark-role": "executor",
        LABEL_DRIVER: running,
    }
    assert pdb["metadata"]["ownerReferences"][0]["kind"] == "StreamingJob"


def _executor_labels(driver_pod: str, epoch: int, attempt: int) -> dict[str, str]:
    """An executor's labels as Spark sets them from the driver's confs (and its role)."""
    prefix = "spark.kubernetes.executor.label."
    confs = spark_confs(JOB, SPEC, driver_pod, epoch, attempt)
    return {
        "spark-role": "executor",
        **{k.removeprefix(prefix): v for k, v in confs.items() if k.startswith(prefix)},
    }


def test_with_a_standby_the_budget_counts_only_the_running_drivers_executors():
    """Beside a standby (or a warm hand-over's next driver) two drivers have executors: a
    budget over both would let a drain evict as many as the other driver has, the running
    one's included. It selects the running driver's only; the waiting one's run no task."""
    running, standby = driver_pod_name("orders", 1, 1), driver_pod_name("orders", 1, 2)
    selector = build_disruption_budget(JOB, running, 2)["spec"]["selector"]["matchLabels"]
    pods = {
        (driver, i): _executor_labels(driver, 1, attempt)
        for driver, attempt in ((running, 1), (standby, 2))
        for i in (1, 2)
    }
    covered = {key for key, labels in pods.items() if selector.items() <= labels.items()}
    assert covered == {(running, 1), (running, 2)}
    # minAvailable = every executor the running driver has: no voluntary eviction of one
    assert len(covered) - build_disruption_budget(JOB, running, 2)["spec"]["minAvailable"] == 0


def test_the_attempt_after_a_node_loss_avoids_that_node_in_every_user_term():
    user_terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
    ]
    spec = make_spec(
        podTemplate={
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": user_terms
                        }
                    }
                }
            }
        }
    )
    pod = build_driver_pod(
        JOB, spec, Launch("orders-e1-a2-driver", epoch=1, attempt=2,
        checkpoint_location="s3a://x", avoid_nodes=("w1",)),
    )  # fmt: skip
    template = build_executor_template(spec, "orders", ["w1"])
    away = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["w1"]}
    for built in (pod, template):
        terms = built["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert [t["matchExpressions"] for t in terms] == [
            [user_terms[0]["matchExpressions"][0], away],
            [user_terms[1]["matchExpressions"][0], away],
        ]
    plain = build_executor_template(make_spec(), "orders", ["w1"])
    assert plain["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ] == {"nodeSelectorTerms": [{"matchExpressions": [away]}]}
    assert "nodeAffinity" not in build_executor_template(make_spec(), "orders")["spec"]["affinity"]


def test_the_documented_guardrails_are_the_code_s():
    docs = (Path(__file__).parents[4] / "docs" / "operator" / "spec.md").read_text()
    listed = docs.split("<!-- guardrails -->")[1].split("<!-- /guardrails -->")[0]
    assert re.findall(r"^- `([^`]+)`", listed, re.MULTILINE) == list(SPARK_CONF_GUARDRAILS)


def test_a_kafka_sinks_own_credentials_and_ca_reach_its_pods_only_by_secret_reference():
    """spec.sinkKafkaCredentials: KAFKA_SINK_* beside the source's KAFKA_*, its CA a file
    of its own, and its Secrets checked before a launch like the source's."""
    spec = make_spec(
        kafkaCredentials={"secretName": "kafka-creds"},
        sinkKafkaCredentials={
            "secretName": "sink-creds",
            "usernameKey": "user",
            "securityProtocol": "SASL_PLAINTEXT",
            "caSecret": {"name": "sink-ca", "key": "root.pem"},
        },
        job__sink={"format": "kafka", "topic": "out", "bootstrapServers": "other:9092"},
    )
    for built in (pod(spec)["spec"], build_executor_template(spec, "orders")["spec"]):
        (c,) = built["containers"]
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
        assert env["KAFKA_SINK_SASL_USERNAME"] == {
            "secretKeyRef": {"name": "sink-creds", "key": "user"}
        }
        assert env["KAFKA_SINK_SASL_PASSWORD"] == {
            "secretKeyRef": {"name": "sink-creds", "key": "password"}
        }
        assert env["KAFKA_SINK_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
        assert env["KAFKA_SINK_SASL_MECHANISM"] == "SCRAM-SHA-512"
        assert env["KAFKA_SINK_SSL_CA_LOCATION"] == "/etc/streamingjob-kafka-sink-ca/ca.crt"
        assert env["KAFKA_SASL_USERNAME"] == {
            "secretKeyRef": {"name": "kafka-creds", "key": "username"}
        }
        assert "KAFKA_SSL_CA_LOCATION" not in env  # the source's CA: the system's bundle
        volume = next(v for v in built["volumes"] if v["name"] == "streamingjob-kafka-sink-ca")
        assert volume["secret"]["items"] == [{"key": "root.pem", "path": "ca.crt"}]
        mount = next(m for m in c["volumeMounts"] if m["name"] == volume["name"])
        assert mount["mountPath"] == "/etc/streamingjob-kafka-sink-ca"
    refs = {field: (name, keys) for field, name, keys in secret_references(spec)}
    assert refs["spec.sinkKafkaCredentials.secretName"] == (
        "sink-creds",
        {
            "spec.sinkKafkaCredentials.usernameKey": "user",
            "spec.sinkKafkaCredentials.passwordKey": "password",
        },
    )
    assert refs["spec.sinkKafkaCredentials.caSecret.name"] == (
        "sink-ca",
        {"spec.sinkKafkaCredentials.caSecret.key": "root.pem"},
    )


def test_an_iceberg_catalogs_credential_reaches_its_pods_only_by_secret_reference():
    """spec.job.sink.catalog.credentialsSecret: ICEBERG_CATALOG_CREDENTIAL by secretKeyRef
    (the driver commits the table), never its value; its Secret checked before a launch; the
    catalog's uri and table in the job's ConfigMap, which holds no secret."""
    catalog = {
        "type": "rest",
        "uri": "https://catalog.lake.svc:8181/api",
        "credentialsSecret": {"name": "catalog-login", "key": "token"},
    }
    spec = make_spec(job__sink={"format": "iceberg", "table": "lake.orders", "catalog": catalog})
    (c,) = pod(spec)["spec"]["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["ICEBERG_CATALOG_CREDENTIAL"] == {
        "secretKeyRef": {"name": "catalog-login", "key": "token"}
    }
    refs = {field: (name, keys) for field, name, keys in secret_references(spec)}
    assert refs["spec.job.sink.catalog.credentialsSecret.name"] == (
        "catalog-login",
        {"spec.job.sink.catalog.credentialsSecret.key": "token"},
    )
