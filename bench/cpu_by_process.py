"""Where a long run's CPU goes, by kind of process (what docs/ci.md's figures come from).

    python bench/cpu_by_process.py record OUT.json PATTERN   # while a process matching PATTERN runs
    python bench/cpu_by_process.py report OUT.json

`record` reads every process's CPU time from /proc every 2 s (processes in the kind bed's
containers too: they share the kernel) until no process's command line contains PATTERN
(e.g. ".ci/run"); per process it keeps the command line, the test that was running when it
started (PYTEST_CURRENT_TEST, inherited from pytest) and its CPU seconds. A process that
lives less than a sampling interval is missed, so the totals are lower bounds. `report`
sums them by kind (Kafka, Spark JVMs, PySpark workers, the kind bed's parts, ...) and by the
test that started them. It also reads the machine's own counters (/proc/stat) at the start and
the end: the cores' busy share over the run, short-lived processes and the kernel included,
which the per-process totals miss (CI run 39: 2897 CPU s sampled, 3309 spent: the two cores
89 % busy, not the 78 % the samples add up to).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
INTERVAL = 2.0
# (kind, substrings of the command line, any of which marks it), first match wins. A process
# that execs keeps the command line it had when first seen (bash scripts that exec java).
KINDS = [
    ("Kafka broker, local", ["kafka.Kafka /tmp/", "/kafka-cds/"]),
    ("Kafka broker, kind bed", ["kafka.Kafka", "start-kafka.sh"]),
    ("Spark JVM, local", ["pyspark/bin/spark-class", "site-packages/pyspark/conf"]),
    ("Spark JVM, kind bed", ["/opt/spark/", "/opt/java/bin/java -Djava.net.prefer"]),
    ("PySpark worker / source runner", ["pyspark.daemon", "python_streaming_source_runner"]),
    ("schema registry", ["apicurio", "quarkus"]),
    ("pytest", ["-m pytest"]),
    ("Spark runner (python)", ["-m spark_app", "run_job.py"]),
    ("operator", ["streamingjob_operator", "streamingjob-operator", "kopf run"]),
    ("kube-apiserver", ["kube-apiserver"]),
    ("etcd", ["etcd"]),
    ("kubelet / kube-controller / scheduler / proxy", ["kubelet", "kube-controller", "kube-sch"]),
    ("containerd / docker / runc", ["containerd", "dockerd", "docker ", "runc", "unpigz"]),
    ("MinIO", ["minio server"]),
]


def _kind(command: str) -> str:
    if not command:
        return "kernel threads"
    return next((k for k, marks in KINDS if any(m in command for m in marks)), "other")


def _read(pid: str) -> tuple[str, float] | None:
    """(start time, CPU seconds) of a process, None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19], (int(fields[11]) + int(fields[12])) / TICKS


def _machine() -> tuple[float, float]:
    """(busy, all) CPU seconds of every core since boot, from /proc/stat's first line."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / TICKS, sum(fields) / TICKS


def _describe(pid: str) -> dict | None:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (OSError, UnicodeDecodeError):
        return None
    test = next((e[20:].decode() for e in environ if e.startswith(b"PYTEST_CURRENT_TEST=")), "")
    return {"command": command[:400], "test": test.split(" ")[0]}


def record(out: Path, pattern: str) -> None:
    processes: dict[str, dict] = {}
    started, first = time.monotonic(), True
    machine_start = _machine()
    while True:
        now, running = time.monotonic() - started, False
        for pid in filter(str.isdigit, os.listdir("/proc")):
            seen = _read(pid)
            if seen is None:
                continue
            key = f"{pid}:{seen[0]}"
            if key not in processes:
                described = _describe(pid)
                if described is None:
                    continue
                # a process already running at the start counts only what it spends after
                base = seen[1] if first else 0.0
                processes[key] = {**described, "first": round(now, 1), "base": base}
            entry = processes[key]
            entry["cpu"], entry["last"] = seen[1] - entry["base"], round(now, 1)
            running = running or (pattern in entry["command"] and pid != str(os.getpid()))
        if not running and not first:
            break
        first = False
        time.sleep(INTERVAL)
    busy, spent = (end - start for end, start in zip(_machine(), machine_start, strict=True))
    machine = {"seconds": round(time.monotonic() - started, 1), "busy_cpu_seconds": round(busy)}
    machine["cores_busy"] = round(busy / spent * (os.cpu_count() or 1), 2)
    out.write_text(json.dumps({"machine": machine, "processes": list(processes.values())}))


def summary(path: Path) -> dict:
    """Seconds, CPU seconds, and CPU seconds by kind and by test file (the 16 largest)."""
    recorded = json.loads(path.read_text())
    processes = recorded["processes"]
    by_kind, by_test = Counter(), Counter()
    for p in processes:
        by_kind[_kind(p["command"])] += p["cpu"]
        by_test[p["test"].split("::")[0] or "(no test: the bed, the sessions)"] += p["cpu"]
    return {
        "machine": recorded["machine"],
        "seconds": round(max(p["last"] for p in processes)),
        "cpu_seconds": round(sum(by_kind.values())),
        "by_kind": {k: round(v) for k, v in by_kind.most_common(16)},
        "by_test_file": {k: round(v) for k, v in by_test.most_common(16)},
    }


def report(path: Path) -> None:
    found = summary(path)
    total, seconds = found["cpu_seconds"], found["seconds"] or 1.0
    machine = found["machine"]
    print(
        f"the machine: {machine['busy_cpu_seconds']} CPU s in {machine['seconds']:.0f} s, "
        f"{machine['cores_busy']:.2f} of {os.cpu_count()} cores busy (/proc/stat)"
    )
    print(f"the processes sampled: {total} CPU s, {total / seconds:.2f} cores on average")
    titles = {"by_kind": "by kind of process", "by_test_file": "by the test that started it"}
    for key, title in titles.items():
        print(f"\n{title}:")
        for name, cpu in found[key].items():
            print(f"  {cpu:7d} s  {100 * cpu / total:4.1f} %  {name}")


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["record", out, pattern]:
            record(Path(out), pattern)
        case ["report", path]:
            report(Path(path))
        case _:
            sys.exit(__doc__)
