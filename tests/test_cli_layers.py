"""What the command line's handlers call, tested without the command line (issue 36: handlers parse flags from the
models, call one library function, print), and the command table's own behaviour: positionals, repeated flags,
required flags, an old positional kept as a hidden alias."""

from __future__ import annotations

import argparse
import json

import pytest

from offload_lab.campaigns.commands import CampaignRunParams
from offload_lab.cli.model_options import Command, Option, add_commands
from offload_lab.core import runs
from offload_lab.core.commands import RunsListParams, list_runs, verify_runs
from offload_lab.core.errors import InputError
from offload_lab.pods import commands as pods
from offload_lab.quality import commands as quality


def test_runs_are_listed_and_verified_by_the_core(tmp_path):
    r = runs.new_run(tmp_path, "c", "exp", {"x": 1})
    (r.path / "data.txt").write_text("1\n")
    r.finish("ok")
    (row,) = list_runs(RunsListParams(campaign="c", data_dir=str(tmp_path)))
    assert row["experiment"] == "exp" and row["outcome"] == "ok" and row["problem"] is None
    assert verify_runs([str(r.path)])[0]["problems"] == []
    (r.path / "data.txt").write_text("2\n")
    assert verify_runs([str(r.path)])[0]["problems"]
    assert verify_runs([str(tmp_path / "nope")])[0]["status"] == runs.CORRUPT


def test_the_quality_layer_checks_counts_and_parses_its_flags():
    with pytest.raises(InputError, match=r"--b 5 \+ --c 5 is more than --n 3"):
        quality.paired_counts(quality.PairedCountsParams(n=3, b=5, c=5))
    assert quality.paired_counts(quality.PairedCountsParams(n=100, b=3, c=9, resamples=200))["b"] == 3
    assert quality.parse_max_tokens("gsm8k=12") == {"gsm8k": 12}
    with pytest.raises(InputError, match="--max-tokens"):
        quality.parse_max_tokens("²")
    assert quality.benchmark_names("all") == quality.benchmark_names("gsm8k,ifeval,humaneval")


def test_an_only_that_names_nothing_is_refused():
    assert CampaignRunParams(file="c.yaml", only="a, b").experiments() == ["a", "b"]
    assert CampaignRunParams(file="c.yaml").experiments() is None
    with pytest.raises(InputError, match="names no experiment"):
        CampaignRunParams(file="c.yaml", only=" , ").experiments()


def test_a_pod_target_is_a_plan_folder_or_a_cluster_of_one(tmp_path):
    plan = tmp_path / "plans" / "p1"
    plan.mkdir(parents=True)
    (plan / pods.PLAN_FILE).write_text(json.dumps({"plan": {"parts": [{"cluster": "ol-x-0"}]}}))
    assert pods.find_plan(str(plan), tmp_path / "plans") == (plan, None)
    assert pods.find_plan("ol-x-0", tmp_path / "plans") == (plan, "ol-x-0")
    with pytest.raises(InputError, match="neither a plan folder"):
        pods.find_plan("ol-y-0", tmp_path / "plans")
    (plan / pods.PLAN_FILE).write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        pods.read_plan(plan)


def test_the_command_table(capsys):
    from pydantic import BaseModel, Field

    class M(BaseModel):
        campaign: str = Field(description="campaign name")
        dirs: list[str] = Field(description="folders")
        tag: list[str] | None = Field(None, description="tags")

    seen = []
    p = argparse.ArgumentParser(prog="t")
    add_commands(p.add_subparsers(dest="command"), [
        Command("go", "do it", lambda m, args: seen.append((m, args.json)) or 0, M,
                options={"dirs": Option(positional=True, metavar="dirs"), "tag": Option(repeat=True)},
                old_positional="campaign")])
    args = p.parse_args(["go", "a", "b", "--campaign", "c", "--tag", "x,y", "--tag", "z", "--json"])
    assert args.func(args) == 0 and seen[-1] == (M(campaign="c", dirs=["a", "b"], tag=["x", "y", "z"]), True)
    args = p.parse_args(["go", "a"])
    with pytest.raises(InputError, match="go: --campaign is required"):
        args.func(args)
    assert "usage: t go [options] dirs" in p._subparsers._group_actions[0].choices["go"].format_help()
