"""The campaign runner: parameters checked before anything runs; notebooks executed through papermill against the
real server into run directories whose manifests check out."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
import pytest
import yaml

from offload_lab.campaigns import runner as campaign
from offload_lab.core import runs
from offload_lab.core.errors import InputError, ProducerError


def _campaign_file(tmp_path: Path, repo_root: Path, **params) -> Path:
    spec = {
        "name": "itest",
        "stack": str(repo_root / "configs/stacks/embedded.yaml"),
        "experiments": [{"experiment": "context", "notebook": str(repo_root / "notebooks/context.ipynb"),
                         "parameters": params}],
    }
    f = tmp_path / "campaign.yaml"
    f.write_text(yaml.safe_dump(spec))
    return f


def test_unknown_parameter_is_an_error_before_anything_runs(tmp_path, repo_root):
    f = _campaign_file(tmp_path, repo_root, context_lengths=[64], no_such_parameter=1)
    with pytest.raises(InputError, match=r"no_such_parameter.*does not declare"):
        campaign.run_campaign(f, data_root=tmp_path / "data", url="http://127.0.0.1:9")
    assert not (tmp_path / "data").exists()


def test_missing_notebook_is_named(tmp_path, repo_root):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"name": "x", "experiments": [{"experiment": "e", "notebook": "nope.ipynb"}]}))
    with pytest.raises(InputError, match="nope.ipynb"):
        campaign.validate(campaign.load_campaign(f, root=tmp_path))


def test_embedded_campaign_file_is_valid(repo_root):
    campaign.validate(campaign.load_campaign(repo_root / "configs/campaigns/embedded.yaml"))


@pytest.mark.server
def test_context_notebook_runs_through_papermill_into_a_verified_run(tmp_path, repo_root, embedded_server):
    f = _campaign_file(tmp_path, repo_root, context_lengths=[64, 300], output_tokens=12, repeats=2)
    result = campaign.run_campaign(f, data_root=tmp_path / "data", url=embedded_server.url)
    (run_dir,) = result.runs
    assert run_dir.parent == tmp_path / "data" / "itest" / "context"
    m = runs.load_manifest(run_dir)
    assert m["outcome"] == "ok"
    # Manifests record the parameters as the experiment's model validated them (its defaults written out).
    assert m["parameters"] == {"context_lengths": [64, 300], "output_tokens": 12, "repeats": 2, "warmup": True}
    assert m["kind"] == "context"
    assert m["git"]["commit"] is None or len(m["git"]["commit"]) == 40
    assert m["environment"]["cpu"]["logical_cores"] >= 1
    assert m["notebook"]["path"].endswith("context.ipynb") and len(m["notebook"]["sha256"]) == 64
    assert {"events.jsonl", "summary.csv", "notebook.ipynb"} <= set(m["files"])
    assert runs.verify_run(run_dir) == []
    summary = pd.read_csv(run_dir / "summary.csv")
    assert summary["context_tokens"].tolist() == [64, 300]
    assert summary["n"].tolist() == [2, 2]
    events = [e for e in runs.read_events(run_dir / "events.jsonl") if e["kind"] == "request"]
    assert all(e["prompt_tokens"] == e["context_tokens"] for e in events)
    assert all(e["output_tokens"] == 12 for e in events)
    # The output notebook stores the parameters it ran with; the summary recomputes from the raw events.
    nb = nbformat.read(run_dir / "notebook.ipynb", as_version=4)
    assert nb.metadata["papermill"]["parameters"]["run_dir"] == str(run_dir)
    # ... and shows its figures inline (issue 23)
    assert any({"image/png", "image/svg+xml"} & set(o.get("data", {})) for c in nb.cells for o in c.get("outputs", []))
    from offload_lab.experiments.context import runner as context_length

    pd.testing.assert_frame_equal(context_length.summarize_run(run_dir), summary, check_dtype=False)


@pytest.mark.server
def test_a_failing_cell_fails_the_campaign_and_keeps_the_run_marked(tmp_path, repo_root, embedded_server):
    f = _campaign_file(tmp_path, repo_root, context_lengths=[10_000_000], output_tokens=4, repeats=1)
    with pytest.raises(ProducerError, match="failed in cell"):
        campaign.run_campaign(f, data_root=tmp_path / "data", url=embedded_server.url)
    (run_dir,) = list((tmp_path / "data" / "itest" / "context").iterdir())
    m = runs.load_manifest(run_dir)
    assert m["outcome"] == "failed" and "max_model_len" in m["error"]
    assert (run_dir / "notebook.ipynb").is_file()
