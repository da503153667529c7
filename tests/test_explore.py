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
    t = explore.load_campaign("embedded", data)
    s = t.summary().set_index(["experiment", "outcome"])["runs"].to_dict()
    assert s[("boots", "ok")] == 1 and s[("boots", "failed")] == 1 and s[("context", "failed")] == 1
    assert set(t.runs["experiment"]) == set(ALL_EXPERIMENTS)
    assert {"run_id", "outcome", "boot", "host", "seconds", "notebook"} <= set(t.runs.columns)


def test_tables_carry_their_run_and_boot(data: Path) -> None:
    t = explore.load_campaign("embedded", data)
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
    t = explore.load_campaign("embedded", data)
    wide = t.compare("context", "tpot_median_ms", "context_tokens")
    assert list(wide.columns) == ["20260101T001000Z-c00001", "20260101T002000Z-c00002"]
    assert list(wide.index) == [128, 512, 2048, 8192]
    assert t.compare("levels", "tok_s_median", ["experiment", "regime", "streams"]).shape == (12, 2)


def test_a_changed_file_is_a_problem_not_an_error(tmp_path: Path) -> None:
    data = make_campaign(tmp_path, experiments=("boots", "context"))
    p = next((data / "embedded" / "context").glob("*c00001/summary.csv"))
    p.write_text(p.read_text() + "\n")
    t = explore.load_campaign("embedded", data)
    assert any("sha256 differs" in x for x in t.problems["problem"])
    assert not t.context.empty
    with pytest.raises(FileNotFoundError, match="no campaign"):
        explore.load_campaign("nothing", data)


@pytest.mark.parametrize("full", [True, False], ids=["every experiment", "boots and context only"])
def test_the_notebook_runs_on_a_campaign(data: Path, tmp_path: Path, full: bool) -> None:
    import papermill

    root = data if full else make_campaign(tmp_path / "data", experiments=("boots", "context"))
    out = tmp_path / "explore.ipynb"
    papermill.execute_notebook(str(REPO_ROOT / "notebooks" / "explore.ipynb"), str(out),
                               parameters={"campaign": "embedded", "data_root": str(root)}, kernel_name="python3",
                               progress_bar=False, log_output=False)
    text = out.read_text()
    assert "20260101T001000Z-c00001" in text
    if full:
        assert "oom_load" in text and "image/png" in text
