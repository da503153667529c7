"""The "will it fit" commands as library calls (fit/requests.py, fit/commands.py), without the command line; and
their command line: flags from the requests' fields, each named in docs/fit-commands.md, old spellings kept."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from fit_helpers import tiny_model  # noqa: F401
from pydantic import ValidationError

from offload_lab.cli import main as cli
from offload_lab.core.errors import InputError
from offload_lab.fit import commands
from offload_lab.fit import requests as rq

FIT = ("audit", "plan make", "plan check", "plan show", "plan export", "plan import", "memory-math",
       "checkpoint synth", "routing collect")


def _leaf(words: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    for w in words.split():
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[w]
    return parser


def test_audit_and_plan_make_as_library_calls(tiny_model, tmp_path):  # noqa: F811
    r = commands.audit(rq.Audit(source=str(tiny_model), tp=1, usable_gib=1, reserve_gib=0, context=0))
    assert r["fits"] is True and r["budget"]["activation_reserve_source"] == "--reserve-gib"
    assert commands.audit(rq.Audit(source=str(tiny_model), usable_gib=1))["budget"][
        "activation_reserve_source"].startswith("the default")
    out, routed = commands.plan_make(rq.PlanMake(source=str(tiny_model), generator="uniform", fraction=0.25,
                                                 out=str(tmp_path / "p.json"), no_host_limit=True))
    assert routed == 128 and out["host_experts"] == 32 and Path(out["plan"]).is_file()
    checked = commands.plan_check(rq.PlanCheck(plan_file=out["plan"], source=str(tiny_model)))
    assert checked.ok and checked.out == {"plan": out["plan"], "ok": True, "problems": []}
    with pytest.raises(InputError, match="--counts needs --checkpoint"):
        commands.plan_show(rq.PlanShow(plan_file=out["plan"], counts="c.json"))


def test_the_requests_refuse_out_of_range_values():
    for bad in ({"fraction": 1.5}, {"tp": 0}, {"max_layer_fraction": 0}, {"generator": "best"}, {"concurrency": 0}):
        with pytest.raises(ValidationError):
            rq.PlanMake(source="s", out="o", **({"generator": "uniform"} | bad))


@pytest.mark.parametrize("words", FIT)
def test_every_flag_is_named_in_the_docs_and_help_fits_a_screen(words, monkeypatch):
    from offload_lab.cli.model_options import _Store

    monkeypatch.setenv("COLUMNS", "100")
    docs = (Path(__file__).resolve().parents[1] / "docs" / "fit-commands.md").read_text(encoding="utf-8")
    parser = _leaf(words)
    flags = [a.option_strings[0] for a in parser._actions
             if a.option_strings and not getattr(a, "replaced_by", None) and isinstance(a, _Store)]
    assert flags and [f for f in flags if not re.search(rf"(?<![\w-]){f}(?![\w-])", docs)] == []
    assert len(parser.format_help().splitlines()) <= 40


def test_repeated_list_flags_add_up_and_the_old_plan_flag_still_parses(capsys):
    args = cli.build_parser().parse_args(["plan", "make", "S", "--generator", "uniform", "--out", "o",
                                          "--host-category", "embedding", "--host-category", "engram,lm_head"])
    assert args.host_category == ["embedding", "engram", "lm_head"]
    args = cli.build_parser().parse_args(["audit", "S", "--tp", "1", "--usable-gib", "1", "--plan", "p.json"])
    assert args.with_plan == "p.json" and "--plan is deprecated, use --with-plan" in capsys.readouterr().err


def test_audit_text_of_a_checkpoint_whose_active_share_is_not_counted(tiny_model, tmp_path):  # noqa: F811
    # The active share needs the config's experts per token; without it the text said {None / 1e9} (TypeError,
    # exit 70). The JSON always had the note.
    import json
    import shutil

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_model, ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config.pop("num_experts_per_tok", None)
    (ckpt / "config.json").write_text(json.dumps(config))
    r = commands.audit(rq.Audit(source=str(ckpt), tp=1, usable_gib=1, reserve_gib=0, context=0))
    assert r["params"]["active"] is None
    text = "\n".join(commands.audit_lines(r))
    assert "B total; config.json lacks num_experts_per_tok" in text
