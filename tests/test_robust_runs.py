"""Run records under damage (issue 14): one corrupt manifest is one bad row, never the end of the listing; a campaign
that does not exist is an error; `runs verify` reports the outcome, an unfinished run is not taken for files added
after the end, and a run whose process is gone is abandoned; the manifest's git state describes the code, not the
data the run writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from offload_lab.cli import main as cli
from offload_lab.core import runs
from offload_lab.core.errors import InputError

DAMAGE = {
    "truncated": lambda m: m.write_bytes(m.read_bytes()[: len(m.read_bytes()) // 2]),
    "nonutf8": lambda m: m.write_bytes(b"\xff" + m.read_bytes()),
    "array": lambda m: m.write_text("[1, 2]"),
    "empty": lambda m: m.write_text(""),
    "files_str": lambda m: m.write_text(json.dumps({**json.loads(m.read_text()), "files": "everything"})),
    "files_nosha": lambda m: m.write_text(json.dumps({**json.loads(m.read_text()), "files": {"a.txt": {}}})),
    "deleted": lambda m: m.unlink(),
}


def _two_runs(data: Path, experiment: str = "e") -> tuple[Path, Path]:
    out = []
    for i in range(2):
        run = runs.new_run(data, "c", experiment, run_id=f"r{i}")
        run.write_text("a.txt", str(i))
        run.finish("ok")
        out.append(run.path)
    return out[0], out[1]


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_corrupt_manifest_is_one_row_of_runs_list_and_boots_list(tmp_path, kind, capsys):
    for experiment in ("e", "boots"):
        bad, good = _two_runs(tmp_path, experiment)
        DAMAGE[kind](bad / runs.MANIFEST)
    assert cli.main(["runs", "list", "--campaign", "c", "--data-dir", str(tmp_path), "--json"]) == 2
    rows = json.loads(capsys.readouterr().out)
    assert [r["outcome"] for r in rows] == ["corrupt", "ok", "corrupt", "ok"]
    assert "manifest" in rows[0]["problem"] and rows[1]["problem"] is None
    assert cli.main(["boots", "list", "--campaign", "c", "--data-dir", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "r0  -: corrupt" in out and "r1  -: ok" in out
    assert cli.main(["runs", "verify", str(bad), str(good)]) == 2
    captured = capsys.readouterr()
    assert f"corrupt   {bad}" in captured.err and f"ok        {good}: every file matches" in captured.out


def test_listing_a_campaign_or_experiment_that_does_not_exist_is_an_input_error(tmp_path, capsys):
    _two_runs(tmp_path)
    for argv, words in [(["--campaign", "nope"], "no campaign 'nope'"), (["--campaign", "../.."], "'../..'"),
                        (["--campaign", "c", "--experiment", "x"], "no experiment 'x'")]:
        assert cli.main(["runs", "list", *argv, "--data-dir", str(tmp_path)]) == 2
        assert words in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert cli.main(["runs", "list", "--campaign", "c", "--data-dir", str(tmp_path / "afile")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    assert cli.main(["boots", "list", "--campaign", "nope", "--data-dir", str(tmp_path)]) == 2


def test_verify_reports_the_outcome_and_an_unfinished_run_is_not_files_added_after(tmp_path, capsys):
    stopped = runs.new_run(tmp_path, "c", "e", run_id="stopped")
    stopped.write_text("a.txt", "x")
    stopped.finish("stopped", error="SIGTERM received")
    running = runs.new_run(tmp_path, "c", "e", run_id="running")
    running.write_text("partial.txt", "x")
    assert cli.main(["runs", "verify", str(stopped.path)]) == 0
    assert f"stopped   {stopped.path} (SIGTERM received): every file matches" in capsys.readouterr().out
    problems = runs.verify_run(running.path)
    assert len(problems) == 1 and "still running" in problems[0] and "added after" not in problems[0]
    assert cli.main(["runs", "verify", str(running.path)]) == 1


def test_a_run_whose_process_is_gone_is_abandoned(tmp_path, capsys):
    code = ("import sys; from offload_lab.core import runs; "
            "r = runs.new_run(sys.argv[1], 'c', 'e', run_id='orphan'); r.write_text('a.txt', 'x')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)  # exits without finishing its run
    orphan = tmp_path / "c" / "e" / "orphan"
    m = runs.load_manifest(orphan)
    assert m["outcome"] == "running" and runs.run_status(m) == runs.ABANDONED
    assert cli.main(["runs", "list", "--campaign", "c", "--data-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["outcome"] == "abandoned"
    assert "abandoned" in runs.verify_run(orphan)[0]
    # This process is alive: its own running run is not abandoned.
    mine = runs.new_run(tmp_path, "c", "e", run_id="mine")
    assert runs.run_status(mine.manifest) == "running"
    # A pid recorded on another host cannot be judged here.
    assert runs.run_status({**m, "process": {**m["process"], "host": "elsewhere"}}) == "running"


def test_git_state_leaves_data_out_and_names_dirty_paths(tmp_path):
    def git(*a: str) -> None:
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "d.csv").write_text("a\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c")
    (tmp_path / "data" / "d.csv").write_text("changed by a run\n")
    state = runs.git_state(tmp_path)
    assert state["dirty"] is False and state["dirty_paths"] == [] and len(state["commit"]) == 40
    (tmp_path / "code.py").write_text("x = 2\n")
    state = runs.git_state(tmp_path / "data")  # from a subdirectory too
    assert state["dirty"] is True and state["dirty_paths"] == ["code.py"]


def test_new_run_refuses_a_data_root_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a file, not a directory"):
        runs.new_run(tmp_path / "f", "c", "e")


def test_boots_list_shows_an_abandoned_boot(tmp_path, capsys):
    code = ("import sys; from offload_lab.core import runs; "
            "r = runs.new_run(sys.argv[1], 'c', 'boots', {'stack': 's'}, run_id='b1'); "
            "r.write_json('boot.json', {'outcome': 'ready', 'startup_s': 3.0})")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    assert cli.main(["boots", "list", "--campaign", "c", "--data-dir", str(tmp_path)]) == 0
    assert "b1  s: ready, abandoned after 3 s" in capsys.readouterr().out
