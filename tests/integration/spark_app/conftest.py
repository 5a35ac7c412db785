from collections.abc import Iterator

import pytest

from tests.support.runner_process import RunnerProcess


@pytest.fixture(autouse=True)
def _no_runner_outlives_its_test() -> Iterator[None]:
    yield
    RunnerProcess.kill_all()
