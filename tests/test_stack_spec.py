"""Stack files: typed server flags, variants, `extends`, plans, and what counts as pinned."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from offload_lab.server import stack
from offload_lab.core.errors import InputError
from offload_lab.server.spec import ServerFlags, StackOverride, deep_merge, unpinned_items

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, name: str, spec: dict) -> Path:
    f = tmp_path / name
    f.write_text(yaml.safe_dump(spec))
    return f


BASE = {"name": "base", "python": "py", "model": {"path": "m"},
        "server": {"flags": {"tensor_parallel_size": 2, "block_size": 64, "enforce_eager": False,
                             "enable_prefix_caching": False,
                             "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
                             "cpu_offload_params": ["w13_trellis", "w2_trellis"]},
                   "args": ["--enable-prompt-tokens-details"]},
        "plans": {"env": "EXL3_HOST_EXPERTS", "use": "a",
                  "files": {"a": {"path": "plans/a.json", "make": ["{model}", "--out", "{out}"]},
                            "b": {"path": "plans/b.json", "make": ["{model}", "--out", "{out}"]}}}}


def test_flags_render_as_vllm_arguments():
    args = ServerFlags(**BASE["server"]["flags"]).to_args()
    assert args == ["--tensor-parallel-size", "2", "--block-size", "64",
                    "--speculative-config", '{"method":"mtp","num_speculative_tokens":1}',
                    "--no-enable-prefix-caching", "--cpu-offload-params", "w13_trellis", "w2_trellis"]
    assert ServerFlags(enforce_eager=True).to_args() == ["--enforce-eager"]


def test_a_flag_given_twice_is_refused(tmp_path):
    spec = deep_merge(BASE, {"server": {"args": ["--block-size", "16"]}})
    with pytest.raises(InputError, match=r"--block-size.*both in server.flags and server.args"):
        stack.load_stack(_write(tmp_path, "s.yaml", spec), root=tmp_path)


def test_a_variant_changes_one_thing_and_null_removes_a_flag(tmp_path):
    st = stack.load_stack(_write(tmp_path, "s.yaml", BASE), root=tmp_path)
    v = st.with_override(StackOverride(flags={"speculative_config": None, "enforce_eager": True},
                                       env={"X": "1"}, plan="b"), "no-mtp")
    cmd = stack.server_command(v, "h", 1)
    assert "--speculative-config" not in cmd and "--enforce-eager" in cmd and "--block-size" in cmd
    assert v.plan_path == tmp_path / "plans/b.json" and stack.server_env(v)["X"] == "1"
    assert v.record()["variant"] == "no-mtp" and v.record()["override"]["plan"] == "b"
    # the original is untouched
    assert "--speculative-config" in stack.server_command(st, "h", 1)
    with pytest.raises(InputError, match="not one of plans.files"):
        st.with_override(StackOverride(plan="zzz"))
    with pytest.raises(ValueError, match="unknown server flag"):
        StackOverride(flags={"tensor_parallel": 2})


def test_extends_merges_mappings_and_replaces_lists(tmp_path):
    _write(tmp_path, "base.yaml", BASE)
    child = {"name": "child", "extends": "base.yaml", "server": {"flags": {"block_size": 128}, "args": []},
             "plans": {"use": None}}
    st = stack.load_stack(_write(tmp_path, "child.yaml", child), root=tmp_path)
    assert st.spec.name == "child" and st.spec.python == "py"
    assert st.spec.server.flags.block_size == 128 and st.spec.server.flags.tensor_parallel_size == 2
    assert st.spec.server.args == [] and st.plan_path is None and set(st.spec.plans.files) == {"a", "b"}
    assert st.record()["extends"]["file"] == str(tmp_path / "base.yaml")
    _write(tmp_path, "loop.yaml", {"name": "l", "extends": "loop.yaml"})
    with pytest.raises(InputError, match="circle"):
        stack.load_stack(tmp_path / "loop.yaml", root=tmp_path)


def test_what_counts_as_unpinned(tmp_path):
    spec = deep_merge(BASE, {
        "parts": [
            {"name": "ok", "source": {"kind": "pypi", "package": "vllm", "version": "0.32.0"}},
            {"name": "range", "source": {"kind": "pypi", "package": "x", "version": ">=1"}},
            {"name": "short", "source": {"kind": "git", "repo": "r", "commit": "abc123"}},
            {"name": "full", "source": {"kind": "git", "repo": "r", "commit": "a" * 40},
             "patches": [{"file": "p.patch", "sha256": "b" * 64}]},
        ],
        "model": {"path": "m", "downloads": [{"repo": "o/n", "revision": "main"}, {"repo": "o/m", "revision": "c" * 40}]},
        "plans": {"files": {"c": {"path": "plans/c.json"}}},
    })
    st = stack.load_stack(_write(tmp_path, "s.yaml", spec), root=tmp_path)
    got = unpinned_items(st.spec)
    assert any(u.startswith("part range: version '>=1' is not exact") for u in got)
    assert any(u.startswith("part short: commit 'abc123' is not a full 40-hex sha") for u in got)
    assert any(u.startswith("patch p.patch (part full): no receipts") for u in got)
    assert any(u.startswith("model download o/n: revision 'main'") for u in got)
    assert any(u.startswith("plan c: neither made") for u in got)
    assert not any(u.startswith(("part ok", "part full:", "model download o/m", "plan a", "plan b")) for u in got)


def test_the_study_stacks_say_what_is_not_pinned():
    for name, n in (("study-pod", 5), ("study-pod-uva", 4), ("study-b300", 5)):
        st = stack.load_stack(ROOT / f"configs/stacks/{name}.yaml", root=ROOT)
        items = unpinned_items(st.spec)
        assert len(items) == n, items
        assert all("todo:" in u for u in items), items  # every gap says what is missing
        assert st.spec.price is not None and st.spec.price.source
    pod = stack.load_stack(ROOT / "configs/stacks/study-pod.yaml", root=ROOT)
    # The patch gets the plan in the format it reads, written beside offload-lab's own.
    assert stack.server_env(pod)["EXL3_HOST_EXPERTS"] == str(ROOT / "plans/study-gen30.dsv41-host-plan.json")
    assert pod.source_plan_path == ROOT / "plans/study-gen30.json" and pod.spec.plans.format == "dsv41-host-plan"
    cmd = stack.server_command(pod, "h", 1)
    for flag in ("--tensor-parallel-size", "--block-size", "--max-model-len", "--speculative-config",
                 "--gpu-memory-utilization"):
        assert flag in cmd
    uva = stack.load_stack(ROOT / "configs/stacks/study-pod-uva.yaml", root=ROOT)
    cmd = stack.server_command(uva, "h", 1)
    assert cmd[cmd.index("--offload-backend") + 1] == "uva" and "--cpu-offload-gb" in cmd
    assert uva.spec.plans is None and all(not p.patches for p in uva.spec.parts)
    b300 = stack.load_stack(ROOT / "configs/stacks/study-b300.yaml", root=ROOT)
    assert b300.plan_path is None and stack.server_env(b300)["EXL3_HOST_EXPERTS"] is None
    assert (b300.spec.price.per_hour, b300.spec.price.currency) == (15.78, "USD")
