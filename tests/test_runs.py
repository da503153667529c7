import json

import pytest

from offload_lab.core import runs
from offload_lab.core.errors import InputError


def test_new_run_writes_running_manifest_then_finishes_with_hashes(tmp_path):
    run = runs.new_run(tmp_path, "c1", "exp", {"a": 1})
    m = json.loads((run.path / "manifest.json").read_text())
    assert m["outcome"] == "running" and m["parameters"] == {"a": 1}
    assert run.path == tmp_path / "c1" / "exp" / run.run_id
    with run.events() as log:
        log.append({"x": 1})
        log.append({"x": 2})
    run.write_json("summary.json", {"n": 2})
    m = run.finish("ok")
    assert set(m["files"]) == {"events.jsonl", "summary.json"}
    assert m["files"]["summary.json"]["sha256"] == runs.sha256_file(run.path / "summary.json")
    assert runs.verify_run(run.path) == []
    assert [e["x"] for e in runs.read_events(run.path / "events.jsonl")] == [1, 2]


def test_existing_run_directory_is_never_reused(tmp_path):
    runs.new_run(tmp_path, "c", "e", run_id="r1")
    with pytest.raises(InputError, match="already exists"):
        runs.new_run(tmp_path, "c", "e", run_id="r1")


def test_verify_names_changed_missing_and_added_files(tmp_path):
    run = runs.new_run(tmp_path, "c", "e")
    run.write_text("a.txt", "one")
    run.write_text("b.txt", "two")
    run.finish("ok")
    (run.path / "a.txt").write_text("edited")
    (run.path / "b.txt").unlink()
    (run.path / "c.txt").write_text("late")
    problems = "\n".join(runs.verify_run(run.path))
    assert "a.txt: sha256 differs" in problems
    assert "b.txt: listed in the manifest but missing" in problems
    assert "c.txt: not listed" in problems


def test_failed_runs_are_kept_and_marked(tmp_path):
    run = runs.new_run(tmp_path, "c", "e")
    run.finish("failed", error="boom")
    m = runs.load_manifest(run.path)
    assert m["outcome"] == "failed" and m["error"] == "boom"
    assert runs.latest_run(tmp_path, "c", "e") is None
    assert runs.latest_run(tmp_path, "c", "e", outcome="failed") == run.path


def test_torn_last_event_line_is_skipped_but_damage_inside_is_an_error(tmp_path):
    p = tmp_path / "ev.jsonl"
    p.write_text('{"a": 1}\n{"a": 2}\n{"a": ')
    assert runs.read_events(p) == [{"a": 1}, {"a": 2}]
    p.write_text('{"a": 1}\nnot json\n{"a": 3}\n')
    with pytest.raises(InputError, match="ev.jsonl:2"):
        runs.read_events(p)


def test_bad_names_are_rejected(tmp_path):
    with pytest.raises(InputError, match="campaign name"):
        runs.new_run(tmp_path, "../escape", "e")


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    runs.atomic_write_json(tmp_path / "x.json", {"k": [1, 2]})
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
    assert json.loads((tmp_path / "x.json").read_text()) == {"k": [1, 2]}
