"""Plans for real engines and bytes per format: a Qwen3-MoE and a Mixtral model's plan exported in each engine
format and read back by that reader's own rule; GGUF bytes against gguf-py's (llama.cpp's) own byte shapes."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from offload_lab.cli import main as cli  # noqa: E402
from offload_lab.core.errors import InputError  # noqa: E402
from offload_lab.fit import engine_plans, formats, hfmodel, memory, vllm_names  # noqa: E402
from offload_lab.fit import plan as planmod  # noqa: E402

needs_vllm = pytest.mark.skipif(vllm_names.vllm_root() is None, reason="no vLLM source here (.venvs/server)")

SMALL = {
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(num_hidden_layers=6, hidden_size=256, num_experts=16,
                                                     moe_intermediate_size=128, num_experts_per_tok=4,
                                                     num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                                     vocab_size=512, architectures=["Qwen3MoeForCausalLM"]),
    "mixtral": lambda: transformers.MixtralConfig(num_hidden_layers=6, hidden_size=256, intermediate_size=512,
                                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                                                  architectures=["MixtralForCausalLM"]),
}


def _model(name: str, tmp_path: Path):
    path = tmp_path / f"{name}.json"
    SMALL[name]().to_json_file(str(path))
    ckpt, cls, lay = hfmodel.read_model(str(path))
    model = memory.MemoryModel(cls, memory.Parallelism(tp=1), ckpt.config)
    return path, ckpt, cls, lay, model


@needs_vllm
@pytest.mark.parametrize("name,vllm_block", [("qwen3_moe", "mlp"), ("mixtral", "block_sparse_moe")])
@pytest.mark.parametrize("fmt", engine_plans.ENGINE_FORMATS)
def test_export_each_format_and_read_it_back_with_the_readers_rule(tmp_path, name, vllm_block, fmt):
    path, ckpt, cls, lay, model = _model(name, tmp_path)
    names = engine_plans.names_for(ckpt, cls, model, lay)
    # vLLM's own names for the architecture (Mixtral's block is block_sparse_moe there, mlp in transformers 5).
    assert names.layer_names[0] == f"model.layers.{{layer}}.{vllm_block}.experts"
    mask = planmod.generate(model, "layer-order", fraction=0.5)
    plan = planmod.make_plan(model, ckpt, "layer-order", mask, [], {"fraction": 0.5})
    out = tmp_path / f"plan.{fmt}"
    engine_plans.write(plan, fmt, names, out)
    view = engine_plans.read(out, fmt, names)
    assert view.ok, view.problems
    want = {int(k): sorted(v) for k, v in plan.host_experts.items() if v}
    assert {k: v for k, v in view.host_experts.items() if v} == want
    text = out.read_text()
    if fmt == "dsv41-host-plan":
        # The patch's rule: exact key, else suffix either way; vLLM's layer_name of layer 0 finds its entry.
        raw = json.loads(text)
        assert engine_plans_lookup(raw, f"model.layers.0.{vllm_block}.experts") is not None
    if fmt == "llama-cpp-ot":
        pattern = text.split("'")[1].rpartition("=")[0]
        moved = {n for n in names.gguf_names() if re.search(pattern, n)}
        assert moved == {f"blk.{layer}.ffn_{p}_exps.weight" for layer in want for p in ("gate", "up", "down")}
        assert not re.search(pattern, "blk.0.ffn_down_shexp.weight") and not re.search(pattern, "blk.10.attn_q.weight")
    if fmt == "vllm-cpu-offload":
        assert "--cpu-offload-params experts" in text


def engine_plans_lookup(raw, layer_name):
    from offload_lab.fit.plan_formats import patch_lookup

    return patch_lookup(raw, layer_name)


@needs_vllm
def test_formats_that_move_whole_layers_refuse_a_partial_plan(tmp_path):
    path, ckpt, cls, lay, model = _model("qwen3_moe", tmp_path)
    names = engine_plans.names_for(ckpt, cls, model, lay)
    plan = planmod.make_plan(model, ckpt, "uniform", planmod.generate(model, "uniform", fraction=0.25), [], {})
    for fmt in ("vllm-cpu-offload", "llama-cpp-ot"):
        with pytest.raises(InputError, match="layer 0"):
            engine_plans.write(plan, fmt, names, tmp_path / "x")


@needs_vllm
def test_plan_check_refuses_deepseek_names_on_a_qwen3_model(tmp_path, capsys):
    path, ckpt, cls, lay, model = _model("qwen3_moe", tmp_path)
    plan_path = tmp_path / "p.json"
    assert cli.main(["plan", "make", str(path), "--generator", "layer-order", "--fraction", "0.5", "--tp", "1",
                     "--out", str(plan_path)]) == 0
    dsv = tmp_path / "dsv.json"
    assert cli.main(["plan", "export", str(plan_path), "--format", "dsv41-host-plan", "--out", str(dsv)]) == 0
    capsys.readouterr()
    assert cli.main(["plan", "check", str(dsv), str(path), "--format", "dsv41-host-plan"]) == 2
    err = capsys.readouterr().err
    assert "'model.layers.0.ffn.experts' is looked up by no MoE layer" in err.splitlines()[0]
    assert "model.layers.<N>.mlp.experts" in err


@pytest.mark.parametrize("ggml", ["Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ4_XS", "MXFP4"])
def test_gguf_bytes_are_gguf_pys(ggml):
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import quant_shape_to_byte_shape

    shape = (8, 512, 1024)
    want = math.prod(quant_shape_to_byte_shape(shape, GGMLQuantizationType[ggml]))
    fmt = formats.parse_format(f"gguf:{ggml}") if ggml != "MXFP4" else formats.parse_format("mxfp4")
    assert formats.weight_bytes(fmt, shape) == want


def test_q4_k_m_follows_llama_cpps_choices():
    # ggml-org/llama.cpp src/llama-quant.cpp: output -> Q6_K; ffn_down Q6_K on use_more_bits layers; 8 experts:
    # attn_v/attn_k Q8_0, attn_output Q5_K.
    t = formats.gguf_recipe_type
    assert t("Q4_K_M", {"kind": "output"}) == "Q6_K"
    assert [t("Q4_K_M", {"kind": "ffn_down", "layer": i, "layers": 32}) for i in (0, 3, 4, 5, 6, 28)] == \
        ["Q6_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q6_K"]
    assert t("Q4_K_M", {"kind": "attn_v", "n_expert": 8}) == "Q8_0"
    assert t("Q4_K_M", {"kind": "attn_output", "n_expert": 8}) == "Q5_K"
    assert t("Q4_K_M", {"kind": "other", "n_expert": 8}) == "Q4_K"


def test_format_bytes():
    f = formats.parse_format
    # fp8 with DeepSeek's 128x128 block scales (fp32)
    assert formats.weight_bytes(f("fp8"), (2048, 7168)) == 2048 * 7168 + 16 * 56 * 4
    # EXL3 at any bits: trellis plus fp16 suh/svh (the anchor's 3*H*I*bpw/8 + 3*(H+I)*2 per expert)
    assert formats.weight_bytes(f("exl3:2.5"), (2304, 5120)) == math.ceil(2304 * 5120 * 2.5 / 8) + (2304 + 5120) * 2
    # int4 AWQ, group 128: packed weights, fp16 scales, 4-bit zeros
    assert formats.weight_bytes(f("awq:128"), (4096, 4096)) == 4096 * 4096 // 2 + 32 * 4096 * 2 + 32 * 4096 // 2
    with pytest.raises(InputError, match="EXL3"):
        f("exl3:9")
    with pytest.raises(InputError, match="not one offload-lab sizes"):
        f("int3")


def test_audit_weights_per_category_from_config(tmp_path, capsys):
    path = tmp_path / "mixtral.json"
    SMALL["mixtral"]().to_json_file(str(path))
    base = ["audit", str(path), "--tp", "1", "--usable-gib", "80", "--json"]
    assert cli.main(base) == 0
    bf16 = json.loads(capsys.readouterr().out)
    assert cli.main(base + ["--format-for", "routed_expert=mxfp4"]) == 0
    mx = json.loads(capsys.readouterr().out)
    r_bf16 = bf16["categories"]["routed_expert"]["bytes"]
    assert mx["categories"]["routed_expert"]["bytes"] * 16 == r_bf16 * 4.25
    assert mx["categories"]["attention"]["bytes"] == bf16["categories"]["attention"]["bytes"]
    assert mx["params"]["total"] == bf16["params"]["total"]
