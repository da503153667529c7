"""Runs enter a paper only as what they are (issue 33): a paper reads its campaign's sessions' runs (the ledger knows
them); a run made by hand, even with the campaign's own parameters, changes nothing unless the user asks for it, and
is then marked "by hand" where printed, counted in Limits and linked to its own notebook."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from offload_lab.campaigns import ledger
from offload_lab.core import runs
from offload_lab.paper import build as paper
from offload_lab.paper import selection
from offload_lab.paper.claims import resolve_claims
from paper_fixtures import REPO_ROOT, make_campaign, write_boots, write_context

CAMPAIGN = "embedded-fixture"
HAND_ID = "20260102T000000Z-h00001"  # newer than every fixture run: the newest ok run, were it read
SERVER = "http://127.0.0.1:8123"


def _in_session(data: Path, session: str) -> None:
    """Mark every run of the campaign as made by the session (the runner writes ``session`` into each manifest)."""
    for m in (data / CAMPAIGN).glob("*/*/manifest.json"):
        manifest = json.loads(m.read_text())
        manifest["session"] = session
        runs.write_manifest(m.parent, manifest)


def _campaign_with_a_session(data: Path) -> str:
    make_campaign(data, experiments=("boots", "context"))
    session = ledger.start_session(data, CAMPAIGN, env={}, price=None)
    _in_session(data, session.id)
    session.end("ok")
    return session.id


def _hand_run(data: Path, notebook: bool = True) -> Path:
    """A papermill run of the context notebook against a server started by hand: the campaign's own parameters,
    other numbers (every time doubled), its executed notebook kept in the run directory."""
    path = write_context(data, CAMPAIGN, run_id=HAND_ID)
    manifest = runs.load_manifest(path)
    manifest.update(hand_run=True, server={"url": SERVER, "model": "tiny", "by": "hand run"},
                    notebook={"path": "notebooks/context.ipynb", "how": "by hand (papermill, nbconvert or Jupyter)"})
    # Other numbers (every time doubled), so that reading it would show.
    text = (path / "events.jsonl").read_text()
    (path / "events.jsonl").write_text(re.sub(r'"(tpot_ms|ttft_s)": ([0-9.]+)',
                                              lambda m: f'"{m[1]}": {float(m[2]) * 2}', text))
    summary = pd.read_csv(path / "summary.csv")
    for col in summary.columns:
        if "ms" in col or col.endswith("_s"):
            summary[col] = summary[col] * 2
    summary.to_csv(path / "summary.csv", index=False)
    if notebook:
        (path / "notebook.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                                          "nbformat_minor": 5}))
    manifest["files"] = {k: {**v, "sha256": runs.sha256_file(path / k), "bytes": (path / k).stat().st_size}
                         for k, v in (manifest.get("files") or {}).items()}
    runs.write_manifest(path, manifest)
    return path


def _values(claims) -> dict[str, str | None]:
    return {name: c.text for name, c in claims.claims.items()}


def test_a_hand_run_with_the_campaigns_parameters_does_not_change_the_paper(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(selection.HAND_RUNS_ENV, raising=False)
    data = tmp_path / "data"
    _campaign_with_a_session(data)
    before = resolve_claims(CAMPAIGN, data, REPO_ROOT)
    hand = _hand_run(data)
    after = resolve_claims(CAMPAIGN, data, REPO_ROOT)
    assert _values(after) == _values(before)
    assert after.runs["context"].run_id != hand.name and not after.hand_runs
    (passed,) = [s for s in after.skipped if s["run_id"] == hand.name]
    assert passed["by"] == "hand" and "--hand-run" in passed["reason"]


def test_a_run_naming_no_session_of_the_ledger_is_a_hand_run(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(selection.HAND_RUNS_ENV, raising=False)
    data = tmp_path / "data"
    _campaign_with_a_session(data)
    stray = write_context(data, CAMPAIGN, run_id=HAND_ID)  # no hand_run mark, no session: not the campaign's
    got = selection.select(data, CAMPAIGN, {"context"}, REPO_ROOT)
    assert got.chosen["context"] != stray
    # A campaign that keeps no ledger reads its runs as before, hand runs aside.
    bare = tmp_path / "bare"
    make_campaign(bare, experiments=("context",))
    newest = write_context(bare, CAMPAIGN, run_id=HAND_ID)
    assert selection.select(bare, CAMPAIGN, {"context"}, REPO_ROOT).chosen["context"] == newest


def test_a_hand_boot_is_not_counted_among_the_campaigns_server_starts(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(selection.HAND_RUNS_ENV, raising=False)
    data = tmp_path / "data"
    _campaign_with_a_session(data)
    write_boots(data, CAMPAIGN, run_id=HAND_ID)  # `offload-lab serve` by hand: no session
    claims = resolve_claims(CAMPAIGN, data, REPO_ROOT)
    assert claims["boots.count"].value == 1
    monkeypatch.setenv(selection.HAND_RUNS_ENV, "all")
    assert resolve_claims(CAMPAIGN, data, REPO_ROOT)["boots.count"].value == 2


def test_a_hand_run_asked_for_is_read_and_named_with_its_server_and_notebook(tmp_path, monkeypatch) -> None:
    data = tmp_path / "data"
    _campaign_with_a_session(data)
    hand = _hand_run(data)
    monkeypatch.delenv(selection.HAND_RUNS_ENV, raising=False)
    unasked = resolve_claims(CAMPAIGN, data, REPO_ROOT)
    monkeypatch.setenv(selection.HAND_RUNS_ENV, hand.name)
    claims = resolve_claims(CAMPAIGN, data, REPO_ROOT)
    assert _values(claims) != _values(unasked)  # its numbers differ: had it been read unasked, the paper would show
    assert claims.runs["context"].run_id == hand.name and claims.runs["context"].by_hand
    facts = claims.hand_runs["context"]
    assert facts["server"] == SERVER and facts["notebook_output"].endswith(f"{hand.name}/notebook.ipynb")
    context_claims = [c for c in claims.claims.values() if c.experiment == "context" and c.status == "ok"]
    assert context_claims and all(c.by_hand for c in context_claims)
    assert not any(c.by_hand for c in claims.claims.values() if c.experiment == "boots")


def test_a_campaign_file_can_list_its_hand_runs(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(selection.HAND_RUNS_ENV, raising=False)
    data, repo = tmp_path / "data", tmp_path / "repo"
    _campaign_with_a_session(data)
    hand = _hand_run(data)
    (repo / selection.CAMPAIGNS_DIR).mkdir(parents=True)
    (repo / selection.CAMPAIGNS_DIR / "fixture.yaml").write_text(json.dumps({"name": CAMPAIGN, "hand_runs": [hand.name]}))
    got = selection.select(data, CAMPAIGN, {"context"}, repo)
    assert got.chosen["context"] == hand and got.hand["context"]["server"] == SERVER


def test_the_campaign_file_model_accepts_hand_runs() -> None:
    from offload_lab.campaigns.runner import CampaignFile

    spec = CampaignFile.model_validate({"name": "x", "hand_runs": ["20260102T000000Z-h00001"], "experiments": [
        {"experiment": "context", "notebook": "notebooks/context.ipynb"}]})
    assert spec.hand_runs == ["20260102T000000Z-h00001"]


def test_the_page_says_by_hand_beside_each_figure_and_in_limits(tmp_path, monkeypatch) -> None:
    data = tmp_path / "data"
    _campaign_with_a_session(data)
    hand = _hand_run(data)
    monkeypatch.setenv(selection.HAND_RUNS_ENV, hand.name)
    built = paper.build_paper(CAMPAIGN, data, tmp_path / "out", REPO_ROOT, use_quarto=False, formats=("html",))
    html = built.html.read_text()
    claims = json.loads(built.claims_json.read_text())
    assert claims["hand_runs"]["context"]["server"] == SERVER
    context = [n for n, c in claims["claims"].items() if c["experiment"] == "context" and c["status"] == "ok"
               and c["kind"] == "inline"]
    printed = [n for n in context if f'data-claim="{n}"' in html]
    assert printed
    for name in printed:  # each figure the hand run feeds: the mark follows its link (and notebook mark)
        after = html.split(f'data-claim="{name}"', 1)[1][:1200]
        assert 'class="claim-hand"' in after, name
        assert "notebooks/context.ipynb" not in after.split('class="claim-hand"')[0]  # never the blank template
    assert "runs made by hand" in html and "context experiment" in html


_LUA = r"""
local ext, claims, fmt = arg[1], arg[2], arg[3]
quarto = {
  utils = { resolve_path = function(p) return ext .. "/" .. p end },
  doc = { is_format = function(f) return f == fmt end, input_file = "/nonexistent/paper.qmd" },
  log = { warning = function(m) end },
}
local sc = dofile(ext .. "/claim.lua")
local meta = { ["offload-lab"] = { claims = pandoc.MetaString(claims) } }
local r = sc.claim({ "x.hand" }, {}, meta)
local out = {}
if r.t then table.insert(out, r) else for _, x in ipairs(r) do table.insert(out, x) end end
io.write(pandoc.write(pandoc.Pandoc({ pandoc.Plain(out) }), fmt))
"""


@pytest.mark.parametrize("fmt", ["html", "typst"])
def test_the_quarto_shortcode_marks_a_hand_runs_figure_and_never_links_the_template(tmp_path, fmt) -> None:
    import subprocess

    import pypandoc

    claims = {"claims": {"x.hand": {
        "status": "ok", "kind": "inline", "text": "22.3", "by_hand": True, "notebook": "notebooks/context.ipynb",
        "notebook_output": None, "files": [{"path": "data/c/context/r/summary.csv", "sha256": "ab" * 32}]}}}
    (tmp_path / "claims.json").write_text(json.dumps(claims))
    (tmp_path / "h.lua").write_text(_LUA)
    out = subprocess.run([pypandoc.get_pandoc_path(), "lua", str(tmp_path / "h.lua"),
                          str(REPO_ROOT / "_extensions" / "claim"), str(tmp_path / "claims.json"), fmt],
                         capture_output=True, text=True, check=True).stdout
    assert "22.3" in out and "(by hand)" in out
    assert "notebooks/context.ipynb" not in out  # the blank template did not write this figure
