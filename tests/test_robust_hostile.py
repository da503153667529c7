"""Hostile inputs, round three (issue 24), a test per class: a bad output place, numbers at their limits, parameters
held against the stack and the model, the true kind of a path, secrets, tampered runs, and the audit's disguises.

The CLI cases run in ONE program per class (`_batch`): each command through offload-lab's own main(), as a user
would run it, without paying an interpreter start per case. tests/robust/hostile.py is the longer harness.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from offload_lab.core import inputs, places
from offload_lab.core.errors import InputError

from pod_helpers import fake_stack

ROOT = Path(__file__).resolve().parents[1]
SECRET = "hunter2-s3cr3t-XYZ"

_DRIVER = r"""
import contextlib, io, json, sys
from offload_lab.cli import main as cli
out = []
for argv in json.loads(sys.stdin.read()):
    err, std = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        rc = cli.main(argv)
    out.append({"argv": argv, "rc": rc, "err": err.getvalue(), "out": std.getvalue()})
print(json.dumps(out))
"""


def _batch(cases: list[list[str]], cwd: Path, env: dict[str, str] | None = None) -> list[dict]:
    """Run every argv through offload-lab's main() in one program; each result has rc, err, out."""
    p = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps(cases), capture_output=True, text=True,
                       cwd=cwd, env={**os.environ, "OFFLOAD_LAB_LOG_DIR": str(cwd / "_logs"), **(env or {})},
                       timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _assert_clear(results: list[dict], expected: list[tuple[str, ...]]) -> None:
    """Each refused with exit 2, one line per problem, naming every word given; never an internal error."""
    for r, words in zip(results, expected, strict=True):
        assert r["rc"] == 2, (r["argv"], r["rc"], r["err"][-600:])
        assert "Traceback" not in r["err"] and "internal error" not in r["err"], r["argv"]
        for w in words:
            assert w in r["err"], (r["argv"], w, r["err"][-600:])


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A header-only checkpoint of 2 layers x 32 experts and 4 attention heads, and a plan of it."""
    d = tmp_path_factory.mktemp("small")
    text = (ROOT / "configs/checkpoints/synthetic-dsv41-flash-exl3.yaml").read_text()
    for a, b in [("num_hidden_layers: 40", "num_hidden_layers: 2"), ("num_experts: 384", "num_experts: 32"),
                 ("num_attention_heads: 64", "num_attention_heads: 4"), ("rows: 19200000", "rows: 1000"),
                 ("vocab_size: 129280", "vocab_size: 1000"), ("num_hash_layers: 3", "num_hash_layers: 0"),
                 ("shards: 100", "shards: 2")]:
        text = text.replace(a, b)
    (d / "small.yaml").write_text(text)
    from offload_lab.cli import main as cli

    assert cli.main(["checkpoint", "synth", str(d / "small.yaml"), "--out", str(d / "ck")]) == 0
    assert cli.main(["plan", "make", str(d / "ck"), "--generator", "uniform", "--fraction", "0.25", "--out",
                     str(d / "plan.json")]) == 0
    return d


def test_every_writer_refuses_a_place_it_cannot_or_must_not_write(small, tmp_path):
    (tmp_path / "afile").write_text("x")
    run = tmp_path / "data" / "c" / "e" / "20260101T000000Z-abc"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    plan = ["plan", "make", str(small / "ck"), "--generator", "uniform", "--fraction", "0.25"]
    closed = "http://127.0.0.1:9"
    cases = [
        ([*plan, "--out", "/proc/p.json"], ("--out", "/proc", "kernel file system")),
        ([*plan, "--out", str(tmp_path / "afile" / "p.json")], ("--out", "afile is a file")),
        (["plan", "export", str(small / "plan.json"), "--format", "dsv41-host-plan", "--out", "/dev/full",
          "--force"], ("--out", "/dev")),
        (["campaign", "run", str(ROOT / "configs/campaigns/embedded.yaml"), "--url", closed, "--data-dir",
          str(run / "sub")], ("--data-dir", "inside the run directory")),
        (["model", "tiny", "--out", "/proc/m"], ("--out", "/proc")),
        (["checkpoint", "synth", str(small / "small.yaml"), "--out", str(tmp_path / "afile")],
         ("--out", "is a file, not a directory")),
        (["bench", "--url", closed, "--regime", "short", "--out", str(tmp_path / "afile")], ("--out",)),
        (["quality", "run", "--endpoint", closed, "--data-dir", "/proc/q"], ("--data-dir", "/proc")),
        (["paper", "build", "--data-dir", str(tmp_path / "data"), "--campaign", "c", "--out",
          str(tmp_path / "data" / "c" / "paper")], ("--out", "inside the data tree")),
        (["paper", "build", "--data-dir", str(tmp_path / "data"), "--campaign", "c", "--out", str(tmp_path / "o"),
          "--bundle", str(tmp_path / "o")], ("--out", "--bundle", "the same place")),
        (["routing", "collect", "--model", str(small / "ck"), "--out", "/proc/r.json"], ("--out", "/proc")),
    ]
    _assert_clear(_batch([c for c, _ in cases], tmp_path), [w for _, w in cases])
    assert not (tmp_path / "data" / "c" / "paper").exists() and not (tmp_path / "o").exists()


def test_a_read_only_place_is_refused_before_any_work(tmp_path, monkeypatch):
    # As root a chmod'ed folder stays writable, so the file system's answer is what the check reads: simulated.
    monkeypatch.setattr(places.os, "access", lambda p, mode: False)
    with pytest.raises(InputError, match=r"--out .*cannot be written: .* is not writable"):
        places.check_output(tmp_path / "new" / "p.json", "--out", "file")
    with pytest.raises(InputError, match="--data-dir"):
        inputs.check_dir(tmp_path / "d", "--data-dir", write=True)


def test_numbers_at_their_limits_are_refused_with_the_range(small, tmp_path):
    model = (ROOT / "configs/models/tiny-qwen3-moe.yaml").read_text().replace("hidden_size: 256",
                                                                               "hidden_size: 10000000")
    (tmp_path / "m.yaml").write_text(model)
    closed = "http://127.0.0.1:9"
    cases = [
        (["audit", str(small / "ck"), "--tp", "1", "--usable-gib", "1e308"], ("--usable-gib", "1.04858e+06")),
        (["audit", str(small / "ck"), "--usable-gib", "80", "--tp", "1000000000000"], ("--tp", "4,096")),
        (["memory-math", "--params", "1e308"], ("--params", "1e+15")),
        (["memory-math", "--params", "0.5"], ("--params", "from 1")),
        (["bench", "--url", closed, "--regime", "short", "--streams", "1000000000", "--out", str(tmp_path)],
         ("--streams", "10,000")),
        (["bench", "--url", closed, "--regime", "short", "--output-tokens", "1000000000000"],
         ("--output-tokens", "10,000,000")),
        (["quality", "run", "--endpoint", closed, "--max-tokens", "1000000000000", "--data-dir", str(tmp_path)],
         ("--max-tokens", "10,000,000")),
        (["quality", "run", "--endpoint", closed, "--timeout", "1e308"], ("--timeout",)),
        (["serve", "--stack", "x.yaml", "--ready-timeout", "1e308"], ("--ready-timeout",)),
        (["model", "tiny", "--out", str(tmp_path / "m"), "--config", str(tmp_path / "m.yaml")],
         ("m.yaml", "250,000,000")),
    ]
    _assert_clear(_batch([c for c, _ in cases], tmp_path), [w for _, w in cases])
    assert not (tmp_path / "m").exists()


def test_a_header_nested_deeper_than_any_header_is_refused_without_recursion(tmp_path):
    depth = 50_000
    header = b'{"x": ' + b"[" * depth + b"]" * depth + b"}"
    f = tmp_path / "deep.safetensors"
    f.write_bytes(len(header).to_bytes(8, "little") + header)
    (r,) = _batch([["audit", str(f), "--usable-gib", "80", "--tp", "1"]], tmp_path)
    assert r["rc"] == 2 and "deep.safetensors" in r["err"] and "nests more than 3 levels" in r["err"]


def test_yaml_with_a_key_twice_is_refused_naming_the_key_and_lines():
    with pytest.raises(InputError, match=r"key 'experiments' appears twice \(lines 1 and 3\)"):
        inputs.parse_yaml("experiments: []\nname: x\nexperiments: []\n", "c.yaml", "campaign file")
    with pytest.raises(InputError, match="key 'x' appears twice"):
        inputs.parse_yaml("a: {x: 1, x: 2}\n", "c.yaml", "campaign file")
    assert inputs.parse_yaml("x: &a {k: 1}\ny:\n  <<: *a\n  k: 2\n", "c.yaml", "f") == {"x": {"k": 1}, "y": {"k": 2}}


def _stack(tmp_path: Path, name: str, **changes) -> str:
    f = fake_stack(tmp_path / name)
    spec = yaml.safe_load(f.read_text())
    for key, value in changes.items():
        *parents, last = key.split(".")
        node = spec
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = {**node[last], **value} if isinstance(value, dict) and isinstance(node.get(last), dict) else value
    f.write_text(yaml.safe_dump(spec))
    return str(f)


def test_stack_check_holds_the_stack_against_what_it_names(tmp_path):
    for n in "abcdefgh":
        (tmp_path / n).mkdir()
    cases = [
        (_stack(tmp_path, "a", python="/bin/false"), ("python /bin/false", "not a Python interpreter")),
        (_stack(tmp_path, "b", **{"server.env": {"X": "2\x00"}}), ("X's value holds a NUL byte",)),
        (_stack(tmp_path, "c", **{"model.path": "../../../../../etc"}), ("model.path", "climbs out")),
        (_stack(tmp_path, "d", **{"model.served_name": ""}), ("served_name",)),
        (_stack(tmp_path, "e", **{"server.module": "not a module!"}), ("server.module", "not a module name")),
        (_stack(tmp_path, "f", **{"server.module": "no_such_module_xyz"}), ("no_such_module_xyz", "not installed")),
        (_stack(tmp_path, "g", **{"server.ready_timeout_s": 1e308}), ("ready_timeout_s", "604800")),
        (_stack(tmp_path, "h", **{"server.probe.timeout_s": 1e308}), ("probe.timeout_s",)),
    ]
    _assert_clear(_batch([["stack", "check", f] for f, _ in cases], tmp_path), [w for _, w in cases])


def _campaign(tmp_path: Path, name: str, context: dict, quality: dict, audit: dict | None = None) -> str:
    """A campaign of three experiments on the embedded stack (its max_model_len is 8192)."""
    spec = {"name": "hostile", "stack": "configs/stacks/embedded.yaml", "experiments": [
        {"experiment": "context", "notebook": "notebooks/context.ipynb", "parameters": context},
        {"experiment": "audit", "notebook": "notebooks/audit.ipynb", "needs_server": False,
         "parameters": {"usable_gib": 95.6, "hbm_gbps": 4800.0, "link_gbps": 63.0, **(audit or {})}},
        {"experiment": "quality", "notebook": "notebooks/quality.ipynb", "needs_server": False,
         "parameters": quality}]}
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(spec, sort_keys=False))
    return str(f)


def test_campaign_check_holds_parameters_against_the_stack_the_model_and_the_campaign(tmp_path):
    ctx = {"context_lengths": [256, 1024], "output_tokens": 16, "repeats": 1}
    cmp = {"compare_runs": {"reference": "context", "local": "audit"}}
    (tmp_path / "configs").mkdir()
    cases = [
        (_campaign(tmp_path, "long", {**ctx, "context_lengths": [256, 100_000]}, cmp),
         ("context", "100,016 tokens", "max_model_len 8,192")),
        (_campaign(tmp_path, "bool", {**ctx, "repeats": True}, cmp), ("repeats", "valid integer")),
        (_campaign(tmp_path, "huge", {**ctx, "output_tokens": 10**26}, cmp), ("output_tokens", "10000000")),
        (_campaign(tmp_path, "neg", ctx, {"max_tokens": {"gsm8k": -32}}), ("max_tokens",)),
        (_campaign(tmp_path, "self", ctx, {"compare_runs": {"reference": "context", "local": "context"}}),
         ("compare_runs compares a run with itself",)),
        (_campaign(tmp_path, "nowhere", ctx, {"compare_runs": {"reference": "context", "local": "nowhere_xyz"}}),
         ("reads the runs of nowhere_xyz", "no experiment of this campaign")),
        (_campaign(tmp_path, "tiny", ctx, cmp, {"tiny_model_dir": "configs"}),
         ("tiny_model_dir configs is a directory of another kind",)),
    ]
    dup = tmp_path / "dup.yaml"
    dup.write_text(Path(cases[0][0]).read_text() + "experiments: []\n")
    cases.append((str(dup), ("key 'experiments' appears twice",)))
    results = _batch([["campaign", "check", f] for f, _ in cases]
                     + [["campaign", "run", cases[1][0], "--only", ",,", "--url", "http://127.0.0.1:9"]], ROOT)
    _assert_clear(results, [w for _, w in cases] + [("--only ',,' names no experiment",)])


def test_a_path_of_the_wrong_kind_is_named_for_what_it_is(small, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(ROOT / "configs")
    cases = [
        (["stack", "check", str(tmp_path / "link")], ("is a symbolic link to a directory",)),
        (["stack", "check", str(tmp_path / "fifo")], ("is a named pipe (FIFO)",)),
        (["stack", "check", "/dev/zero"], ("/dev/zero", "kernel file system")),
        (["campaign", "check", str(small)], ("is a directory, not a file",)),
        (["profile", "/dev/zero", "--stream-tok-s", "40"], ("/dev/zero", "kernel file system")),
        (["profile", str(tmp_path / "fifo"), "--stream-tok-s", "40"], ("named pipe",)),
        (["plan", "check", str(tmp_path / "fifo"), str(small / "ck")], ("named pipe",)),
        (["audit", "/dev/zero", "--usable-gib", "80", "--tp", "1"], ("/dev/zero", "kernel file system")),
        (["audit", str(tmp_path / "fifo"), "--usable-gib", "80", "--tp", "1"], ("named pipe",)),
    ]
    results = _batch([c for c, _ in cases], tmp_path)
    _assert_clear(results, [w for _, w in cases])
    assert not any("does not exist" in r["err"] for r in results)


def test_the_fit_commands_hold_the_checkpoint_against_its_model(small, tmp_path):
    (tmp_path / "e.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")
    cases = [
        (["audit", str(tmp_path / "e.safetensors"), "--usable-gib", "80", "--tp", "1"], ("hold no tensor",)),
        (["audit", str(small / "ck"), "--usable-gib", "80", "--tp", "3"], ("--tp 3", "4 attention heads", "[1, 2, 4]")),
        (["plan", "make", str(small / "ck"), "--generator", "uniform", "--fraction", "0.1", "--tp", "3", "--out",
          str(tmp_path / "p.json")], ("--tp 3",)),
    ]
    _assert_clear(_batch([c for c, _ in cases], tmp_path), [w for _, w in cases])


# --- secrets ------------------------------------------------------------------------------------------------------

def test_stack_check_never_prints_a_secret(tmp_path):
    for n in "abcdef":
        (tmp_path / n).mkdir()
    refused = [_stack(tmp_path, "a", **{"server.env": {"GH_PAT": SECRET}}),
               _stack(tmp_path, "b", **{"server.args": ["--api_key", SECRET]}),
               _stack(tmp_path, "c", **{"server.args": [f"--password={SECRET}"]}),
               _stack(tmp_path, "d", **{"model.path": f"https://u:{SECRET}@host/m"})]
    masked = _stack(tmp_path, "e", **{"server.env": {"HTTPS_PROXY": f"http://u:{SECRET}@proxy:3128"}})
    results = _batch([["stack", "check", f] for f in refused] + [["stack", "check", masked],
                                                                 ["stack", "check", masked, "--json"]], tmp_path)
    for r in results:
        assert SECRET not in r["out"] + r["err"], r["argv"]
    assert [r["rc"] for r in results] == [2, 2, 2, 2, 0, 0]
    assert json.loads(results[-1]["out"])["env"]["HTTPS_PROXY"] == "http://***@proxy:3128"


def test_a_key_in_a_url_query_never_reaches_a_request_path():
    from offload_lab.cli.common import http_url
    from offload_lab.load.endpoint import Endpoint

    e = Endpoint(f"http://127.0.0.1:9/?api_key={SECRET}")
    assert e.url("/v1/models") == "http://127.0.0.1:9/v1/models" and SECRET not in repr(e)
    assert e.headers["Authorization"] == f"Bearer {SECRET}"
    with pytest.raises(Exception, match="query") as err:
        http_url(f"http://127.0.0.1:9/?api_key={SECRET}")
    assert SECRET not in str(err.value)


def test_a_notebook_gets_the_url_s_credentials_from_its_environment_not_its_parameters(tmp_path):
    """papermill writes parameters into the output notebook (the injected cell and its metadata): the campaign
    passes the URL redacted and the kernel finds the credentials in its environment."""
    import nbformat
    import papermill

    from offload_lab.core.redact import url_outside_parameters

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("base_url = None", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(
                    "from offload_lab.core.redact import url_with_credentials\n"
                    f"open({str(tmp_path / 'seen')!r}, 'w').write(url_with_credentials(base_url))")]
    nbformat.write(nb, tmp_path / "in.ipynb")
    url = f"http://user:{SECRET}@127.0.0.1:9"
    with url_outside_parameters(url) as shown:
        papermill.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"),
                                   parameters={"base_url": shown}, kernel_name="python3", language="python",
                                   progress_bar=False)
    assert (tmp_path / "seen").read_text() == url  # the kernel reached the server with its credentials
    assert SECRET not in (tmp_path / "out.ipynb").read_text() and "***@127.0.0.1:9" in (tmp_path / "out.ipynb").read_text()
    assert "OFFLOAD_LAB_SERVER_URL" not in os.environ


# --- tamper -------------------------------------------------------------------------------------------------------

def test_a_deleted_cited_run_fails_a_frozen_build_and_a_plain_one_says_what_it_fell_back_to(tmp_path):
    import shutil

    from offload_lab.core.errors import ClaimError
    from offload_lab.paper import build as paper
    from paper_fixtures import REPO_ROOT, make_campaign, write_context

    repo = tmp_path / "repo"
    data = make_campaign(repo / "data", experiments=("boots", "context"))
    older = write_context(data, run_id="20251231T000000Z-c00000")  # the same parameters, an older run
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "data"], check=True)
    html = {"use_quarto": False, "formats": ("html",)}  # the lock is the same without the PDF, and cheaper
    first = paper.build_paper("embedded-fixture", data, tmp_path / "out", REPO_ROOT, **html)
    cited = json.loads(first.lock.read_text())["runs"]["context"]
    assert Path(cited).name == "20260101T001000Z-c00001" and first.fallbacks == []
    shutil.rmtree(cited)
    with pytest.raises(ClaimError, match=r"(?s)--frozen.*context: the locked run .*c00001 is gone.*c00000"):
        paper.build_paper("embedded-fixture", data, tmp_path / "out", REPO_ROOT, frozen=True, **html)
    with pytest.raises(ClaimError, match=r"committed but gone from the working tree"):  # no lock: git says it
        paper.build_paper("embedded-fixture", data, tmp_path / "fresh", REPO_ROOT, frozen=True, **html)
    plain = paper.build_paper("embedded-fixture", data, tmp_path / "out", REPO_ROOT, **html)
    assert any("c00001 is gone" in f and older.name in f for f in plain.fallbacks)
    assert json.loads(plain.lock.read_text())["runs"]["context"] == str(older)
