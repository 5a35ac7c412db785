"""Which read path an executor takes: native when `streamingjob_native` loads and accepts
the client configuration, pure Python otherwise (readPath=auto), and either one on request;
and which native engine: the fetcher where it understands every setting, else librdkafka.
What each reads, against a real broker and side by side:
tests/integration/spark_app/test_source_on_broker.py."""

from __future__ import annotations

import logging

import pytest

from spark_app.source import native_read, partition_reader
from spark_app.source.partition_range import KafkaInputPartition, client_config
from spark_app.source.partition_reader import read_range

pytestmark = pytest.mark.unit


def part(read_path: str, native_engine: str = "auto", **client: str) -> KafkaInputPartition:
    return KafkaInputPartition(
        topic="orders",
        partition=0,
        start=0,
        end=10,
        client_config={"bootstrap.servers": "127.0.0.1:1", **client},
        read_path=read_path,
        native_engine=native_engine,
    )


@pytest.fixture
def python_reads(monkeypatch) -> list[KafkaInputPartition]:
    """Records the partitions handed to the pure-Python path instead of reading them."""
    calls: list[KafkaInputPartition] = []

    def fake(p, config):
        calls.append(p)
        yield "python-batch"

    monkeypatch.setattr(partition_reader, "_read_range_python", fake)
    return calls


@pytest.fixture
def no_native_module(monkeypatch) -> None:
    monkeypatch.setattr(native_read, "module", lambda: None)
    monkeypatch.setattr(native_read, "_unavailable_reason", ["No module named 'x'"])
    monkeypatch.setattr(native_read, "_warned", set())


def test_the_native_module_is_built_here_so_both_paths_are_tested():
    native = native_read.module()
    assert native is not None, "build it: make native (scripts/native.sh --install <venv>)"
    assert native.librdkafka_version().startswith("2.")


@pytest.mark.usefixtures("no_native_module")
def test_auto_reads_with_python_when_the_module_is_missing(python_reads, caplog):
    caplog.set_level(logging.WARNING, "spark_app.source.native_read")
    assert list(read_range(part("auto"))) == ["python-batch"]
    assert list(read_range(part("auto"))) == ["python-batch"]
    assert len(python_reads) == 2
    assert caplog.text.count("streamingjob_native cannot be imported") == 1  # once per worker


@pytest.mark.usefixtures("no_native_module")
def test_the_driver_says_once_which_path_why_and_how_to_get_the_native_one(
    python_reads, monkeypatch, caplog
):
    reason = ["No module named 'streamingjob_native'"]
    monkeypatch.setattr(native_read, "_unavailable_reason", reason)
    line = native_read.read_path_line("auto", "auto")
    assert "\n" not in line
    assert line.startswith("read path: pure Python")
    assert "because streamingjob_native is not installed" in line
    assert "`make native` builds the native one" in line
    # the driver hands its partitions `python`: no worker repeats the line (local[2]: twice)
    caplog.set_level(logging.DEBUG, "spark_app.source.native_read")
    assert native_read.executor_read_path("auto") == "python"
    assert list(read_range(part(native_read.executor_read_path("auto")))) == ["python-batch"]
    assert caplog.text == ""
    # a module that is there but does not load says why
    reason[:] = ["libstdc++.so.6: cannot open shared object file"]
    assert "does not load (libstdc++.so.6: cannot open" in native_read.read_path_line("auto", "x")
    on_request = native_read.read_path_line("native", "auto")
    assert "reads fail" in on_request and "`make native`" in on_request
    assert native_read.executor_read_path("native") == "native"  # fails on the workers, named


def test_the_driver_line_names_the_native_engine_or_the_python_request(monkeypatch):
    monkeypatch.setattr(native_read, "module", lambda: object())
    assert native_read.read_path_line("auto", "fetch") == (
        "read path: native (Rust, records straight into Arrow; engine fetch)"
    )
    assert native_read.executor_read_path("auto") == "auto"  # a worker may still fall back
    assert "as readPath=python asks" in native_read.read_path_line("python", "auto")


@pytest.mark.usefixtures("no_native_module")
def test_native_on_request_fails_without_the_module(python_reads):
    with pytest.raises(native_read.NativeUnavailable, match="orders-0: readPath=native, but"):
        list(read_range(part("native")))
    assert python_reads == []


def test_a_setting_the_native_build_lacks_falls_back_or_fails_per_read_path(
    python_reads, monkeypatch, caplog
):
    # OIDC token retrieval needs libcurl, which confluent's librdkafka has and ours has not.
    monkeypatch.setattr(native_read, "_warned", set())
    caplog.set_level(logging.WARNING, "spark_app.source.native_read")
    oidc = {"sasl.oauthbearer.method": "oidc"}
    assert list(read_range(part("auto", **oidc))) == ["python-batch"]
    assert "cannot use the client configuration" in caplog.text
    with pytest.raises(native_read.NativeUnavailable, match=r"sasl\.oauthbearer\.method"):
        list(read_range(part("native", **oidc)))
    assert len(python_reads) == 1


def test_the_native_path_takes_the_same_client_configuration(monkeypatch, python_reads):
    seen = []

    class FakeNative:
        class ConfigError(Exception):
            pass

        def RangeReader(self, config, *args):  # the module's class name
            seen.append((dict(config), args))
            raise self.ConfigError("stop here")

    monkeypatch.setattr(native_read, "module", lambda: FakeNative())
    p = part("auto", **{"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512"})
    list(read_range(p))
    ((config, args),) = seen
    expected = {
        k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in client_config(p).items()
    }
    assert config == expected
    assert config["auto.offset.reset"] == "error" and config["enable.partition.eof"] == "true"
    assert config["security.protocol"] == "SASL_SSL"
    assert args == ("orders", 0, 0, 10, False, 10_000, 120_000, "auto", -1, -1)  # no epochs


def test_the_engine_is_the_fetcher_where_it_understands_every_setting(monkeypatch, caplog):
    """Readers open without connecting, so no broker is needed to see the choice."""
    monkeypatch.setattr(native_read, "_warned", set())
    caplog.set_level(logging.INFO, "spark_app.source.native_read")

    def opened(p: KafkaInputPartition):
        reader = native_read.open_range(p, client_config(p))
        reader.close()
        return reader.engine, reader.fallback_reason

    assert opened(part("native")) == ("fetch", "")
    scram = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}
    scram |= {"sasl.username": "u", "sasl.password": "p"}
    assert opened(part("native", **scram)) == ("fetch", "")
    # OAUTHBEARER (here its unsecured test tokens) is librdkafka's alone
    oauth = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}
    oauth["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
    for _ in range(2):
        engine, why = opened(part("native", **oauth))
        assert engine == "librdkafka" and "not handled by the native fetcher" in why
    assert caplog.text.count("native fetcher not used") == 1  # once per worker
    with pytest.raises(native_read.NativeUnavailable, match="oauthbearer"):
        opened(part("native", native_engine="fetch", **oauth))
    assert opened(part("native", native_engine="librdkafka")) == ("librdkafka", "")


def test_python_on_request_never_loads_the_native_module(monkeypatch, python_reads):
    def boom():
        raise AssertionError("the native module was consulted")

    monkeypatch.setattr(native_read, "module", boom)
    assert list(read_range(part("python"))) == ["python-batch"]
