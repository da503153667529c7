"""The server's URL has one name everywhere (issue 36): `--url` on the command line, `url` in a notebook. The old
notebook parameter `base_url` still works for one release, with one deprecation line: passed by hand (papermill
`-p base_url X`), and filled in by a campaign for a notebook whose parameters cell still declares it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offload_lab.experiments import cells, notebook

ROOT = Path(__file__).resolve().parents[1]


def test_the_generated_parameters_cell_names_the_url_url() -> None:
    cell = cells.parameters_cell(ROOT, "concurrency")
    assert "\nurl: Optional[str] = " in cell and "base_url" not in cell
    assert notebook.RUNNER_PARAMETERS[0] == "url"


def test_every_experiment_notebook_declares_url_not_base_url() -> None:
    for kind in cells.experiment_notebooks(ROOT):
        assert notebook.url_parameters(ROOT / notebook.notebook_of(kind)) == ("url",), kind
        assert "nr.base_url" not in (ROOT / notebook.notebook_of(kind)).read_text(), kind


def test_the_old_name_still_gives_the_url_with_one_deprecation_line(capsys: pytest.CaptureFixture[str]) -> None:
    # papermill `-p base_url X` injects base_url after the cell that declares url (its default left as it is).
    assert notebook.url_given({"url": "http://127.0.0.1:8000", "base_url": "http://h:1"}) == "http://h:1"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "base_url is deprecated, use url" in err[0]
    assert notebook.url_given({"url": "http://h:2"}) == "http://h:2"
    assert notebook.url_given({"url": "http://h:2", "base_url": None}) == "http://h:2"
    assert notebook.url_given({"url": "http://h:2", "base_url": "http://h:2"}) == "http://h:2"  # a campaign's both
    assert capsys.readouterr().err == ""


def test_the_old_name_is_a_declared_parameter_not_an_unknown_one() -> None:
    injected = {"In": ["# Parameters\nbase_url = \"http://h:1\"\n"]}
    notebook.check_injected("concurrency", injected)  # no InputError: the old spelling is accepted
    with pytest.raises(Exception, match="base_ur1"):
        notebook.check_injected("concurrency", {"In": ["# Parameters\nbase_ur1 = 1\n"]})


def test_a_campaign_fills_in_the_name_the_notebook_declares(tmp_path: Path) -> None:
    def nb(source: str) -> Path:
        p = tmp_path / f"n{len(list(tmp_path.iterdir()))}.ipynb"
        p.write_text(json.dumps({"cells": [{"cell_type": "code", "source": source,
                                            "metadata": {"tags": ["parameters"]}}]}))
        return p

    assert notebook.url_parameters(nb("base_url = None\nrun_dir = None\n")) == ("url", "base_url")  # written before
    assert notebook.url_parameters(nb("url = None\nrun_dir = None\n")) == ("url",)
    assert notebook.url_parameters(nb("base_url = None\nurl = None\n")) == ("url", "base_url")
    assert notebook.url_parameters(tmp_path / "missing.ipynb") == ("url",)


def test_a_notebook_written_before_the_rename_still_reads_nr_base_url() -> None:
    fields = {f: None for f in ("kind", "run", "params", "campaign", "data_root", "owned")}
    nr = notebook.NotebookRun(**fields, url="http://h:1")
    assert nr.base_url == nr.url == "http://h:1"
