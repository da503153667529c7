"""The load generator's commands (issue 36): their flags come from the models (a field typed once, its help its
description), each handler is one call into bench.commands, and each --help fits one screen."""

from __future__ import annotations

import argparse

import pytest

from offload_lab.bench import commands as bc
from offload_lab.cli import main as cli
from offload_lab.core.errors import InputError

SCREEN = 40  # lines, at 100 columns
MINE = [["bench"], ["clock-check"], ["compare"], ["compare-vllm"], ["scrape-cost"], ["bench-data"], ["report"],
        ["notebooks"], ["notebooks", "sync"], ["campaign", "rehearse"]]


def _leaf(parser: argparse.ArgumentParser, path: list[str]) -> argparse.ArgumentParser:
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


@pytest.mark.parametrize("path", MINE, ids=" ".join)
def test_help_fits_one_screen_and_names_its_docs(path: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    text = _leaf(cli.build_parser(), path).format_help()
    assert len(text.rstrip("\n").splitlines()) <= SCREEN, text
    assert max(len(line) for line in text.splitlines()) <= 100
    if path[0] in ("bench", "clock-check", "compare", "scrape-cost", "bench-data"):
        assert "docs/load-generator.md" in text


def test_bench_flags_are_the_models_fields() -> None:
    from offload_lab.load.closed_loop import StopRule
    from offload_lab.load.open_loop import OpenLoopParams
    from offload_lab.load.workloads import WorkloadSpec

    p = _leaf(cli.build_parser(), ["bench"])
    helps = {s: a.help for a in p._actions for s in a.option_strings}
    for model, field, flag in [(WorkloadSpec, "prefix_tokens", "--prefix-tokens"),
                               (WorkloadSpec, "think_time_s", "--think-time"), (StopRule, "scope", "--stop-scope"),
                               (OpenLoopParams, "burstiness", "--burstiness"), (bc.Server, "read_timeout_s",
                                                                                "--first-byte-timeout")]:
        assert helps[flag].startswith(model.model_fields[field].description), flag


def test_bench_builds_its_models_from_the_flags() -> None:
    args = cli.build_parser().parse_args(["bench", "--url", "http://h:1", "--regime", "agent_turns", "--think-time",
                                          "0.5", "--stop-scope", "window", "--stop-window", "9", "--parse-inline",
                                          "--bar", "20", "--first-byte-timeout", "7"])
    workload = args.workload_options.build(args, "bench")
    rule = args.stop_options.build(args, "bench")
    sweep = args.sweep_options.build(args, "bench", workload=workload, stop_rule=rule, streams=bc.BENCH_STREAMS)
    assert (workload.think_time_s, rule.scope, rule.window) == (0.5, "window", 9)
    assert sweep.defer_parse is False and sweep.bar_tok_s == 20 and sweep.streams == [1, 2, 4]
    assert args.rates_rps is None  # closed loop
    endpoint = args.server.build(args, "bench").endpoint()
    assert endpoint.read_timeout_s == 7 and endpoint.base_url == "http://h:1"


@pytest.mark.parametrize("words", [["compare", "--url", "http://h:1"], ["compare-vllm", "--url", "http://h:1"],
                                   ["bench-data"], ["clock-check"], ["scrape-cost", "--url", "http://h:1", "--pid", "1"]])
def test_every_model_of_a_command_builds_from_its_defaults(words: list[str]) -> None:
    # compare once kept its stack model under args.stack, the --stack flag's own destination: with no --stack given
    # the model read itself as the stack file (a journey caught it).
    args = cli.build_parser().parse_args(words)
    for value in vars(args).values():
        if hasattr(value, "build") and hasattr(value, "flags"):
            value.build(args, words[0])


def test_a_stop_rule_the_model_refuses_names_the_flags_as_typed() -> None:
    args = cli.build_parser().parse_args(["bench", "--url", "http://h:1", "--regime", "short", "--stop-window", "3"])
    with pytest.raises(InputError, match="bench"):
        args.stop_options.build(args, "bench")


def test_clock_check_no_pin_turns_pinning_off() -> None:
    args = cli.build_parser().parse_args(["clock-check", "--no-pin", "--streams", "1,2", "--clients", "w1,w2-inline"])
    p = args.params.build(args, "clock-check")
    assert p.pin is False and p.streams == [1, 2] and p.clients == ["w1", "w2-inline"]
    args = cli.build_parser().parse_args(["clock-check"])
    assert args.params.build(args, "clock-check").pin is True


@pytest.mark.parametrize("text", ["1,two", "0", "1,100000", ""])
def test_stream_lists_are_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(InputError, match=f"--streams {text!r}"):
        bc.int_list(text, "--streams")


def test_the_data_root_is_checked_before_the_server_is_asked(tmp_path) -> None:
    (tmp_path / "afile").write_text("")
    place = bc.RunPlace(data_dir=str(tmp_path / "afile"))
    with pytest.raises(InputError, match="--data-dir"):
        bc.bench(place, bc.Server(url="http://127.0.0.1:9"), None, progress=None)
