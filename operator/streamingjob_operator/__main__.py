"""`python -m streamingjob_operator`: run the operator with the namespaces from settings.

Equivalent to `kopf run -m streamingjob_operator -A` (or `--namespace=...` per watched
namespace) plus a liveness endpoint on :8080/healthz.
"""

from __future__ import annotations

import os

import kopf

from . import handlers as handlers
from .settings import OperatorSettings


def main() -> None:
    config = OperatorSettings.from_env()
    liveness = os.environ.get("STREAMINGJOB_LIVENESS", "http://0.0.0.0:8080/healthz")
    kopf.run(
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        liveness_endpoint=liveness or None,
        standalone=True,
    )


if __name__ == "__main__":
    main()
