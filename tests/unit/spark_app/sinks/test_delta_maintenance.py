"""The Delta maintenance CLI without services: its refusals, its steps on a table on the
local disk, and the example CronJob, which must run it on the job's own manifest.

On a real broker, beside a running job, on a local disk and on an object store:
tests/integration/spark_app/test_delta_maintenance.py."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml

from spark_app.api.manifest import S3_ACCESS_KEY_ENV, S3_SECRET_KEY_ENV
from spark_app.sinks.delta_maintenance import (
    EXIT_INVALID,
    EXIT_NO_TABLE,
    EXIT_OK,
    SHORT_RETENTION_FLAG,
    main,
    parse_args,
    store_error,
    target_of_manifest,
)
from streamingjob_operator.api.models import StreamingJob
from streamingjob_operator.children.driver_pod import build_job_configmap
from streamingjob_operator.children.pod_parts import container_security, pod_security

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "delta-maintenance-cronjob.yaml"


def _example() -> tuple[dict, dict]:
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(EXAMPLE.read_text())}
    return docs["StreamingJob"], docs["CronJob"]


def a_local_table(path: Path, batches: int) -> str:
    """A table written the way the sink writes: one commit per batch, with its app
    transaction."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    for batch in range(batches):
        write_deltalake(
            str(path),
            pa.table({"id": [batch]}),
            mode="append",
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id="query", version=batch)]
            ),
        )
    return f"file://{path}"


def test_a_short_vacuum_retention_needs_the_flag_that_says_no_reader_needs_it(capsys):
    with pytest.raises(SystemExit) as refused:
        parse_args(["--table", "file:///t", "--retention-hours", "0"])
    assert refused.value.code == EXIT_INVALID
    assert SHORT_RETENTION_FLAG in capsys.readouterr().err
    args = parse_args(["--table", "file:///t", "--retention-hours", "0", SHORT_RETENTION_FLAG])
    assert args.retention_hours == 0
    assert parse_args(["--table", "file:///t", "--retention-hours", "1"]).retention_hours == 1
    for bad in (["--retention-hours", "-1"], ["--target-size", "0"], ["--step", "optimize"]):
        with pytest.raises(SystemExit):
            parse_args(["--table", "file:///t", *bad])


def test_a_job_without_a_delta_sink_and_a_bad_table_uri_are_refused(tmp_path, capsys):
    manifest, _ = _example()
    manifest["spec"]["job"]["sink"] = {"format": "parquet", "path": "s3a://lake/orders"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert main(["--manifest", str(path)]) == EXIT_INVALID
    assert "spec.job.sink.format is parquet, not delta" in capsys.readouterr().err
    assert main(["--table", "/a/bare/path"]) == EXIT_INVALID
    assert "--table /a/bare/path: expected file:///path" in capsys.readouterr().err
    assert main(["--table", f"file://{tmp_path}/nothing"]) == EXIT_NO_TABLE
    assert "no Delta table at" in capsys.readouterr().err


def test_every_step_on_a_local_table_keeps_its_app_transactions(tmp_path, capsys):
    from deltalake import DeltaTable

    uri = a_local_table(tmp_path / "t", batches=5)
    argv = ["--table", uri, "--retention-hours", "0", SHORT_RETENTION_FLAG]
    assert main(argv) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    summary = json.loads(lines[-1])
    assert [line.split(":")[0] for line in lines[1:-1]] == ["compact", "log", "vacuum"]
    assert summary["compact"]["filesRemoved"] == 5 and summary["compact"]["filesAfter"] == 1
    assert summary["vacuum"]["filesDeleted"] == 5
    assert len(list((tmp_path / "t").glob("*.parquet"))) == 1
    table = DeltaTable(uri)
    assert table.transaction_version("query") == 4  # in the checkpoint now
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == list(range(5))
    # a step alone: nothing to compact any more
    assert main(["--table", uri, "--step", "compact"]) == EXIT_OK
    again = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert again["compact"]["filesRemoved"] == 0 and set(again) & {"log", "vacuum"} == set()


def test_store_errors_lose_their_terminal_colours():
    raw = "Generic S3 error\n  \x1b[31m↳\x1b[0m Connection refused (os error 111)\n"
    assert store_error(OSError(raw)) == "Generic S3 error / Connection refused (os error 111)"


def test_the_example_cronjob_runs_the_cli_on_the_manifest_the_operator_gives_the_job(tmp_path):
    job, cron = _example()
    job["metadata"]["uid"] = "0000"
    spec = StreamingJob.model_validate(job).spec
    configmap = build_job_configmap(job, spec)
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cron["metadata"]["namespace"] == configmap["metadata"]["namespace"]
    (container,) = pod["containers"]
    assert container["image"] == job["spec"]["image"]

    # the command: the installed entry point of this CLI, with arguments it takes
    command, *argv = container["args"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[command] == "spark_app.sinks.delta_maintenance:main"
    args = parse_args(argv)

    # --manifest is the job's manifest: the operator's ConfigMap, its key, mounted there
    volume = next(v for v in pod["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    (item,) = volume["configMap"]["items"]
    assert item["key"] in configmap["data"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert Path(mount["mountPath"]) / item["path"] == args.manifest
    manifest = tmp_path / "job.yaml"
    manifest.write_text(configmap["data"][item["key"]])
    target = target_of_manifest(manifest)
    assert target.path == spec.job.sink.path
    assert spec.s3 is not None and target.options["AWS_ENDPOINT_URL"] == spec.s3.endpoint

    # the key pair: the job's Secret as the environment, never an argument
    secret = spec.s3.credentials_secret
    assert secret is not None
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert env == {
        S3_ACCESS_KEY_ENV: {"name": secret.name, "key": secret.access_key_id_key},
        S3_SECRET_KEY_ENV: {"name": secret.name, "key": secret.secret_access_key_key},
    }

    # restricted, like the driver's pods; the read-only root leaves /tmp to an emptyDir
    assert pod["securityContext"] == pod_security()
    assert container["securityContext"] == container_security()
    tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
    assert any(v["name"] == tmp["name"] and "emptyDir" in v for v in pod["volumes"])
