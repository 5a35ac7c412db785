"""The cleanup Job of a deleted job whose checkpoints go with it (checkpoint.deleteOnJobDeletion):
the paths it deletes and the command that deletes them.
"""

from __future__ import annotations

import copy
from typing import Any

from spark_app.api.manifest import job_checkpoints
from streamingjob_operator.api.models import StreamingJobSpec
from streamingjob_operator.children.builders import (
    IMAGE_HADOOP_CONF,
    base_labels,
)
from streamingjob_operator.children.pod_parts import (
    container_security,
    pod_security,
    s3_env,
    scratch_mounts,
    scratch_volumes,
    spec_tolerations,
)


def checkpoint_cleanup_paths(
    spec: StreamingJobSpec, namespace: str, name: str, uid: str, recorded: list[str]
) -> list[str] | None:
    """What a cleanup Job deletes: this job's own directory (`manifest.job_checkpoints`:
    <location>/<namespace>/<name>/<uid>), never another job's of the same name, and the
    `recorded` locations outside it (epochs an earlier operator laid out without the uid).
    For an s3a:// location, or a file:// one on one of the job's volumeMounts; None when the
    operator cannot reach the data (a node-local path, another scheme)."""
    location = spec.checkpoint.location
    own = job_checkpoints(location, namespace, name, uid)
    paths = [own, *sorted({p for p in recorded if p and not p.startswith(own + "/")})]
    if location.startswith("s3a://"):
        return paths
    local = [_mounted(spec, path) for path in paths]
    return [p for p in local if p is not None] if local[0] is not None else None


def _mounted(spec: StreamingJobSpec, location: str) -> str | None:
    """A file:// (or absolute) location as a path inside one of the job's volumeMounts."""
    if location.startswith("file://"):
        path = location[len("file://") :]
    elif location.startswith("/"):
        path = location
    else:
        return None
    target = "/" + path.lstrip("/").rstrip("/")
    for mount in spec.volume_mounts:
        mount_path = str(mount.get("mountPath", "")).rstrip("/")
        if mount_path and (target + "/").startswith(mount_path + "/") and target != mount_path:
            return target
    return None


def cleanup_command(spec: StreamingJobSpec, paths: list[str]) -> list[str]:
    """rm for mounted paths; Hadoop's FsShell (in the Spark image, with S3A) for s3a://."""
    if not paths[0].startswith("s3a://"):
        return ["rm", "-rf", "--", *paths]
    confs = spec.s3.hadoop_conf() if spec.s3 else {}
    defines = [
        arg
        for key, value in sorted(confs.items())
        for arg in ("-D", f"{key.removeprefix('spark.hadoop.')}={value}")
    ]
    return [
        "java",
        "-cp",
        f"{IMAGE_HADOOP_CONF}:/opt/spark/jars/*",
        "org.apache.hadoop.fs.FsShell",
        *defines,
        "-rm",
        "-r",
        "-f",
        "-skipTrash",
        *paths,
    ]


def build_cleanup_job(
    job: dict[str, Any], spec: StreamingJobSpec, paths: list[str], job_name: str
) -> dict[str, Any]:
    """A short-lived Job that deletes the job's checkpoint data (checkpoint_cleanup_paths). It
    is not owned by the StreamingJob (which is going away); it deletes itself after it
    finished."""
    meta = job["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": meta["namespace"],
            "labels": base_labels(meta["name"]),
        },
        "spec": {
            "ttlSecondsAfterFinished": 600,
            "backoffLimit": 3,
            "template": {
                "metadata": {"labels": base_labels(meta["name"])},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "securityContext": pod_security(),
                    "tolerations": spec_tolerations(spec),
                    "nodeSelector": dict(spec.node_selector),
                    "volumes": [*scratch_volumes(), *copy.deepcopy(spec.volumes)],
                    "containers": [
                        {
                            "name": "cleanup",
                            "image": spec.image,
                            "imagePullPolicy": spec.image_pull_policy,
                            "command": cleanup_command(spec, paths),
                            "env": s3_env(spec),
                            "volumeMounts": [
                                *scratch_mounts(),
                                *copy.deepcopy(spec.volume_mounts),
                            ],
                            "securityContext": container_security(),
                        }
                    ],
                },
            },
        },
    }
