"""Notebooks executed as the campaign runner executes them: the project's kernel over ipc (no kernel warning), and
the progress display fed by nbclient's cell hooks and the kernel's count lines."""

from __future__ import annotations

import io
import os
import json
import re
from pathlib import Path

import nbformat
import pytest

from offload_lab.campaigns import execute, progress
from offload_lab.core.errors import ProducerError

WARNING = "without encryption"


def _notebook(path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("n = 3", metadata={"tags": ["parameters"]})]
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    nb.cells.append(nbformat.v4.new_markdown_cell("not executed"))
    nb.metadata["kernelspec"] = {"name": execute.KERNEL_NAME, "display_name": "Python (offload-lab)",
                                 "language": "python"}
    nbformat.write(nb, str(path))
    return path


COUNTING = "for i in range(n):\n    print(f'side local: {i + 1}/{n} items answered')"


def test_no_kernel_warning_and_the_outputs_are_kept(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    nb = _notebook(tmp_path / "t.ipynb", "import os\nprint('cwd', os.getcwd())", COUNTING)
    out = tmp_path / "out.ipynb"
    execute.execute_notebook(nb, out, {"n": 2}, cwd=tmp_path)
    err = capfd.readouterr().err
    assert WARNING not in err
    text = out.read_text()
    assert f"cwd {tmp_path}" in text and "2/2 items answered" in text


def test_the_sockets_are_the_kernels_own_wherever_it_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel runs in one directory and the client in another, as under nbconvert (kernel in notebooks/): with
    jupyter_client's relative default prefix the kernel would never answer; neither directory keeps a socket."""
    import nbformat
    from nbconvert.preprocessors import ExecutePreprocessor
    from traitlets.config import Config

    kernel_dir, client_dir = tmp_path / "kernel", tmp_path / "client"
    kernel_dir.mkdir()
    client_dir.mkdir()
    monkeypatch.chdir(client_dir)
    nb = nbformat.read(str(_notebook(tmp_path / "t.ipynb", "import os\nprint(os.getcwd())")), as_version=4)
    ep = ExecutePreprocessor(timeout=120, kernel_name=execute.kernel_name(),
                             config=Config(execute.kernel_manager_config()), startup_timeout=60)
    ep.preprocess(nb, {"metadata": {"path": str(kernel_dir)}})
    assert str(kernel_dir) in nb.cells[1].outputs[0]["text"]
    assert ep.kernel_manager_class is execute.IpcKernelManager  # the kernel answered: the sockets were found
    assert list(kernel_dir.iterdir()) == [] and list(client_dir.iterdir()) == []


def test_the_warning_is_the_kernels_over_tcp(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the same notebook under a manager that writes a tcp connection file warns, so the test above
    would see the warning if it were printed (ipykernel >= 7.4)."""
    import ipykernel

    if tuple(int(x) for x in ipykernel.__version__.split(".")[:2]) < (7, 4):
        pytest.skip("ipykernel before 7.4 does not warn")
    from jupyter_client.provisioning import LocalProvisioner

    monkeypatch.setattr(execute, "kernel_manager_config", lambda: {"KernelManager": {"transport": "tcp"},
                                                                   "IpcKernelManager": {"transport": "tcp"}})
    # ... and the kernelspec's provisioner leaves the transport as the manager set it
    monkeypatch.setattr(execute.IpcProvisioner, "pre_launch", LocalProvisioner.pre_launch)
    execute.execute_notebook(_notebook(tmp_path / "t.ipynb"), tmp_path / "out.ipynb", {}, cwd=tmp_path)
    assert WARNING in capfd.readouterr().err


def test_a_failing_cell_names_the_cell(tmp_path: Path) -> None:
    nb = _notebook(tmp_path / "t.ipynb", "raise ValueError('boom')")
    with pytest.raises(ProducerError, match=r"failed in cell .*ValueError: boom"):
        execute.execute_notebook(nb, tmp_path / "out.ipynb", {}, cwd=tmp_path)
    assert (tmp_path / "out.ipynb").is_file()


def _campaign(tmp_path: Path, mode: progress.Mode) -> str:
    nb = _notebook(tmp_path / "t.ipynb", COUNTING)
    buf = io.StringIO()
    with progress.Progress(mode, campaign="demo", experiments=2, file=buf) as p:
        for name in ("context", "quality"):
            p.experiment(name, execute.executed_cells(nb, {"n": 4}), detail="t.ipynb", run=str(tmp_path / name))
            execute.execute_notebook(nb, tmp_path / f"{name}.ipynb", {"n": 4}, cwd=tmp_path, watcher=p)
            p.done("ok")
        p.summary()
    return buf.getvalue()


def test_executed_cells_counts_what_papermill_runs(tmp_path: Path) -> None:
    nb = _notebook(tmp_path / "t.ipynb", "x = 1", "   ")
    # the parameters cell and "x = 1"; not the blank cell nor the markdown; plus the injected parameters
    assert execute.executed_cells(nb) == 2 and execute.executed_cells(nb, {"n": 1}) == 3


def test_json_progress_names_each_experiment_counts_and_ends_with_a_summary(tmp_path: Path) -> None:
    events = [json.loads(line) for line in _campaign(tmp_path, "json").splitlines()]
    assert [e["experiment"] for e in events if e["event"] == "experiment"] == ["context", "quality"]
    cells = [e for e in events if e["event"] == "cell" and e["state"] == "done"]
    # injected parameters, the parameters cell, the counting cell: for each experiment
    assert [c["done"] for c in cells] == [1, 2, 3, 1, 2, 3] and all(c["of"] == 3 for c in cells)
    counts = [e for e in events if e["event"] == "count"]
    assert [(c["done"], c["total"], c["unit"], c["label"]) for c in counts[:4]] == \
        [(i, 4, "items", "side local") for i in range(1, 5)]
    assert events[-1]["event"] == "summary" and events[-1]["ok"] == 2
    assert [r["experiment"] for r in events[-1]["experiments"]] == ["context", "quality"]


@pytest.mark.parametrize("mode", ["quiet", "rich"])
def test_progress_names_each_experiment_and_ends_with_a_summary(tmp_path: Path, mode: progress.Mode) -> None:
    text = _campaign(tmp_path, mode)
    assert "context" in text and "quality" in text
    tail = text[text.index("2 of 2 experiments ok"):]
    assert "context" in tail and "quality" in tail  # the summary lists both, after everything else
    if mode == "quiet":
        # plain lines, each with the wall-clock time (a log read later says when each thing happened)
        assert "\x1b[" not in text and re.match(r"\d\d:\d\d:\d\d running context", text.splitlines()[0])


def test_count_lines_and_cell_words() -> None:
    m = progress.COUNT_LINE.search("regime short: 2/3 levels done")
    assert m and (m["label"], m["done"], m["total"], m["unit"]) == ("regime short", "2", "3", "levels")
    assert progress.COUNT_LINE.search("the ratio 1/2 is not a count") is None
    cell = nbformat.v4.new_code_cell("# papermill_description=warmup\nrun()")
    assert progress.cell_words(cell) == "warmup"
    # Human words, never source code: a cell's first comment, else its place.
    assert progress.cell_words(nbformat.v4.new_code_cell("import x\n\nresult = x.go()"), 3) == "cell 4"
    assert progress.cell_words(nbformat.v4.new_code_cell("# Measure each level\nx.go()"), 3) == "Measure each level"
    assert progress.plural(1, "experiments") == "experiment" and progress.plural(0, "experiments") == "experiments"


def test_a_kernel_under_a_deep_folder_gets_a_socket_path_that_fits(tmp_path, monkeypatch):
    """A Unix socket's path holds at most 107 bytes: under a deep home or runtime folder (a pytest-xdist worker's
    temporary home, a long $HOME on a pod) the kernel's sockets go to a short private folder instead of failing with
    "File name too long"; a short path stays where it was."""
    from offload_lab.campaigns import execute as ex

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(deep))
    prefix = ex._ipc_prefix(None)
    assert ex._fits(prefix) and not prefix.startswith(str(deep)) and os.path.isdir(os.path.dirname(prefix))
    assert ex._ipc_prefix(str(deep / "kernel-1.json")) != str(deep / "kernel-1-ipc")
    assert ex._ipc_prefix("/tmp/k.json") == "/tmp/k-ipc"
