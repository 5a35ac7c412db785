"""The benchmark plots (docs/img/*.svg, `make plots`) and the README's summary show what
bench/results/*.json hold: redrawn from the committed results they are the committed files,
and a changed result changes its figure."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _plot_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_plot", ROOT / "bench" / "plot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


plot = _plot_module()


def test_the_committed_figures_are_the_ones_the_results_draw():
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "plot.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    linked = set(
        re.findall(r"\(img/([\w.-]+\.svg)\)", (ROOT / "docs" / "benchmarks.md").read_text())
    )
    assert linked == set(plot.figures(plot.load(plot.RESULTS))), (
        "docs/benchmarks.md shows every figure"
    )


def test_a_changed_result_changes_its_figure_and_check_says_so(tmp_path, monkeypatch):
    results = tmp_path / "results"
    shutil.copytree(ROOT / "bench" / "results", results)
    e2e = json.loads((results / "e2e.json").read_text())
    key = "driver_killed_to_first_restored_batch_committed"
    recorded = f"p50 {plot.seconds(e2e[key]['p50_seconds'])}"
    assert recorded in plot.figures(plot.load(results))["recovery-on-kind.svg"]
    e2e[key]["p50_seconds"] = 9.876
    (results / "e2e.json").write_text(json.dumps(e2e))
    figure = plot.figures(plot.load(results))["recovery-on-kind.svg"]
    assert "p50 9.88 s" in figure and recorded not in figure
    monkeypatch.setattr(plot, "RESULTS", results)
    monkeypatch.setattr(plot, "FIGURES", tmp_path / "img")
    assert plot.main([]) == 0  # writes them
    assert plot.main(["--check"]) == 0
    e2e[key]["p50_seconds"] = 10.5
    (results / "e2e.json").write_text(json.dumps(e2e))
    assert plot.main(["--check"]) == 1


def test_every_number_drawn_is_a_result():
    results = plot.load(plot.RESULTS)
    source = plot.figures(results)["source-throughput.svg"]
    for _, wall, processing in plot.SOURCE_QUERIES:
        assert plot.millions(results["source"]["rates_per_s"][wall]) in source
        assert plot.millions(results["source"]["processing_rates_per_s"][processing]) in source
    decode = plot.figures(results)["decode-throughput.svg"]
    for _, wall, processing in plot.DECODE_QUERIES:
        assert plot.millions(results["decode"]["rates_per_s"][wall]) in decode
        assert plot.millions(results["decode"]["processing_rates_per_s"][processing]) in decode
        assert plot.millions(results["decode"]["records_per_cpu_s"][processing]) in decode
    assert plot.millions(results["decode"]["rates_per_s"]["d_decoder_alone_one_core"]) in decode
    tables = plot.figures(results)["table-sinks.svg"]
    spread = results["table-sink"]["rates_per_s_spread"]
    for _, key in plot.TABLE_SINKS:
        if key in spread:
            assert plot.thousands(spread[key]["median"]) in tables
            assert plot.thousands(spread[key]["min"]) in tables
    ratio = results["table-sink"]["ratios"]["delta_over_parquet"]
    assert f"Delta / Parquet {plot.num(ratio['median'], 2)}" in tables
    recovery = plot.figures(results)["recovery-on-kind.svg"]
    for _, key in plot.E2E_SCENARIOS:
        samples = results["e2e"][key]["samples"]
        assert recovery.count("<circle") >= len(samples)
        assert f"p50 {plot.seconds(results['e2e'][key]['p50_seconds'])}" in recovery
    assert recovery.count("<circle") == sum(
        len(results["e2e"][key]["samples"]) for _, key in plot.E2E_SCENARIOS
    )


def test_numbers_round_half_up_as_written_by_hand():
    assert plot.num(1.145, 2) == "1.15"  # the float 1.145 is a hair below: round() gives 1.14
    assert plot.num(13.434999999999999, 1) == "13.4"
    assert plot.seconds(60) == "60 s" and plot.seconds(0.223) == "0.22 s"
    assert plot.millions(2360137) == "2.36 M"


def test_the_readmes_summary_quotes_the_results():
    readme = (ROOT / "README.md").read_text()
    summary = readme[
        readme.index("## Measured") : readme.index("\n## ", readme.index("## Measured") + 1)
    ]
    stale = {
        what: shown
        for what, shown in plot.headline(plot.load(plot.RESULTS)).items()
        if shown not in summary
    }
    assert not stale, f"README's Measured summary lacks these results (bench/results/): {stale}"
