"""The plan reaches the stack's offload part in the format it reads: the dsv41 patch's host plan written from a plan
made on the study model's layout and read back as the patch would, `stack check` refusing a plan in the wrong format
or a stack that hands the patch a format it does not read, the install writing both files, and the dry run's checks
of every file the install would use."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from offload_lab.cli import main as cli
from offload_lab.core.errors import InputError
from offload_lab.fit import checkpoint, memory, plan_formats, synthetic
from offload_lab.fit import plan as planmod
from offload_lab.server import install, install_checks, stack

ROOT = Path(__file__).resolve().parents[1]
PATCH = "dsv41-flash-offload:patches/vllm-exl3-host-dma.patch"


@pytest.fixture(scope="module")
def study_layout(tmp_path_factory):
    """The header-only synthetic checkpoint of the study's model (40 MoE layers x 384 experts) and its gen30 plan."""
    out = tmp_path_factory.mktemp("synth") / "ckpt"
    synthetic.write_checkpoint(synthetic.load_spec(ROOT / "configs/checkpoints/synthetic-dsv41-flash-exl3.yaml"), out)
    ckpt = checkpoint.read_checkpoint(out)
    cls = checkpoint.classify(ckpt)
    model = memory.MemoryModel(cls, memory.Parallelism(tp=2), ckpt.config)
    mask = planmod.generate(model, "uniform", fraction=0.3)
    plan = planmod.make_plan(model, ckpt, "uniform", mask, [], {"fraction": 0.3})
    return {"dir": out, "cls": cls, "plan": plan}


def _small_spec(tmp_path: Path) -> Path:
    """A 3-layer, 8-expert DeepSeek-V4-named layout: fast to write and to make plans from."""
    spec = {"name": "small-dsv4", "naming": "deepseek_v4", "num_hidden_layers": 3, "num_experts": 8,
            "num_experts_per_tok": 2, "hidden_size": 64, "moe_intermediate_size": 32, "vocab_size": 64,
            "attention": "mla", "num_attention_heads": 2, "q_lora_rank": 32, "kv_lora_rank": 32,
            "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 16}
    f = tmp_path / "small.yaml"
    f.write_text(yaml.safe_dump(spec))
    return f


def test_a_generated_plan_reaches_the_patch_with_every_layer_found(tmp_path, study_layout):
    plan, cls = study_layout["plan"], study_layout["cls"]
    layers = cls.moe_layers()
    assert layers == list(range(40))
    served = tmp_path / "host-plan.json"
    assert plan_formats.write_as(plan, "dsv41-host-plan", served) == [
        "checkpoint (metadata)", "generator (metadata)"]
    raw = json.loads(served.read_text())
    assert sorted(raw) == sorted(f"model.layers.{n}.ffn.experts" for n in layers)  # exactly the pack's key names
    view = plan_formats.read_as(served, "dsv41-host-plan", layers, 384, expected=plan)
    assert view.ok, view.problems
    assert view.layers_found == layers  # every MoE layer's lookup finds its key
    assert {str(k): v for k, v in view.host_experts.items()} == plan.host_experts
    assert sum(len(v) for v in view.host_experts.values()) == 4608  # 30% of 15,360, as made
    # The patch's suffix match: a vLLM layer name with a prefix finds the same key.
    assert plan_formats.patch_lookup(raw, "language_model.model.layers.7.ffn.experts") == "model.layers.7.ffn.experts"
    # The CLI says the same, against the checkpoint's headers.
    own = tmp_path / "gen30.json"
    planmod.write_plan(plan, own)
    assert cli.main(["plan", "check", str(served), str(study_layout["dir"]), "--format", "dsv41-host-plan",
                     "--written-from", str(own)]) == 0


def test_an_offload_lab_plan_handed_to_the_patch_finds_no_layer(tmp_path, study_layout):
    own = tmp_path / "gen30.json"
    planmod.write_plan(study_layout["plan"], own)
    view = plan_formats.read_as(own, "dsv41-host-plan", list(range(40)), 384)
    assert not view.ok and view.layers_found == [] and view.host_experts == {}
    assert "this is an offload-lab plan" in view.problems[0] and "keep every expert on the GPU" in view.problems[0]
    assert "plan export" in view.problems[0]


@pytest.mark.parametrize("bad, message", [
    ({"ffn.experts": [1]}, r"matched by 40 layers' lookups"),  # a suffix every layer name ends with
    ({"model.layers.50.ffn.experts": [3]}, r"looked up by no MoE layer"),
    ({"model.layers.1.mlp.experts": [3]}, r"looked up by no MoE layer"),
    ({"model.layers.1.ffn.experts": "123"}, r"expected a list of expert ids, got str"),
    ({"model.layers.1.ffn.experts": ["1"]}, r"not JSON integers \(e.g. '1'\)"),
    ({"model.layers.1.ffn.experts": [1.0]}, r"not JSON integers"),
    ({"model.layers.1.ffn.experts": [True]}, r"not JSON integers"),
    ({"model.layers.1.ffn.experts": [384]}, r"expert id 384 is out of range"),
    ({"model.layers.1.ffn.experts": [-1]}, r"expert id -1 is out of range"),
    ({"model.layers.1.ffn.experts": [3, 3]}, r"lists expert 3 twice"),
    ([["model.layers.1.ffn.experts", [1]]], r"a host plan is a JSON object"),
])
def test_the_reader_refuses_what_the_patch_would_misread(bad, message):
    view = plan_formats.read_dsv41(bad, "x.json", list(range(40)), 384)
    assert not view.ok
    assert any(__import__("re").search(message, p) for p in view.problems), view.problems


def test_the_patch_lookup_is_the_patchs():
    # exact first; else the first key, in file order, that ends with the name or that the name ends with
    mapping = {"language_model.model.layers.3.ffn.experts": [1], "model.layers.3.ffn.experts": [2]}
    assert plan_formats.patch_lookup(mapping, "model.layers.3.ffn.experts") == "model.layers.3.ffn.experts"
    assert plan_formats.patch_lookup(mapping, "layers.3.ffn.experts") == "language_model.model.layers.3.ffn.experts"
    # a null entry is no entry: the suffix search runs, in file order (and finds the null key itself if it is first)
    assert plan_formats.patch_lookup({"x.model.layers.3.ffn.experts": [4], "model.layers.3.ffn.experts": None},
                                     "model.layers.3.ffn.experts") == "x.model.layers.3.ffn.experts"
    assert plan_formats.patch_lookup({"model.layers.3.ffn.experts": None, "x.model.layers.3.ffn.experts": [4]},
                                     "model.layers.3.ffn.experts") == "model.layers.3.ffn.experts"
    # layer 13's name does not end with layer 3's key
    assert plan_formats.patch_lookup({"model.layers.3.ffn.experts": [1]}, "model.layers.13.ffn.experts") is None
    # an empty list is found (and means no host experts), so no suffix match is tried
    view = plan_formats.read_dsv41({"model.layers.0.ffn.experts": [], "model.layers.1.ffn.experts": [5]}, "x",
                                   [0, 1], 8)
    assert view.ok and view.layers_found == [0, 1] and view.host_experts == {0: [], 1: [5]}


# --- stack files -----------------------------------------------------------------------------------------------

def _stack(tmp_path: Path, plans: dict, parts: bool = True, **extra) -> Path:
    # A server module this interpreter has (stack check runs it and finds the module).
    spec: dict = {"name": "toy", "python": sys.executable, "model": {"path": str(tmp_path / "model")},
                  "server": {"module": "json.tool", "flags": {"quantization": "exl3"}},
                  "plans": {"env": "EXL3_HOST_EXPERTS", "use": "p", **plans}, **extra}
    if parts:
        spec["parts"] = [
            {"name": "dsv41-flash-offload", "install": False,
             "source": {"kind": "git", "repo": "https://example.org/d", "commit": "a" * 40}},
            {"name": "vllm-exl3", "source": {"kind": "git", "repo": "https://example.org/v", "commit": "b" * 40},
             "patches": [{"from_part": "dsv41-flash-offload", "path": "patches/vllm-exl3-host-dma.patch",
                          "pinned": False, "todo": "receipts unknown"}]}]
    f = tmp_path / "toy.yaml"
    f.write_text(yaml.safe_dump(spec))
    return f


def _dsv41_plans(tmp_path: Path, **over) -> dict:
    return {"format": "dsv41-host-plan", "read_by": {"part": "vllm-exl3", "patch": PATCH},
            "files": {"p": {"path": str(tmp_path / "p.json"), "make": ["{model}", "--out", "{out}"]}}, **over}


@pytest.mark.parametrize("plans, message", [
    ({"format": "offload-lab"}, r"plans.format is 'offload-lab', but .*vllm-exl3-host-dma.patch reads "
                                r"dsv41-host-plan.*set plans.format: dsv41-host-plan"),
    ({"env": "HOST_PLAN"}, r"reads the plan's path from EXL3_HOST_EXPERTS; set plans.env: EXL3_HOST_EXPERTS"),
    ({"read_by": {"part": "vllm", "patch": PATCH}}, r"plans.read_by.part 'vllm' is not a part"),
    ({"read_by": {"part": "vllm-exl3", "patch": "other.patch"}}, r"is not a patch of part vllm-exl3"),
])
def test_a_stack_that_hands_the_patch_a_format_it_does_not_read_is_refused(tmp_path, plans, message, capsys):
    f = _stack(tmp_path, _dsv41_plans(tmp_path, **plans))
    with pytest.raises(InputError, match=message):
        stack.load_stack(f, root=tmp_path)
    assert cli.main(["stack", "check", str(f)]) == 2
    assert str(f) in capsys.readouterr().err


def test_the_plan_variable_is_set_by_the_stack_only(tmp_path):
    f = _stack(tmp_path, _dsv41_plans(tmp_path), server={"env": {"EXL3_HOST_EXPERTS": "/elsewhere.json"}})
    with pytest.raises(InputError, match=r"server.env sets EXL3_HOST_EXPERTS"):
        stack.load_stack(f, root=tmp_path)


def test_stack_check_shows_the_format_and_refuses_a_plan_in_the_wrong_one(tmp_path, capsys):
    f = _stack(tmp_path, _dsv41_plans(tmp_path))
    own = planmod.PlanFile(format="offload-lab-plan", version=1, host_experts={"0": [1, 2], "2": [7]},
                           checkpoint=planmod.CheckpointRef(moe_layers=[0, 1, 2], experts_per_layer=8))
    planmod.write_plan(own, tmp_path / "p.json")
    served = tmp_path / "p.dsv41-host-plan.json"
    # Not made yet: the check says so and what the patch will get.
    assert cli.main(["stack", "check", str(f)]) == 0
    out = capsys.readouterr().out
    assert ("plan format the offload part gets: dsv41-host-plan, read by patch " + PATCH + " of part vllm-exl3, "
            "path in $EXL3_HOST_EXPERTS") in out
    assert f"env EXL3_HOST_EXPERTS={served}" in out and "not made yet" in out
    # The offload-lab plan copied to where the patch reads: refused, naming the file and what to do.
    served.write_text((tmp_path / "p.json").read_text())
    assert cli.main(["stack", "check", str(f)]) == 2
    err = capsys.readouterr().err
    assert str(served) in err and "this is an offload-lab plan" in err and f"stack install {f}" in err
    # Written as the patch reads it: accepted, checked against the layers the plan was made for.
    plan_formats.write_as(own, "dsv41-host-plan", served)
    assert cli.main(["stack", "check", str(f), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["plan_format"]
    assert info["format"] == "dsv41-host-plan" and info["env"] == "EXL3_HOST_EXPERTS" and info["reader_known"]
    row = info["files"]["p"]
    assert row["ok"] and row["layers_found"] == 2 and row["host_experts"] == 3
    assert row["checked_against"] == "the plan's checkpoint"
    # A file that no longer matches its plan is refused too.
    served.write_text(json.dumps({"model.layers.0.ffn.experts": [1]}))
    assert cli.main(["stack", "check", str(f)]) == 2
    assert "layer 0: the offload part would keep 1 expert(s) on host, the plan says 2" in capsys.readouterr().err


# --- install and dry run ---------------------------------------------------------------------------------------

def test_install_writes_the_plan_in_the_patchs_format_and_records_both(tmp_path):
    model = tmp_path / "model"
    synthetic.write_checkpoint(synthetic.load_spec(_small_spec(tmp_path)), model)
    f = _stack(tmp_path, {"format": "dsv41-host-plan", "files": {"p": {
        "path": str(tmp_path / "plans" / "p.json"),
        "make": ["{model}", "--generator", "uniform", "--fraction", "0.5", "--out", "{out}"]}}}, parts=False,
        install={"venv": str(tmp_path / "venv"), "venv_args": ["--without-pip"]})
    st = stack.load_stack(f, root=tmp_path)
    record = install.run_install(install.plan_install(st, skip_model=True), log=lambda s: None)
    rec = record["plans"]["p"]
    served = tmp_path / "plans" / "p.dsv41-host-plan.json"
    assert rec["path"] == str(tmp_path / "plans" / "p.json") and rec["served"]["path"] == str(served)
    assert rec["sha256"] == install.sha256_text(tmp_path / "plans" / "p.json")
    assert rec["served"]["sha256"] == install.sha256_text(served) and rec["served"]["format"] == "dsv41-host-plan"
    assert sorted(json.loads(served.read_text())) == [f"model.layers.{n}.ffn.experts" for n in range(3)]
    assert stack.server_env(st)["EXL3_HOST_EXPERTS"] == str(served)
    boot_plan = stack.ensure_plan(st)
    assert boot_plan["format"] == "dsv41-host-plan" and boot_plan["source"]["sha256"] == rec["sha256"]


def test_dry_run_checks_find_short_commits_missing_receipts_and_bad_plans(tmp_path):
    spec_file = _small_spec(tmp_path)
    f = _stack(tmp_path, {"format": "dsv41-host-plan", "read_by": {"part": "vllm-exl3", "patch": PATCH},
                          "dry_run_checkpoint": str(spec_file), "files": {
                              "p": {"path": "plans/p.json", "make": ["{model}", "--generator", "uniform",
                                                                     "--fraction", "0.5", "--out", "{out}"]},
                              "q": {"path": "plans/q.json", "make": ["{model}", "--generator", "uniform",
                                                                     "--fraction", "2", "--out", "{out}"]}}},
               model={"path": str(tmp_path / "model"), "downloads": [{"repo": "o/m", "revision": "main"}]})
    data = yaml.safe_load(f.read_text())
    data["parts"][1]["source"]["commit"] = "b" * 8  # short, and not declared unpinned
    f.write_text(yaml.safe_dump(data))
    st = stack.load_stack(f, root=tmp_path)
    problems = install_checks.dry_run_checks(st, tmp_path / "work")
    by_item = {p.item: p for p in problems}
    short = by_item["part vllm-exl3"]
    assert short.level == "error" and "commit 'bbbbbbbb' is not a full 40-hex commit" in short.message
    assert "write the full commit" in short.fix
    patch = by_item[f"patch {PATCH} (part vllm-exl3)"]
    assert patch.level == "unpinned" and "no sha256 and no receipts" in patch.message and "receipts unknown" in patch.fix
    rev = by_item["model download o/m"]
    assert rev.level == "error" and "revision 'main' is not a full 40-hex commit" in rev.message
    bad_plan = by_item["plan q"]
    assert bad_plan.level == "error" and "`plan make` fails" in bad_plan.message and "--fraction" in bad_plan.message
    assert "plan p" not in by_item  # made from the synthetic layout, written as the patch reads it, read back ok
    assert not (tmp_path / "plans").exists()  # the dry run writes only into its scratch directory
    assert (tmp_path / "work" / "plans" / "p.dsv41-host-plan.json").is_file()
    assert str(short).startswith("error: part vllm-exl3: commit 'bbbbbbbb'")


def test_stack_check_refuses_a_reader_that_cannot_load_the_stacks_weights(tmp_path, capsys):
    """The dsv41 patch's host DMA lives in vllm-exl3's EXL3 MoE layers: a stack serving bf16 weights never reads the
    plan, so stack check refuses it, naming both."""
    f = _stack(tmp_path, _dsv41_plans(tmp_path), server={"module": "json.tool"})
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "qwen3_moe", "torch_dtype": "bfloat16"}))
    assert cli.main(["stack", "check", str(f)]) == 2
    err = capsys.readouterr().err
    assert "loads only exl3 weights and the stack serves bfloat16 weights" in err
