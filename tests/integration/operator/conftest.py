"""Fixtures of the operator's API-server tests: one real etcd + kube-apiserver per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devbed.kube_apiserver import KubeAPIServer
from tests.integration.operator.kube_helpers import Kube, running_operator


@pytest.fixture(scope="module")
def apiserver() -> Iterator[KubeAPIServer]:
    with KubeAPIServer() as server:
        yield server


@pytest.fixture(scope="module")
def kube(apiserver: KubeAPIServer) -> Kube:
    k = Kube(apiserver.kubeconfig)
    k.install_crd()
    return k


@pytest.fixture
def ns(kube: Kube) -> str:
    return kube.namespace()


@pytest.fixture
def operator(apiserver: KubeAPIServer, kube: Kube) -> Iterator[object]:
    with running_operator(apiserver.kubeconfig) as runner:
        yield runner
    if runner.exception is not None:  # surface crashes of the operator itself
        raise runner.exception
