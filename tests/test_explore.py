"""explore.load_campaign: every run of a campaign in tidy tables, runs and boots side by side; and its notebook."""

from __future__ import annotations

from pathlib import Path

import pytest

from offload_lab.paper import explore
from paper_fixtures import ALL_EXPERIMENTS, REPO_ROOT, make_campaign, write_boots


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_campaign(tmp_path_factory.mktemp("explore"), experiments=ALL_EXPERIMENTS)
    write_boots(root, run_id="20260101T000100Z-b00002", startup_s=40.0, outcome="failed", boot_outcome="oom_load")
    return root


def test_every_run_is_a_row_whatever_its_outcome(data: Path) -> None:
    t = explore.load_campaign("embedded-fixture", data)
    s = t.summary().set_index(["experiment", "outcome"])["runs"].to_dict()
    assert s[("boots", "ok")] == 1 and s[("boots", "failed")] == 1 and s[("context", "failed")] == 1
    assert set(t.runs["experiment"]) == set(ALL_EXPERIMENTS)
    assert {"run_id", "outcome", "boot", "host", "seconds", "notebook"} <= set(t.runs.columns)


def test_tables_carry_their_run_and_boot(data: Path) -> None:
    t = explore.load_campaign("embedded-fixture", data)
    assert list(t.boots["boot_outcome"]) == ["ready", "oom_load"] and list(t.boots["boot_number"]) == [1, 2]
    assert set(t.context["run_id"]) == {"20260101T001000Z-c00001", "20260101T002000Z-c00002"}
    assert set(t.levels["experiment"]) == {"concurrency", "agent_turns"} and len(t.levels) == 12
    assert set(t.verdicts["regime"]) == {"short", "shared_prefix", "private_context", "agent_turns"}
    assert set(t.quality["benchmark"]) == {"gsm8k", "ifeval", "humaneval"}
    assert {"synthetic", "tiny"} == set(t.fit["checkpoint"]) and len(t.generators) == 3
    assert {"experiment", "run_id", "outcome", "boot", "host"} <= set(t.context.columns)
    # The context fixture's events, every request of both runs.
    assert (t.requests["experiment"] == "context").sum() == 2 * 12


def test_compare_sets_runs_side_by_side(data: Path) -> None:
    t = explore.load_campaign("embedded-fixture", data)
    wide = t.compare("context", "tpot_median_ms", "context_tokens")
    assert list(wide.columns) == ["20260101T001000Z-c00001", "20260101T002000Z-c00002"]
    assert list(wide.index) == [128, 512, 2048, 8192]
    assert t.compare("levels", "tok_s_median", ["experiment", "regime", "streams"]).shape == (12, 2)


def test_a_changed_file_is_a_problem_not_an_error(tmp_path: Path) -> None:
    data = make_campaign(tmp_path, experiments=("boots", "context"))
    p = next((data / "embedded-fixture" / "context").glob("*c00001/summary.csv"))
    p.write_text(p.read_text() + "\n")
    t = explore.load_campaign("embedded-fixture", data)
    assert any("sha256 differs" in x for x in t.problems["problem"])
    assert not t.context.empty
    with pytest.raises(FileNotFoundError, match="no campaign"):
        explore.load_campaign("nothing", data)


def _execute_from_notebooks(campaign: str, data_root: Path | str) -> dict:
    """Execute explore.ipynb as ``jupyter nbconvert --execute`` does, in notebooks/ (nbconvert's own preprocessor),
    with the parameters set: the notebook must find the data from there."""
    import nbformat
    from nbconvert.preprocessors import ExecutePreprocessor
    from traitlets.config import Config

    from offload_lab.campaigns import execute

    nb = nbformat.read(str(REPO_ROOT / "notebooks" / "explore.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = f"campaign = {campaign!r}\ndata_root = {str(data_root)!r}"
    ep = ExecutePreprocessor(timeout=300, kernel_name=execute.kernel_name(),
                             config=Config(execute.kernel_manager_config()))
    ep.preprocess(nb, {"metadata": {"path": str(REPO_ROOT / "notebooks")}})
    return nb


def _figures_by_experiment(nb) -> dict[str, int]:
    """Images shown under each experiment's heading by the loop over experiments."""
    cell = next(c for c in nb.cells if "report.show" in c.source)
    out: dict[str, int] = {}
    current = None
    for o in cell.outputs:
        data = o.get("data", {})
        md = data.get("text/markdown", "")
        if md.startswith("## "):
            current = md.split("\n")[0][3:]
            out[current] = 0
        if "image/png" in data and current is not None:
            out[current] += 1
    return out


@pytest.mark.parametrize("full", [True, False], ids=["every experiment", "boots and context only"])
def test_the_notebook_shows_every_experiment_with_a_figure(data: Path, tmp_path: Path, full: bool) -> None:
    root = data if full else make_campaign(tmp_path / "data", experiments=("boots", "context"))
    nb = _execute_from_notebooks("embedded-fixture", root)
    shown = _figures_by_experiment(nb)
    t = explore.load_campaign("embedded-fixture", root)
    assert list(shown) == explore.experiments(t)
    assert all(n >= 1 for n in shown.values()), shown
    text = nbformat_text(nb)
    assert "01-01 00:10 c00001" in text  # run ids shortened
    assert "Traceback" not in text
    if full:
        assert "oom_load" in text
    # Every image has alt text (nbconvert writes it into <img alt>), and the charts JupyterLab draws with hover ride
    # beside their PNGs.
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images and all(o.get("metadata", {}).get("image/png", {}).get("alt") for o in images)
    charts = [o for o in outputs if "application/vnd.vegalite.v5+json" in o.get("data", {})]
    assert charts
    # nbconvert's HTML has no Vega renderer and writes no alt from metadata: each chart's Markdown twin carries both.
    assert all(o["data"]["text/markdown"].startswith("![") and "](data:image/png;base64," in o["data"]["text/markdown"]
               for o in charts)
    # Tables in full, in a box that scrolls and filters, never cut to their first rows.
    assert "data-filter=" in text and "first 25 of" not in text


def nbformat_text(nb) -> str:
    import nbformat

    return nbformat.writes(nb)


def test_the_notebook_runs_for_the_repositorys_campaigns_with_nbconvert() -> None:
    """`jupyter nbconvert --execute` from notebooks/ on the committed data, the embedded campaign as the notebook
    says and the reference one with the parameter changed: every experiment shows a figure."""
    import subprocess

    jupyter = REPO_ROOT / ".venvs" / "lab" / "bin" / "jupyter"
    if not jupyter.exists() or not (REPO_ROOT / "data" / "embedded").is_dir():
        pytest.skip("needs the lab environment (make envs) and the committed data")
    done = subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute", "--stdout", "explore.ipynb"],
                          cwd=REPO_ROOT / "notebooks", capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "without encryption" not in done.stderr
    import nbformat

    for campaign, nb in (("embedded", nbformat.reads(done.stdout, as_version=4)),
                         ("reference", _execute_from_notebooks("reference", "data"))):
        shown = _figures_by_experiment(nb)
        t = explore.load_campaign(campaign, REPO_ROOT / "data")
        # A figure for every experiment with a number that varies; the others say they have nothing to plot.
        drawable = {e for e in explore.experiments(t)
                    if any(not f.empty and f.select_dtypes("number").nunique().gt(1).any()
                           for n, f in explore.experiment_tables(t, e).items() if n != "runs")}
        assert set(shown) == set(explore.experiments(t)) and drawable
        assert {e for e, n in shown.items() if n >= 1} >= drawable, shown


def test_tidy_numbers_and_run_ids() -> None:
    import pandas as pd

    assert explore.short_run("20261129T212331Z-0fb3ab") == "11-29 21:23 0fb3ab"
    assert explore.short_run("boots") == "boots"
    assert [explore._number(x) for x in (0.028231, 4.7123, 0.0100, 1234.5678, 3.0, 2e-5, float("nan"))] == \
        ["0.0282", "4.71", "0.01", "1,235", "3", "2.00e-05", ""]
    wide = pd.DataFrame({"20261129T212331Z-0fb3ab": [0.123456789]}, index=pd.Index([256], name="context_tokens"))
    html = explore.tidy(wide).to_html()
    assert "11-29 21:23 0fb3ab" in html and "0.123" in html and "0.123457" not in html


def test_plots_choose_no_backend(data: Path) -> None:
    import matplotlib
    from matplotlib.figure import Figure

    before = matplotlib.get_backend()
    t = explore.load_campaign("embedded-fixture", data)
    figs = {e: explore.plot(t, e) for e in explore.experiments(t)}
    assert all(isinstance(f, Figure) for f in figs.values()), figs
    assert matplotlib.get_backend() == before
    # No module of the library picks a backend: the notebook's inline one stays in charge.
    offenders = [str(p) for p in (REPO_ROOT / "src").rglob("*.py") if "matplotlib.use(" in p.read_text()]
    assert offenders == []


def test_load_experiments_get_percentiles_per_level_and_distributions(data: Path) -> None:
    # As `vllm bench serve` and GuideLLM report a load run: mean, p50, p95, p99 of TTFT, TPOT, ITL per level, each
    # percentile only where its n supports it (core.stats: p95 from 20 samples, p99 from 100).
    from offload_lab.core import stats

    t = explore.load_campaign("embedded-fixture", data)
    table = explore.experiment_tables(t, "context")[explore.LATENCY_TABLE]
    assert {"TTFT (ms)", "TPOT (ms)"} <= set(table["metric"])
    assert {"n", "mean", "p50", "p95", "p99"} <= set(table.columns) and "p90" not in table.columns
    for q in (95, 99):
        few = table["n"] < stats.MIN_SAMPLES[q]
        assert table.loc[few, f"p{q}"].isna().all() and table.loc[~few, f"p{q}"].notna().all()
    assert table["p50"].notna().all() and table["mean"].notna().all()
    assert len(explore.figures(t, "context")) == 2  # the sweep's picture, then its latency distributions


def test_every_explore_figure_has_a_title_and_a_legend_over_nothing(data: Path) -> None:
    from offload_lab.paper.figures import legend_covers, legend_problems

    t = explore.load_campaign("embedded-fixture", data)
    for experiment in explore.experiments(t):
        for fig in explore.figures(t, experiment):
            titled = fig._suptitle is not None or any(ax.get_title(loc="left") or ax.get_title() for ax in fig.axes)
            assert titled, experiment
            assert legend_covers(fig) + legend_problems(fig) == [], experiment
            assert all(ax.get_xlabel() or ax.get_yticklabels() for ax in fig.axes), experiment
