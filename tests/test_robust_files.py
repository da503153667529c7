"""Hostile files and notebooks (issue 35): one case per class, each asserting the exit code and that the message names
the input. Kernels start for the cases that run a notebook (a few seconds each); no vLLM."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from offload_lab.campaigns import execute
from offload_lab.core import redact
from offload_lab.core.errors import InputError

sys.path.insert(0, str(Path(__file__).parent / "robust"))
from hostile_server import HostileServer  # noqa: E402

BIN = Path(sys.executable).parent
PASSWORD = "hunter2-FILES-pw"
KEY = "sk-files-0123456789abcdefghijKLMN"
# Nine levels of ten: 10^9 values once expanded, a few hundred bytes as written.
BOMB = "{" + ", ".join(
    [f"a: &a [{', '.join(['x'] * 10)}]"]
    + [f"{n}: &{n} [{', '.join(['*' + p] * 10)}]" for p, n in zip("abcdefgh", "bcdefghi")]) + "}"


def _notebook(path: Path, *cells: tuple[str, list[str] | None]) -> Path:
    nb = nbformat.v4.new_notebook()
    for source, tags in cells:
        cell = nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    nb.metadata["kernelspec"] = {"name": execute.kernel_name(), "display_name": "Python", "language": "python"}
    nbformat.write(nb, str(path))
    return path


PARAMS = ("base_url = None\nurl = None\nrun_dir = None\ncampaign = 'scratch'\ndata_root = 'data'\n", ["parameters"])


# -- notebooks edited by hand ------------------------------------------------------------------------------------------

def test_a_copied_parameters_cell_is_refused_naming_the_notebook_and_the_cells(tmp_path, capsys):
    nb = _notebook(tmp_path / "dup.ipynb", PARAMS, ("x = 1", None), PARAMS, ("print(run_dir)", None))
    assert execute.main([str(nb), str(tmp_path / "out.ipynb")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(nb) in err and "#1, #3" in err, err
    assert not (tmp_path / "out.ipynb").exists()


def test_a_kernel_refuses_a_cell_that_assigns_injected_parameters_again():
    from offload_lab.experiments.notebook import INJECTED_HEADER, check_not_overridden

    history = ["run_dir = None\n", INJECTED_HEADER + "run_dir = '/data/x/run'\n", "run_dir = None\ncampaign = 'x'\n",
               "with notebook.running('context', globals()) as nr: pass"]
    with pytest.raises(InputError, match=r"\['run_dir'\]"):
        check_not_overridden("context", {"In": history})
    check_not_overridden("context", {"In": history[:2] + history[3:]})  # nothing assigned again: fine


# -- paths and names: python -m offload_lab.campaigns.execute ------------------------------------------------------------

@pytest.mark.parametrize("case, names", [
    (["{nb}", "{tmp}/no/such/folder/out.ipynb"], "no/such/folder"),
    (["{nb}", "{tmp}/out.ipynb", "--cwd", "{tmp}/nowhere"], "--cwd"),
    (["{nb}", "{tmp}/out.ipynb", "-p", "x=[1, 2"], "parameter x"),
    (["{nb}", "{tmp}/out.ipynb", "-p", "x", "[1, 2"], "parameter x"),
    (["{nb}", "{tmp}/out.ipynb", "-p", "x", BOMB], "parameter x"),
    (["{nb}", "{nb}"], "the notebook itself"),
    (["{tmp}/missing.ipynb", "{tmp}/out.ipynb"], "missing.ipynb"),
])
def test_execute_refuses_bad_input_in_one_line_with_exit_2(tmp_path, capsys, case, names):
    nb = _notebook(tmp_path / "t.ipynb", ("x = 0", ["parameters"]))
    argv = [a.replace("{nb}", str(nb)).replace("{tmp}", str(tmp_path)) for a in case]
    assert execute.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and names in err and "Traceback" not in err, err


def test_both_parameter_forms_are_taken():
    assert execute._joined_parameters(["nb", "out", "-p", "a", "1", "--parameter", "b=[1, 2]", "-p", "url", "h=x"]) \
        == ["nb", "out", "-p", "a=1", "--parameter", "b=[1, 2]", "-p", "url=h=x"]


# -- YAML alias bombs through papermill's own -y ------------------------------------------------------------------------

def test_papermill_refuses_a_yaml_bomb_before_it_writes_the_notebook(tmp_path):
    nb = _notebook(tmp_path / "t.ipynb", ("x = 0", ["parameters"]), ("print(type(x))", None))
    out = tmp_path / "out.ipynb"
    proc = subprocess.run([str(BIN / "papermill"), str(nb), str(out), "-y", f"x: {BOMB}"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "notebook parameter 'x'" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.skipif(execute.kernel_name() != execute.KERNEL_NAME, reason="the project's kernel is not installed "
                    "(`make envs`): papermill hides credentials for the project's notebooks, which name it")
def test_plain_papermill_writes_no_url_credentials_into_a_project_notebook(tmp_path):
    nb = _notebook(tmp_path / "t.ipynb", PARAMS, ("from offload_lab.core.redact import url_with_credentials\n"
                                                  "assert url_with_credentials(base_url).startswith('http://u:')", None))
    out = tmp_path / "out.ipynb"
    proc = subprocess.run([str(BIN / "papermill"), str(nb), str(out), "-k", execute.kernel_name(), "-p", "base_url",
                           f"http://u:{PASSWORD}@127.0.0.1:9"], capture_output=True, text=True, timeout=120)
    # The kernel got the whole URL back (its cell passed); the notebook holds the redacted one only.
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert PASSWORD not in out.read_text() and "http://***@127.0.0.1:9" in out.read_text()


# -- secrets in executed notebooks --------------------------------------------------------------------------------------

def test_the_notebook_a_run_keeps_holds_no_secret(tmp_path, monkeypatch):
    """A campaign run against a URL with credentials, a key in the environment, and a notebook that prints both (as a
    server's echoed error would): no file of the run folder holds either, in any form."""
    from offload_lab.campaigns.runner import run_campaign

    monkeypatch.setenv("MY_SERVICE_API_KEY", KEY)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "configs").mkdir()
    echo = ("import os\nfrom offload_lab.core.redact import url_with_credentials\n"
            "print('server said: Authorization: Bearer', os.environ['MY_SERVICE_API_KEY'])\n"
            "print('asked', url_with_credentials(base_url))\n"
            "print('raw', os.environ['MY_SERVICE_API_KEY'])\n")
    _notebook(tmp_path / "mine.ipynb", PARAMS, (echo, None))
    f = tmp_path / "c.yaml"
    f.write_text(json.dumps({"name": "leaky", "experiments": [{"experiment": "mine", "notebook": "mine.ipynb"}]}))
    data = tmp_path / "data"
    with HostileServer() as server:
        run_campaign(f, data_root=data, url=server.url_with("u", PASSWORD), log=lambda s: None)
    kept = list(data.rglob("notebook.ipynb"))
    assert kept and "asked http://***@127.0.0.1" in kept[0].read_text()
    basic = base64.b64encode(f"u:{PASSWORD}".encode()).decode().rstrip("=")
    for p in data.rglob("*"):
        if p.is_file():
            text = p.read_bytes()
            for secret in (PASSWORD, KEY, basic):
                assert secret.encode() not in text, (p, secret)


def test_redact_notebook_keeps_images_and_masks_text(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(1)")
    png = base64.b64encode(b"\x89PNG" + b"x" * 40).decode()
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"x-api-key: {KEY}\n"),
                    nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": f"Bearer {KEY}"})]
    nb.cells.append(cell)
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, str(path))
    assert execute.redact_notebook(path)
    text = path.read_text()
    assert KEY not in text and png in text and redact.MASK in text
    assert not execute.redact_notebook(path)  # already clean: left as it is


# -- the users' own files: profiles --------------------------------------------------------------------------------------

def test_a_profile_with_infinite_tokens_names_the_field(tmp_path):
    from offload_lab.seats.profile import load_profile

    p = tmp_path / "p.yaml"
    p.write_text("name: x\nprovenance: {kind: measured, source: me}\nperiod_days: 7\nactive_days: 5\nsessions: 9\n"
                 "window_hours: 8\ntokens: {output: .inf, new_input: 0, cached_read: 0}\n")
    with pytest.raises(InputError, match=r"tokens\.output.*finite"):
        load_profile(p)


# -- a campaign of the user's own notebook that reuses a campaign's name --------------------------------------------------

def test_the_paper_reads_a_campaign_file_that_runs_the_users_own_notebook(tmp_path):
    from offload_lab.paper import discovery, selection

    assert discovery.experiment_module("my_own_notebook", "params") is None
    assert discovery.experiment_module("my-own.notebook", "params") is None
    folder = tmp_path / "configs" / "campaigns"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text("name: embedded\nexperiments:\n- {experiment: mine, notebook: my_nb.ipynb, "
                                      "needs_server: false, parameters: {k: 1}}\n")
    assert selection.declared(tmp_path, "embedded") == {"mine": ("my_nb", [{"k": 1}])}


@pytest.mark.parametrize("text, names", [
    ("output: " + "9" * 5000, "cannot be read"),  # past Python's 4,300 digits: a ValueError, not a YAML error
])
def test_a_profile_with_a_number_too_long_to_read_is_named(tmp_path, text, names):
    from offload_lab.seats.profile import load_profile

    p = tmp_path / "p.yaml"
    p.write_text(f"name: x\nprovenance: {{kind: measured, source: me}}\ntokens: {{{text}}}\n")
    with pytest.raises(InputError, match=names) as e:
        load_profile(p)
    assert str(p) in str(e.value)


@pytest.mark.parametrize("dates, names", [
    (["2026-03-02", "2026-03-03", "2026-03-02"], "listed twice"),  # two exports pasted together: counted twice
    (["0001-01-01", "2026-03-03"], "mistyped"),                      # a period of 739,683 days
])
def test_a_usage_export_with_impossible_dates_is_refused(dates, names):
    from offload_lab.seats.usage_export import profile_from_ccusage

    day = {"inputTokens": 10, "outputTokens": 20, "cacheCreationTokens": 0, "cacheReadTokens": 100}
    with pytest.raises(InputError, match=names):
        profile_from_ccusage({"daily": [dict(day, date=d) for d in dates]}, "export.json", 8.0)


# -- paths and names: a campaign name that would become a folder ----------------------------------------------------------

@pytest.mark.parametrize("name", ["c" * 300, "../etc"])
def test_paper_build_refuses_a_campaign_name_that_is_no_folder_name(tmp_path, name):
    from offload_lab.paper.build import build_paper

    with pytest.raises(InputError, match="campaign name"):
        build_paper(name, tmp_path / "data", out_dir=tmp_path / "out", use_quarto=False)


# -- crashes and hangs: a cell that prints megabytes without a newline ---------------------------------------------------

def test_a_cell_printing_megabytes_on_one_line_does_not_stall_the_campaign_display():
    """It did: the kernel's stdout was split whole on every piece, and a count line's regular expression searched a
    2 MB line in quadratic time (the campaign sat for minutes). Lines too long to be progress are skipped."""
    import io

    from offload_lab.campaigns import progress

    with progress.Progress("json", file=io.StringIO()) as p:
        p.experiment("mine", 2)
        for _ in range(2_000):  # 2 MB without a newline, in pieces, then as one piece
            p.write("x" * 1000)
        p.write("y" * 2_000_000 + "\n")
        assert len(p._buffer) <= progress.LONGEST_LINE + 1
        p.write("regime short: 1/3 levels\n")  # a count line after it is still read
        assert p._steps["regime short"].done == 1


@pytest.mark.skipif(execute.kernel_name() != execute.KERNEL_NAME, reason="the project's kernel is not installed "
                    "(`make envs`): papermill redacts the outputs of the project's notebooks, which name it")
def test_plain_papermill_saves_a_project_notebook_redacted_even_mid_run(tmp_path):
    """papermill saves the output notebook at each cell's start and end: a cell that prints a key, then a cell that
    stops the process with SIGKILL (as a lost pod would) must leave no key on disk; the end's write is clean too."""
    printed = ("import os\nprint('server said: Authorization: Bearer', os.environ['MY_SERVICE_API_KEY'])\n"
               "print('raw', os.environ['MY_SERVICE_API_KEY'])", None)
    env = {**__import__("os").environ, "MY_SERVICE_API_KEY": KEY}
    done = _notebook(tmp_path / "done.ipynb", PARAMS, printed)
    out = tmp_path / "done.out.ipynb"
    proc = subprocess.run([str(BIN / "papermill"), str(done), str(out)], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "server said" in out.read_text() and KEY not in out.read_text()
    # Killed mid-run: the kernel kills papermill's own process (its parent's parent is the papermill CLI).
    killed = _notebook(tmp_path / "killed.ipynb", PARAMS, printed,
                       ("import os, signal, time\ntime.sleep(0.5)\nos.kill(os.getppid(), signal.SIGKILL)\n"
                        "time.sleep(30)", None))
    out = tmp_path / "killed.out.ipynb"
    proc = subprocess.run([str(BIN / "papermill"), str(killed), str(out)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode != 0
    assert "server said" in out.read_text() and KEY not in out.read_text()


def test_a_notebook_that_runs_out_of_disk_says_so(tmp_path):
    # A kernel's write on a full disk raises "[Errno 28] No space left on device", usually without a file name.
    from offload_lab.core.errors import ProducerError

    nb = _notebook(tmp_path / "full.ipynb", PARAMS,
                   ("import errno, os\nraise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))", None))
    with pytest.raises(ProducerError, match=r"the disk holding .* is full: free some space"):
        execute.execute_notebook(nb, tmp_path / "out.ipynb", {}, cwd=tmp_path)
