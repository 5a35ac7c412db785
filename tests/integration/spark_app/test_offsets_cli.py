"""`python -m spark_app offsets`: list, reset (earliest, latest, a timestamp) and alter a
job's group offsets on a real broker; out-of-range and busy-group requests are refused and
write nothing. No Spark: the CLI is a Kafka client only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml
from confluent_kafka import Consumer, Producer

from tests.integration.operator.kube_helpers import REPO
from tests.support.kafka_tools import commit_offsets, group_offsets, new_topic
from tests.support.runner_process import job_manifest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def offsets_cli(manifest, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spark_app", "offsets", "--manifest", str(manifest), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def listed(manifest) -> dict[int, dict]:
    done = offsets_cli(manifest, "--json", "list")
    assert done.returncode == 0, done.stderr
    return {p["partition"]: p for p in json.loads(done.stdout)["partitions"]}


def test_list_reset_alter_and_refusals(kafka, tmp_path):
    topic = new_topic(kafka.bootstrap, partitions=2, prefix="cli")
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    # 10 records per partition, timestamps 1000 ms apart from t0: offset n has t0 + n*1000
    t0 = (int(time.time()) - 3600) * 1000
    for partition in (0, 1):
        for n in range(10):
            producer.produce(topic, value=b"x", partition=partition, timestamp=t0 + n * 1000)
    assert producer.flush(30) == 0
    manifest_doc = job_manifest("cli", kafka.bootstrap, topic, tmp_path)
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(manifest_doc))
    group = manifest_doc["spec"]["job"]["source"]["groupId"]
    commit_offsets(kafka.bootstrap, group, topic, {0: 4})

    rows = listed(manifest)
    assert rows[0] == {
        "topic": topic,
        "partition": 0,
        "before": 4,
        "after": 4,
        "logStart": 0,
        "logEnd": 10,
        "lag": 6,
    }
    assert rows[1]["before"] is None and rows[1]["lag"] == 10

    # reset to latest, one partition only
    done = offsets_cli(manifest, "reset", "--to", "latest", "--partition", f"{topic}:1")
    assert done.returncode == 0, done.stderr
    assert "1 of 1 partition(s) changed" in done.stdout
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 4, 1: 10}

    # reset to a timestamp (RFC 3339): the first record at or after it
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 / 1000 + 6)) + "Z"
    done = offsets_cli(manifest, "reset", "--to", "timestamp", "--timestamp", at)
    assert done.returncode == 0, done.stderr
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 6, 1: 6}
    # a time after every record: the log end
    done = offsets_cli(
        manifest, "reset", "--to", "timestamp", "--timestamp", str(int(time.time() * 1000))
    )
    assert done.returncode == 0, done.stderr
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 10, 1: 10}

    # reset to earliest, dry run first: nothing written
    done = offsets_cli(manifest, "reset", "--to", "earliest", "--dry-run")
    assert done.returncode == 0 and "(dry run)" in done.stdout, done.stderr
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 10, 1: 10}
    done = offsets_cli(manifest, "reset", "--to", "earliest")
    assert done.returncode == 0, done.stderr
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 0, 1: 0}

    # alter per partition; the log end itself is valid (nothing left to read)
    done = offsets_cli(
        manifest, "alter", "--partition", f"{topic}:0=3", "--partition", f"{topic}:1=10"
    )
    assert done.returncode == 0, done.stderr
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 3, 1: 10}

    # out of range: refused, naming the partition and its valid range; nothing written
    done = offsets_cli(
        manifest, "alter", "--partition", f"{topic}:0=5", "--partition", f"{topic}:1=11"
    )
    assert done.returncode == 2
    assert f"{topic}-1 offset 11 is outside [0, 10]" in done.stderr
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 3, 1: 10}
    # an unknown partition, a malformed request: refused
    done = offsets_cli(manifest, "reset", "--to", "earliest", "--partition", f"{topic}:7")
    assert done.returncode == 2 and f"{topic}-7" in done.stderr
    done = offsets_cli(manifest, "reset", "--to", "timestamp")
    assert done.returncode == 2 and "needs a timestamp" in done.stderr

    # a live member in the group: Kafka refuses, and the CLI says why
    member = Consumer(
        {"bootstrap.servers": kafka.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    member.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment(), "the member joined the group"
        done = offsets_cli(manifest, "reset", "--to", "earliest")
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "live members" in done.stderr
    finally:
        member.close()
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 3, 1: 10}
