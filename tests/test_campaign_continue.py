"""A campaign does all it can: a failing notebook is recorded and the campaign goes on with the experiments that do not
read its runs; those that do are skipped; the exit is 4 with a summary naming each failure and skip. `--fail-fast`
stops at the first failure. Dependencies (`after:`, and what an experiment's parameters read) are checked before
anything runs. Tiny notebooks made here, no vLLM (a stand-in server where one is needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
import yaml

from offload_lab.campaigns import ledger
from offload_lab.campaigns import runner as campaign
from offload_lab.campaigns.depends import CampaignFailed
from offload_lab.cli.main import main
from offload_lab.core import runs
from offload_lab.core.errors import InputError

from pod_helpers import fake_stack, probe_notebook

PARAMS = "base_url = None\nrun_dir = None\ncampaign = 'x'\ndata_root = 'data'\n"


def _notebook(path: Path, body: str) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A throwaway repository root with a notebook that works and one that fails in its second cell."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    _notebook(tmp_path / "good.ipynb", "import pathlib\npathlib.Path(run_dir, 'out.txt').write_text('measured')")
    _notebook(tmp_path / "broken.ipynb", "raise RuntimeError('the broken notebook broke')")
    return tmp_path


def _write(root: Path, experiments: list[dict[str, Any]], name: str = "cont") -> Path:
    for e in experiments:
        e.setdefault("needs_server", False)
        e["notebook"] = str(root / e["notebook"])
    f = root / "campaign.yaml"
    f.write_text(yaml.safe_dump({"name": name, "experiments": experiments}))
    return f


def _outcomes(data: Path, name: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for run_dir in runs.iter_runs(data, name):
        m = runs.load_manifest(run_dir)
        out.setdefault(m["experiment"], []).append(m["outcome"])
    return out


def test_a_failing_notebook_fails_itself_and_skips_only_what_reads_it(project, capsys):
    f = _write(project, [
        {"experiment": "first", "notebook": "good.ipynb"},
        {"experiment": "broken", "notebook": "broken.ipynb"},
        {"experiment": "independent", "notebook": "good.ipynb"},
        {"experiment": "reader", "notebook": "good.ipynb", "after": ["broken"]},
        {"experiment": "reader_of_reader", "notebook": "good.ipynb", "after": ["reader", "first"]},
    ])
    data = project / "data"
    code = main(["campaign", "run", str(f), "--data-dir", str(data), "--quiet"])
    out = capsys.readouterr()
    assert code == 4, out
    # The runs before and after the failure are made; the failed one is kept with its output notebook.
    assert _outcomes(data, "cont") == {"first": ["ok"], "broken": ["failed"], "independent": ["ok"]}
    (broken,) = runs.iter_runs(data, "cont", "broken")
    assert (broken / "notebook.ipynb").is_file()
    assert "the broken notebook broke" in runs.load_manifest(broken)["error"]
    # The summary names the failure (run directory, the error's first line) and each skip, and why.
    text = out.out + out.err
    assert f"failed: broken ({broken})" in text and "RuntimeError: the broken notebook broke" in text
    assert "skipped: reader: it reads the runs of broken, which failed" in text
    assert "skipped: reader_of_reader: it reads the runs of reader, which was skipped" in text
    assert "offload-lab: error: campaign cont: 1 of 5 experiment run(s) failed, 2 skipped" in out.err
    # The ledger's session says the same.
    (session,) = ledger.read_ledger(data, "cont")
    assert session["outcome"] == "failed" and not session["open"]
    assert [(s["experiment"], s["run"]) for s in session["failures"]] == [("broken", str(broken))]
    assert [s["experiment"] for s in session["skipped"]] == ["reader", "reader_of_reader"]
    assert str(broken) in session["runs"] and len(session["runs"]) == 3


def test_fail_fast_stops_at_the_first_failure(project):
    f = _write(project, [
        {"experiment": "broken", "notebook": "broken.ipynb"},
        {"experiment": "independent", "notebook": "good.ipynb"},
    ])
    data = project / "data"
    assert main(["campaign", "run", str(f), "--data-dir", str(data), "--quiet", "--fail-fast"]) == 4
    assert _outcomes(data, "cont") == {"broken": ["failed"]}
    (session,) = ledger.read_ledger(data, "cont")
    assert session["outcome"] == "failed"


def test_json_output_has_the_skip_and_the_summary_lists(project, capsys):
    f = _write(project, [
        {"experiment": "broken", "notebook": "broken.ipynb"},
        {"experiment": "reader", "notebook": "good.ipynb", "after": ["broken"]},
    ])
    data = project / "data"
    assert main(["campaign", "run", str(f), "--data-dir", str(data), "--json"]) == 4
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]  # stdout is JSON lines only
    (skip,) = [e for e in events if e["event"] == "skipped"]
    assert skip["experiment"] == "reader" and "broken" in skip["error"]
    (summary,) = [e for e in events if e["event"] == "summary"]
    assert [r["experiment"] for r in summary["failed"]] == ["broken"]
    assert summary["failed"][0]["run"] and "RuntimeError" in summary["failed"][0]["error"]
    assert [r["experiment"] for r in summary["skipped"]] == ["reader"]


def test_the_library_raises_campaign_failed_with_the_result(project):
    f = _write(project, [
        {"experiment": "broken", "notebook": "broken.ipynb"},
        {"experiment": "reader", "notebook": "good.ipynb", "after": ["broken"]},
    ])
    with pytest.raises(CampaignFailed, match="failed in cell") as caught:
        campaign.run_campaign(f, data_root=project / "data", log=lambda s: None)
    result = caught.value.result
    assert [(o.experiment, o.outcome) for o in result.outcomes] == [("broken", "failed"), ("reader", "skipped")]
    assert caught.value.exit_code == 4


@pytest.mark.parametrize("experiments, words", [
    ([{"experiment": "a", "notebook": "good.ipynb", "after": ["nobody"]}], "after names ['nobody']"),
    ([{"experiment": "a", "notebook": "good.ipynb", "after": ["b"]},
      {"experiment": "b", "notebook": "good.ipynb", "after": ["a"]}], "a -> b -> a depend on each other in a circle"),
    ([{"experiment": "a", "notebook": "good.ipynb", "after": ["a"]}], "a -> a depend on each other in a circle"),
    ([{"experiment": "a", "notebook": "good.ipynb", "after": ["b"]},
      {"experiment": "b", "notebook": "good.ipynb"}], "reads the runs of b, which is listed after it"),
])
def test_bad_dependencies_are_exit_2_naming_the_file_before_anything_runs(project, capsys, experiments, words):
    f = _write(project, experiments)
    data = project / "data"
    assert main(["campaign", "run", str(f), "--data-dir", str(data), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and words in err, err
    assert not data.exists()
    assert main(["campaign", "check", str(f)]) == 2


def test_what_the_parameters_read_is_a_dependency(repo_root, tmp_path):
    c = campaign.load_campaign(repo_root / "configs/campaigns/embedded.yaml")
    assert campaign.dependencies(c)["quality"] == ["quality_float32", "quality_bfloat16"]
    # The comparison listed before the side runs it reads cannot run in the file's order.
    spec = yaml.safe_load((repo_root / "configs/campaigns/embedded.yaml").read_text())
    names = [e["experiment"] for e in spec["experiments"]]
    spec["experiments"].insert(0, spec["experiments"].pop(names.index("quality")))
    for e in spec["experiments"]:
        e["notebook"] = str(repo_root / e["notebook"])
    spec["stack"] = str(repo_root / spec["stack"])
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError, match=r"experiment quality reads the runs of quality_float32, which is listed "
                                         r"after it"):
        campaign.validate(campaign.load_campaign(f, root=repo_root))


def test_a_server_that_does_not_start_fails_the_experiments_on_that_variant_only(tmp_path):
    st = fake_stack(tmp_path)
    nb = probe_notebook(tmp_path / "probe.ipynb")
    broken = {"override": {"env": {"FAKE_VLLM": "oom_load"}}, "variant": "no-plan"}
    spec = {"name": "var", "stack": str(st), "experiments": [
        {"experiment": "a", "notebook": str(nb), **broken},
        {"experiment": "b", "notebook": str(nb), **broken},
        {"experiment": "c", "notebook": str(nb)},
        {"experiment": "after_b", "notebook": str(nb), "needs_server": False, "after": ["b"]},
    ]}
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(spec))
    data = tmp_path / "data"
    with pytest.raises(CampaignFailed) as caught:
        campaign.run_campaign(f, data_root=data, log=lambda s: None)
    result = caught.value.result
    got = {o.experiment: o.outcome for o in result.outcomes}
    assert got == {"a": "failed", "b": "failed", "c": "ok", "after_b": "skipped"}
    a, b = result.outcomes[0], result.outcomes[1]
    # The failed boot is kept, named, and booted once: b fails on it without another start.
    assert a.run and runs.load_manifest(a.run)["experiment"] == "boots" and "did not become ready" in a.error
    assert b.run == a.run and "did not start earlier" in b.error
    boots = [runs.load_manifest(d) for d in runs.iter_runs(data, "var", "boots")]
    assert len(boots) == 2 and a.run in [str(p) for p in result.boot_runs]
    assert _outcomes(data, "var")["c"] == ["ok"]


def test_paper_is_built_after_a_partial_campaign_and_the_exit_is_still_4(project, capsys, monkeypatch):
    from offload_lab.paper import build as paper

    built: list[dict[str, Any]] = []

    class Built:
        def outputs(self) -> dict[str, Path]:
            return {"pdf": project / "paper.pdf"}

    monkeypatch.setattr(paper, "check_sources", lambda root: None)  # the repository's paper is not under test here
    monkeypatch.setattr(paper, "build_paper", lambda **kw: built.append(kw) or Built())
    f = _write(project, [{"experiment": "broken", "notebook": "broken.ipynb"},
                         {"experiment": "fine", "notebook": "good.ipynb"}])
    data = project / "data"
    assert main(["campaign", "run", str(f), "--data-dir", str(data), "--quiet", "--paper"]) == 4
    assert [b["campaign"] for b in built] == ["cont"] and built[0]["data_root"] == data
    out = capsys.readouterr().out
    assert f"paper pdf: {project / 'paper.pdf'}" in out and "leaves out the sections" in out


def test_an_experiment_on_its_own_variant_with_url_is_refused_before_anything_runs(project):
    f = _write(project, [{"experiment": "fine", "notebook": "good.ipynb"},
                         {"experiment": "eager", "notebook": "good.ipynb", "needs_server": True,
                          "override": {"flags": {"enforce_eager": True}}}])
    spec = yaml.safe_load(f.read_text())
    f.write_text(yaml.safe_dump({**spec, "stack": str(fake_stack(project))}))
    with pytest.raises(InputError, match=r"\['eager'\] run on their own server variant"):
        campaign.run_campaign(f, data_root=project / "data", url="http://127.0.0.1:9", log=lambda s: None)
    assert not (project / "data").exists()
