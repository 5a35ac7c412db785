"""Where the e2e tier's measurements go: this run's file while it runs, moved over
bench/results/e2e.json when the run ends (conftest.py), so that the tests beside the tier
(the figures' unit tests) always read a whole run's results."""

from __future__ import annotations

from devbed.kind_cluster import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results" / "e2e.json"
RUN_RESULTS = RESULTS.with_suffix(".run.json")
