"""`offload-lab stack install`: the dry run of the study's stacks prints every command, and a real install of a toy
stack (a local git repository, a patch, a build step) checks commits, patch sha256 and receipts, and stops on a
mismatch."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from offload_lab.server import record as install_record
from offload_lab.cli import main as cli
from offload_lab.server import install
from offload_lab.server import stack
from offload_lab.core.errors import InputError, ProducerError

ROOT = Path(__file__).resolve().parents[1]


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args], cwd=cwd,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def toy(tmp_path):
    """An upstream repository, a patch for it, and the sha256 of the patched file."""
    up = tmp_path / "upstream"
    (up / "pkg").mkdir(parents=True)
    (up / "pkg" / "mod.py").write_text("HOST_EXPERTS = None\n")
    _git(up, "init", "-q")
    _git(up, "add", ".")
    _git(up, "commit", "-q", "-m", "one")
    commit = _git(up, "rev-parse", "HEAD")
    (up / "pkg" / "mod.py").write_text("import os\nHOST_EXPERTS = os.environ.get('EXL3_HOST_EXPERTS')\n")
    patch = tmp_path / "host.patch"
    patch.write_text(_git(up, "diff") + "\n")
    patched = (up / "pkg" / "mod.py").read_bytes()
    _git(up, "checkout", "-q", "--", ".")
    return {"repo": str(up), "commit": commit, "patch": patch, "patched_sha": _sha(patched),
            "patch_sha": _sha(patch.read_bytes())}


def _toy_stack(tmp_path: Path, toy: dict, **changes) -> Path:
    part = {"name": "upstream", "source": {"kind": "git", "repo": toy["repo"], "commit": toy["commit"]},
            "patches": [{"file": str(toy["patch"]), "sha256": toy["patch_sha"],
                         "receipts": {"pkg/mod.py": toy["patched_sha"]}}],
            # The build runs in the part's tree with the environment active: record which Python it got.
            "build": ["python -c \"import sys; open('built.txt', 'w').write(sys.prefix)\""],
            "env": {"PART_FLAG": "1"}}
    part.update(changes.pop("part", {}))
    spec = {"name": "toy", "python": str(tmp_path / "venv" / "bin" / "python"),
            "install": {"venv": str(tmp_path / "venv"), "venv_args": ["--without-pip"],
                        "src_dir": str(tmp_path / "src")},
            "model": {"path": str(tmp_path / "model")}, "parts": [part], **changes}
    f = tmp_path / "toy.yaml"
    f.write_text(yaml.safe_dump(spec))
    return f


def test_a_pinned_stack_installs_and_records_its_receipts(tmp_path, toy):
    st = stack.load_stack(_toy_stack(tmp_path, toy), root=tmp_path)
    plan = install.plan_install(st)
    assert plan.unpinned == []
    record = install.run_install(plan, log=lambda s: None)
    tree = tmp_path / "src" / "toy" / "upstream"
    assert (tree / "built.txt").read_text() == str(tmp_path / "venv")
    assert record["commits"] == {"upstream": toy["commit"]}
    (p,) = record["patches"].values()
    assert p["sha256"] == toy["patch_sha"] and p["receipts"] == {"pkg/mod.py": toy["patched_sha"]}
    assert install_record.read_record(st.python)["commits"]["upstream"] == toy["commit"]
    # Installing again from the same file gives the same tree (the clone is reset, the patch reapplied).
    install.run_install(install.plan_install(st), log=lambda s: None)
    assert _sha((tree / "pkg" / "mod.py").read_bytes()) == toy["patched_sha"]


def test_a_receipt_mismatch_stops_the_install_before_the_build(tmp_path, toy):
    st = stack.load_stack(_toy_stack(tmp_path, toy, part={"patches": [
        {"file": str(toy["patch"]), "sha256": toy["patch_sha"], "receipts": {"pkg/mod.py": "0" * 64}}]}),
        root=tmp_path)
    with pytest.raises(ProducerError, match=r"RECEIPT MISMATCH[\s\S]*pkg/mod.py: " + toy["patched_sha"]):
        install.run_install(install.plan_install(st), log=lambda s: None)
    assert not (tmp_path / "src" / "toy" / "upstream" / "built.txt").exists()


def test_a_changed_patch_file_stops_the_install(tmp_path, toy):
    st = stack.load_stack(_toy_stack(tmp_path, toy), root=tmp_path)
    toy["patch"].write_text(toy["patch"].read_text() + "\n")
    with pytest.raises(ProducerError, match="host.patch: sha256 .* differs"):
        install.run_install(install.plan_install(st), log=lambda s: None)


def test_an_unpinned_stack_is_refused_unless_allowed(tmp_path, toy):
    short = toy["commit"][:8]
    st = stack.load_stack(_toy_stack(tmp_path, toy, part={
        "source": {"kind": "git", "repo": toy["repo"], "commit": short},
        "patches": [{"file": str(toy["patch"]), "pinned": False, "todo": "receipts unknown"}]}), root=tmp_path)
    plan = install.plan_install(st)
    assert len(plan.unpinned) == 2
    with pytest.raises(InputError, match="refuses to run without --allow-unpinned"):
        install.run_install(plan, log=lambda s: None)
    assert not (tmp_path / "venv").exists()
    record = install.run_install(plan, allow_unpinned=True, log=lambda s: None)
    # The short commit is resolved, and the observed hashes are there to pin the stack file with.
    assert record["commits"]["upstream"] == toy["commit"]
    (p,) = record["patches"].values()
    assert p["receipts"] == {"pkg/mod.py": toy["patched_sha"]} and p["sha256"] == toy["patch_sha"]


def test_pinned_true_must_be_true(tmp_path, toy):
    with pytest.raises(InputError, match="pinned: true but its pin is incomplete"):
        stack.load_stack(_toy_stack(tmp_path, toy, part={
            "source": {"kind": "git", "repo": toy["repo"], "commit": "abc123"}, "pinned": True}), root=tmp_path)
    with pytest.raises(InputError, match="add a todo"):
        stack.load_stack(_toy_stack(tmp_path, toy, part={"pinned": False}), root=tmp_path)


def test_dry_run_of_the_study_stack_prints_every_command(capsys):
    rc = cli.main(["stack", "install", str(ROOT / "configs/stacks/study-pod.yaml"), "--dry-run", "--no-checks"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    venv = ROOT / ".venvs/study-pod"
    src = ROOT / ".stack-src/study-pod"
    expected = [
        "nvidia-smi topo -m",
        f"python3 -m venv {venv}",
        f"TORCH_CUDA_ARCH_LIST=12.0 {venv}/bin/python -m pip install vllm==0.32.0",
        f"git clone --no-checkout https://github.com/turboderp-org/exllamav3 {src}/exllamav3",
        f"git -C {src}/exllamav3 checkout --force --detach 5be88657",
        f"git clone --no-checkout https://github.com/0xSero/dsv41-flash-offload {src}/dsv41-flash-offload",
        f"git -C {src}/dsv41-flash-offload checkout --force --detach 07859d517841a06a5f7e24d2153dbffeb41e0fef",
        f"git -C {src}/vllm-exl3 checkout --force --detach d3cfd394",
        f"git -C {src}/vllm-exl3 apply -p1 --whitespace=nowarn {src}/dsv41-flash-offload/patches/vllm-exl3-host-dma.patch",
    ]
    for e in expected:
        assert e in lines, e
    # Build commands run in the part's tree with the environment active and the part's variables set.
    assert any(ln.startswith(f"cd {src}/vllm-exl3 && VIRTUAL_ENV={venv} PATH=\"{venv}/bin:$PATH\" "
                             "TORCH_CUDA_ARCH_LIST=12.0 VLLM_EXL3_NO_CUDA=1 python -m pip install") for ln in lines)
    assert any("hf download Mia-AiLab/DeepSeek-V4.1-Flash-EXL3-3.0bpw" in ln and
               "--revision c5534b90602b4090980a1c3ded1eb3b4d99a38d5" in ln for ln in lines)
    assert any("hf download deepseek-ai/DeepSeek-V4.1-Flash" in ln and "--include model-00047-of-00048.safetensors"
               in ln for ln in lines)
    assert any("-m offload_lab.cli plan make" in ln and "--fraction 0.3" in ln and
               str(ROOT / "plans/study-gen30.json") in ln for ln in lines)
    assert f"git -C {src}/vllm-exl3 rev-parse HEAD | grep -q '^d3cfd394'" in lines
    # What is not pinned is said first, and the dry run says the real install would stop.
    assert "# UNPINNED (5): a real install stops here unless --allow-unpinned is given" in lines
    assert any("no sha256 and no receipts" in ln for ln in lines)
    # A dry run runs nothing.
    assert not venv.exists()


def test_dry_run_of_a_pinned_stack_prints_receipt_checks(tmp_path, toy, capsys):
    f = _toy_stack(tmp_path, toy)
    assert cli.main(["stack", "install", str(f), "--dry-run"]) == 0
    out = capsys.readouterr().out
    tree = tmp_path / "src" / "toy" / "upstream"
    assert f"echo {toy['patched_sha']}'  '{tree}/pkg/mod.py | sha256sum -c -" in out
    assert f"echo {toy['patch_sha']}'  '{toy['patch']} | sha256sum -c -" in out
    assert "UNPINNED" not in out


def test_real_install_of_an_unpinned_stack_exits_2_and_names_what_is_missing(capsys):
    rc = cli.main(["stack", "install", str(ROOT / "configs/stacks/study-pod.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and "--allow-unpinned" in err and "part exllamav3: commit '5be88657'" in err


def test_every_stack_file_loads_and_the_embedded_one_is_unchanged():
    for f in sorted((ROOT / "configs/stacks").glob("*.yaml")):
        stack.load_stack(f, root=ROOT)
    st = stack.load_stack(ROOT / "configs/stacks/embedded.yaml", root=ROOT)
    assert stack.server_command(st, "127.0.0.1", 8000)[3:] == [
        "--model", str(ROOT / "models/tiny-qwen3-moe"), "--host", "127.0.0.1", "--port", "8000",
        "--served-model-name", "tiny-qwen3-moe", "--max-model-len", "8192", "--dtype", "bfloat16",
        "--enable-prefix-caching", "--enable-prompt-tokens-details"]
    assert stack.unpinned_items(st.spec) == [] and st.spec.parts == []
    with pytest.raises(InputError, match="no install section"):
        install.plan_install(st)
    assert sys.executable  # the lab interpreter runs `plan make` on the pod
