"""One rule for every command (issue 14): bad input exits 2 naming the input; an unforeseen error exits 70 with one
line naming a log that holds the traceback; shared readers, flag types and the no-overwrite rule; stack files that
say impossible things are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from offload_lab.cli import common
from offload_lab.cli import main as cli
from offload_lab.core import inputs
from offload_lab.core.errors import INTERNAL, InputError

from pod_helpers import fake_stack


def test_an_unforeseen_error_is_one_line_and_a_log_never_a_traceback(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(common.LOG_DIR_ENV, str(tmp_path / "logs"))

    def boom(*args: object) -> int:  # a handler of the command table: (params, args)
        raise ZeroDivisionError("http://user:hunter2@host/ went wrong")

    monkeypatch.setattr(cli, "cmd_env", boom)
    assert cli.main(["env"]) == INTERNAL == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "hunter2" not in err
    assert err.startswith("offload-lab: internal error: ZeroDivisionError: http://***@host/ went wrong")
    (log,) = (tmp_path / "logs").iterdir()
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "boom" in text and "hunter2" not in text
    assert str(log) in err


def test_a_bad_flag_is_refused_by_argparse_naming_it(capsys):
    cases = [(["serve", "--stack", "s.yaml", "--port", "99999"], "argument --port: 99999 is not a port"),
             (["campaign", "run", "c.yaml", "--port", "-1"], "argument --port"),
             (["campaign", "run", "c.yaml", "--url", "ftp://x"], "argument --url"),
             (["quality", "run", "--endpoint", "http://h:1", "--limit", "-3"], "argument --limit: -3 is out of range"),
             (["quality", "run", "--endpoint", "http://h:1", "--concurrency", "0"], "argument --concurrency"),
             (["quality", "run", "--endpoint", "http://h:1", "--timeout", "nan"], "argument --timeout: 'nan'"),
             (["quality", "run", "--endpoint", "not a url"], "argument --endpoint"),
             (["quality", "paired", "--n", "0", "--b", "0", "--c", "0"], "argument --n"),
             (["quality", "paired", "--n", "10", "--b", "1", "--c", "2", "--resamples", "0"], "argument --resamples"),
             (["profile", "p.yaml", "--stream-tok-s", "inf"], "argument --stream-tok-s"),
             (["capacity", "--q", "0.1", "--streams-per-pod", "4", "--alpha", "0.01", "--team", "1000000000000",
               "--pod-eur-per-hour", "1", "--seat-eur-per-month", "1"], "argument --team"),
             (["capacity", "--q", "0.1", "--streams-per-pod", "4", "--alpha", "0.01", "--team", "5",
               "--pod-eur-per-hour", "inf", "--seat-eur-per-month", "1"], "argument --pod-eur-per-hour")]
    for argv, words in cases:
        assert cli.main(argv) == 2, argv
        assert words in capsys.readouterr().err, argv


def test_cross_flag_checks_of_quality_paired_name_the_flags(capsys):
    assert cli.main(["quality", "paired", "--n", "3", "--b", "5", "--c", "5"]) == 2
    assert "--b 5 + --c 5 is more than --n 3" in capsys.readouterr().err
    assert cli.main(["quality", "paired", "--n", "10", "--b", "1", "--c", "2", "--a", "20"]) == 2
    assert "--a 20" in capsys.readouterr().err


def test_quality_run_checks_its_inputs_before_any_server(tmp_path, capsys):
    base = ["quality", "run", "--endpoint", "http://127.0.0.1:9", "--data-dir", str(tmp_path)]
    assert cli.main([*base, "--datasets", str(tmp_path / "nope")]) == 2
    assert "--datasets" in capsys.readouterr().err
    assert cli.main([*base, "--label", "../evil"]) == 2
    assert "'../evil'" in capsys.readouterr().err
    assert cli.main([*base, "--max-tokens", "²"]) == 2
    assert "--max-tokens" in capsys.readouterr().err


def test_readers_name_the_file_and_what_is_wrong(tmp_path):
    cases = {
        "nonutf8.yaml": (b"name: caf\xe9\n", "byte 0xe9 at offset 9, line 1"),
        "bad.json": (b'{"a": ', "not valid JSON"),
        "deep.json": (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
        "list.yaml": (b"- a\n- b\n", "expected a mapping of fields, got a list"),
        "empty.yaml": (b"", "got empty"),
        "bomb.yaml": (b'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n' + b"".join(
            b"%c: &%c [*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c]\n" % ((c, c) + (c - 1,) * 10)
            for c in range(ord("b"), ord("j"))), "YAML bomb"),
    }
    for name, (data, words) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        reader = inputs.read_json if name.endswith(".json") else inputs.read_yaml
        with pytest.raises(InputError, match="thing " + str(p).replace(".", r"\.")) as e:
            reader(p, "thing")
        assert words in str(e.value), name
    with pytest.raises(InputError, match="is a directory"):
        inputs.read_text(tmp_path, "thing")
    with pytest.raises(InputError, match="does not exist"):
        inputs.read_text(tmp_path / "missing", "thing")
    (tmp_path / "big").write_bytes(b"x" * 2048)
    with pytest.raises(InputError, match="2,048 bytes is more than the 1,024"):
        inputs.read_text(tmp_path / "big", "thing", max_bytes=1024)


def test_repeated_problems_are_counted_not_printed():
    lines = inputs.summarize(["layer 0 lists expert 1 twice"] * 1_000_000 + [f"t{i} missing" for i in range(50)])
    assert lines[0] == "layer 0 lists expert 1 twice (1,000,000 times)"
    assert len(lines) == inputs.MAX_PROBLEMS + 1 and lines[-1].startswith("... and 31 more problem(s)")


def test_nothing_is_overwritten_without_force(tmp_path):
    f = tmp_path / "keep.json"
    f.write_text("{}")
    with pytest.raises(InputError, match="keep.json exists; pass --force"):
        inputs.check_out(f, force=False)
    assert inputs.check_out(f, force=True) == f
    with pytest.raises(InputError, match="is a directory"):
        inputs.check_out(tmp_path, force=True)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("x")
    with pytest.raises(InputError, match="not empty; pass --force"):
        inputs.check_out(tmp_path / "d", force=False, kind="dir")
    assert f.read_text() == "{}"


@pytest.mark.parametrize("change,words", [
    ({"server.ready_timeout_s": -5}, "ready_timeout_s"),
    ({"server.ready_timeout_s": float("nan")}, "ready_timeout_s"),
    ({"server.stop_timeout_s": 0}, "stop_timeout_s"),
    ({"server.cpus": [9999]}, "9999"),
    ({"server.cpus": [-1]}, "cpus"),
    ({"server.cpus": []}, "cpus"),
    ({"server.cpus": [True]}, "cpus"),
    ({"server.cpus": [0, 0]}, "listed twice"),
    ({"extends": 42}, "extends 42"),
    ({"extends": ["a", "b"]}, "extends ['a', 'b']"),
    ({"colour": "blue"}, "colour"),
    ({"server.colour": "blue"}, "server.colour"),
    ({"name": "../evil"}, "name"),
])
def test_stack_files_that_say_impossible_things_are_refused(tmp_path, change, words, capsys):
    f = fake_stack(tmp_path)
    spec = yaml.safe_load(f.read_text())
    for key, value in change.items():
        *parents, last = key.split(".")
        node = spec
        for p in parents:
            node = node[p]
        node[last] = value
    f.write_text(yaml.safe_dump(spec))
    assert cli.main(["stack", "check", str(f)]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and words in err


def test_stack_check_of_the_embedded_stack_still_passes(capsys):
    root = Path(__file__).resolve().parents[1]
    assert cli.main(["stack", "check", str(root / "configs/stacks/embedded.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["env_from"] == []


def test_the_cli_as_a_program_never_prints_a_traceback(tmp_path):
    (tmp_path / "s.yaml").write_bytes(b"name: caf\xe9\n")
    p = subprocess.run([sys.executable, "-m", "offload_lab.cli.main", "stack", "check", str(tmp_path / "s.yaml")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "not UTF-8" in p.stderr


def test_model_tiny_never_replaces_another_model_without_force(tmp_path, capsys):
    out = tmp_path / "m"
    assert cli.main(["model", "tiny", "--out", str(out)]) == 0
    assert cli.main(["model", "tiny", "--out", str(out)]) == 0  # the same model again: harmless
    before = (out / "model.safetensors").read_bytes()
    assert cli.main(["model", "tiny", "--out", str(out), "--seed", "5"]) == 2
    assert "pass --force" in capsys.readouterr().err and (out / "model.safetensors").read_bytes() == before
    assert cli.main(["model", "tiny", "--out", str(out), "--seed", "5", "--force"]) == 0
    assert (out / "model.safetensors").read_bytes() != before
