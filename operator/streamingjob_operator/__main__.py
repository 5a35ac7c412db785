"""`python -m streamingjob_operator`: run the operator with the namespaces from settings.

Equivalent to `kopf run -m streamingjob_operator -A` (or `--namespace=...` per watched
namespace) plus a liveness endpoint on :<STREAMINGJOB_HEALTH_PORT>/healthz.
"""

from __future__ import annotations

import kopf

from . import handlers as handlers
from .settings import OperatorSettings


def main() -> None:
    config = OperatorSettings.from_env()
    liveness = f"http://0.0.0.0:{config.health_port}/healthz" if config.health_port else None
    kopf.run(
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        liveness_endpoint=liveness,
        standalone=True,
    )


if __name__ == "__main__":
    main()
