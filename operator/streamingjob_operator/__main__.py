"""`python -m streamingjob_operator` (or the `streamingjob-operator` entry point): run the
operator with the namespaces from settings.

Equivalent to `kopf run -m streamingjob_operator -A` (or `--namespace=...` per watched
namespace) plus a liveness endpoint on :<STREAMINGJOB_HEALTH_PORT>/healthz.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import kopf

from . import handlers as handlers
from .settings import OperatorSettings


def main(argv: Sequence[str] | None = None) -> None:
    argparse.ArgumentParser(
        prog="streamingjob-operator",
        description="Runs the StreamingJob operator (kopf). Settings come from STREAMINGJOB_* "
        "environment variables (docs/operator.md, 'Operator settings').",
    ).parse_args(argv)
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
