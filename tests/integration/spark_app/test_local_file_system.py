"""jvm/localfs: Hadoop's local file system without child processes, which spark_app uses for
file: checkpoints and sinks where Spark's jars have it (the venv's: scripts/venv.sh). Hadoop's
own, without its native library, runs `chmod` for each file it creates and `readlink` for each
link status (a FileContext rename asks two): the control below shows it, beside ours that
creates files and renames them over others with no process."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from spark_app.runner.query import LOCAL_FS_CONF, local_file_system_conf
from tests.support.spark_session import local_session

pytestmark = pytest.mark.integration

HADOOP_OWN = {
    "fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
    "fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.LocalFs",
}
OURS = {key.removeprefix("spark.hadoop."): value for key, value in LOCAL_FS_CONF.items()}


def children_cpu_ticks(pid: int) -> int:
    """CPU ticks of the process's ended children (cutime + cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[13]) + int(fields[14])


def local_file_systems(spark, settings: dict[str, str]):
    """(FileSystem, FileContext) of file: under `settings`, each checked to be the one set."""
    jvm = spark._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration()
    for key, value in settings.items():
        conf.set(key, value)
    uri = jvm.java.net.URI("file:///")
    fs = jvm.org.apache.hadoop.fs.FileSystem.newInstance(uri, conf)
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf)
    assert fs.getClass().getName() == settings["fs.file.impl"]
    assert (
        context.getDefaultFileSystem().getClass().getName()
        == (settings["fs.AbstractFileSystem.file.impl"])
    )
    return fs, context


def write_and_rename(spark, settings: dict[str, str], where: Path, files: int) -> None:
    """Per file, as Spark's checkpoint writes one: created with a permission (FileSystem),
    renamed over the last one (FileContext), its link status read."""
    jvm = spark._jvm
    fs, context = local_file_systems(spark, settings)
    overwrite = spark.sparkContext._gateway.new_array(jvm.org.apache.hadoop.fs.Options.Rename, 1)
    overwrite[0] = jvm.org.apache.hadoop.fs.Options.Rename.OVERWRITE
    mode = jvm.org.apache.hadoop.fs.permission.FsPermission(0o640)
    final = jvm.org.apache.hadoop.fs.Path(str(where / "final"))
    for n in range(files):
        temp = jvm.org.apache.hadoop.fs.Path(str(where / f"temp-{n}"))
        fs.create(temp, mode, True, 4096, 1, 1 << 20, None).close()
        assert stat.S_IMODE(os.stat(where / f"temp-{n}").st_mode) == 0o640
        context.rename(temp, final, overwrite)
        assert not context.getFileLinkStatus(final).isSymlink()
    fs.close()


def test_ours_writes_renames_and_reads_links_without_a_child_process(tmp_path) -> None:
    assert local_file_system_conf() == LOCAL_FS_CONF, "jvm/localfs is not in Spark's jars"
    spark = local_session("localfs")
    jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    spent = {}
    for name, settings in (("hadoop's", HADOOP_OWN), ("ours", OURS)):
        where = tmp_path / name
        where.mkdir()
        before = children_cpu_ticks(jvm_pid)
        write_and_rename(spark, settings, where, files=50)
        spent[name] = children_cpu_ticks(jvm_pid) - before
    assert spent["hadoop's"] > 0, spent  # the control: its chmod and readlink processes
    assert spent["ours"] == 0, spent
    # a symbolic link's status (rare: Hadoop's own way, a readlink process) names its target
    os.symlink(tmp_path / "ours" / "final", tmp_path / "link")
    _, context = local_file_systems(spark, OURS)
    status = context.getFileLinkStatus(spark._jvm.org.apache.hadoop.fs.Path(str(tmp_path / "link")))
    assert status.isSymlink()
    assert status.getSymlink().toUri().getPath() == str(tmp_path / "ours" / "final")
