"""spark_app uses jvm/localfs for file: paths only where Spark's jars have it (the image's
jars do not yet: a job there keeps Hadoop's own)."""

from __future__ import annotations

import pytest

from spark_app.runner.query import LOCAL_FS_CONF, LOCAL_FS_JAR, local_file_system_conf

pytestmark = pytest.mark.unit


def test_the_local_file_system_is_used_where_sparks_jars_have_it(tmp_path, monkeypatch) -> None:
    (tmp_path / "jars").mkdir()
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert local_file_system_conf() == {}
    (tmp_path / "jars" / LOCAL_FS_JAR).write_bytes(b"")
    assert local_file_system_conf() == LOCAL_FS_CONF
