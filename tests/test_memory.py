"""Per-GPU bytes under TP and EP with and without a plan, KV bytes per token, and the memory-math calculator."""

from __future__ import annotations

import pytest
from fit_helpers import write_named

from offload_lab.fit import checkpoint
from offload_lab.fit import memory
from offload_lab.core.errors import InputError
from offload_lab.fit.memory import GiB, HostSet, Parallelism

CONFIG = {"model_type": "qwen3_moe", "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
          "head_dim": 8, "hidden_size": 16, "num_experts": 4, "num_experts_per_tok": 2, "torch_dtype": "float32"}
EXPERT = 3 * 8 * 16 * 4  # gate, up, down of 8 x 16 in F32


def _ckpt(tmp_path):
    specs = [("model.embed_tokens.weight", "F32", (64, 16)), ("lm_head.weight", "F32", (64, 16)),
             ("model.norm.weight", "F32", (16,)),
             ("model.layers.0.self_attn.q_proj.weight", "F32", (16, 16)),
             ("model.layers.0.self_attn.k_proj.weight", "F32", (8, 16)),
             ("model.layers.0.self_attn.q_norm.weight", "F32", (8,)),
             ("model.layers.0.mlp.gate.weight", "F32", (4, 16))]
    for e in range(4):
        for proj, shape in (("gate_proj", (8, 16)), ("up_proj", (8, 16)), ("down_proj", (16, 8))):
            specs.append((f"model.layers.0.mlp.experts.{e}.{proj}.weight", "F32", shape))
    ckpt = checkpoint.read_checkpoint(write_named(tmp_path / "c", specs, CONFIG))
    return ckpt, checkpoint.classify(ckpt)


def test_tensor_parallel_splits_what_vllm_splits(tmp_path):
    ckpt, cls = _ckpt(tmp_path)
    one = memory.per_gpu(cls, Parallelism(tp=1))
    assert one.per_gpu_bytes == ckpt.total_bytes
    two = memory.per_gpu(cls, Parallelism(tp=2), usable_gib=1.0, config=CONFIG)
    embed = lm_head = 64 * 16 * 4
    expected = (embed / 2 + lm_head / 2          # vocabulary-sharded
                + 16 * 4                         # final norm: replicated
                + 16 * 16 * 4 / 2                # q_proj: column-sharded
                + 8 * 16 * 4                     # k_proj: one KV head, so each of 2 ranks holds it whole
                + 8 * 4                          # q_norm: replicated
                + 4 * 16 * 4                     # router: replicated
                + 4 * EXPERT / 2)                # routed experts: intermediate dimension split
    assert [r.device_total for r in two.ranks] == [expected, expected]
    assert two.headroom_bytes == GiB - expected and two.fits is True


def test_expert_parallel_places_whole_experts_and_plans_free_the_owner(tmp_path):
    _, cls = _ckpt(tmp_path)
    linear = memory.MemoryModel(cls, Parallelism(tp=2, ep=True))
    r0, r1 = linear.report().ranks
    assert r0.device_bytes["routed_expert"] == r1.device_bytes["routed_expert"] == 2 * EXPERT
    # Expert 0 lives on rank 0 under linear placement: moving it frees rank 0 only.
    r0, r1 = linear.report(HostSet(experts=frozenset({(0, 0)}))).ranks
    assert (r0.device_bytes["routed_expert"], r1.device_bytes["routed_expert"]) == (EXPERT, 2 * EXPERT)
    assert r0.host_bytes == {"routed_expert": EXPERT} and r1.host_bytes == {}
    rr = memory.MemoryModel(cls, Parallelism(tp=2, ep=True, placement="round_robin"))
    r0, r1 = rr.report(HostSet(experts=frozenset({(0, 1)}))).ranks  # expert 1 -> rank 1 round robin
    assert (r0.device_bytes["routed_expert"], r1.device_bytes["routed_expert"]) == (2 * EXPERT, EXPERT)


def test_plan_moves_experts_and_named_tensors_off_every_tp_rank(tmp_path):
    _, cls = _ckpt(tmp_path)
    model = memory.MemoryModel(cls, Parallelism(tp=2))
    base = model.report().per_gpu_bytes
    with_plan = model.report(HostSet(experts=frozenset({(0, 0), (0, 3)}), tensors=frozenset({"lm_head.weight"})))
    assert base - with_plan.per_gpu_bytes == 2 * EXPERT / 2 + 64 * 16 * 4 / 2
    assert with_plan.ranks[0].host_bytes == {"routed_expert": EXPERT, "lm_head": 64 * 16 * 4 / 2}
    with pytest.raises(InputError, match=r"layer 0, expert 9"):
        model.report(HostSet(experts=frozenset({(0, 9)})))
    with pytest.raises(InputError, match=r"host tensor nope"):
        model.report(HostSet(tensors=frozenset({"nope"})))


def test_tp_mode_override(tmp_path):
    _, cls = _ckpt(tmp_path)
    shard = memory.per_gpu(cls, Parallelism(tp=2)).ranks[0].device_bytes["embedding"]
    repl = memory.per_gpu(cls, Parallelism(tp=2, tp_modes=memory.parse_tp_modes(["embedding=replicate"])))
    assert repl.ranks[0].device_bytes["embedding"] == 2 * shard
    with pytest.raises(InputError, match=r"--tp-mode 'embedding=half'"):
        memory.parse_tp_modes(["embedding=half"])


def test_kv_bytes_per_token_mla_and_gqa():
    mla = {"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_attention_heads": 128,
           "torch_dtype": "bfloat16"}
    for tp in (1, 2, 8):  # the MLA latent is replicated on every TP rank
        kv = memory.kv_cache(mla, tp)
        assert kv.kind == "mla" and kv.per_gpu_bytes == 61 * (512 + 64) * 2
    gqa = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
           "torch_dtype": "bfloat16"}
    assert memory.kv_cache(gqa, 1).per_gpu_bytes == 4 * 2 * 2 * 64 * 2
    assert memory.kv_cache(gqa, 2).per_gpu_bytes == 4 * 2 * 1 * 64 * 2
    assert memory.kv_cache(gqa, 4).per_gpu_bytes == 4 * 2 * 1 * 64 * 2  # fewer KV heads than ranks: replicated
    assert memory.kv_cache(gqa, 1, dtype_bytes=1).per_gpu_bytes == 4 * 2 * 2 * 64
    with pytest.raises(InputError, match=r"num_hidden_layers"):
        memory.kv_cache({"num_attention_heads": 2})


def test_report_counts_kv_tokens_in_the_headroom(tmp_path):
    _, cls = _ckpt(tmp_path)
    rep = memory.per_gpu(cls, Parallelism(tp=1), usable_gib=1.0, reserve_gib=0.5, config=CONFIG)
    per_token = memory.kv_cache(CONFIG, 1).per_gpu_bytes
    assert rep.kv_tokens == (GiB - rep.per_gpu_bytes - GiB // 2) // per_token
    assert rep.to_dict()["usable_gib"] == 1.0


def test_memory_math_rows():
    inputs = memory.memory_math_inputs()
    assert "transcribed from the published summary" in inputs.bits_provenance
    rows = memory.memory_math(memory.parse_count("763.2B"))
    assert [r["format"] for r in rows] == ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M", "Q2_K"]
    for r in rows:
        assert set(r) == {"format", "bits_per_weight", "weight_gb", "smallest_memory_gb", "ladder", "ladder_unit"}
        assert r["ladder"] == "offload-lab" and r["ladder_unit"] == "GiB"  # the default until the page's is in
        assert r["weight_gb"] == pytest.approx(763.2e9 * r["bits_per_weight"] / 8 / 1e9)
        size = r["smallest_memory_gb"]
        assert size * GiB >= r["weight_gb"] * 1e9
        smaller = [s for s in inputs.memory_sizes_gb if s < size]
        assert not smaller or smaller[-1] * GiB < r["weight_gb"] * 1e9
    assert memory.memory_math(1e9, ["Q4_K_M"])[0]["smallest_memory_gb"] == 8
    with pytest.raises(InputError, match=r"unknown format"):
        memory.memory_math(1e9, ["Q1"])
    assert memory.parse_count("35.4M") == pytest.approx(35.4e6) and memory.parse_count("7e11") == 7e11
    with pytest.raises(InputError, match=r"--params 'lots': not a parameter count"):
        memory.parse_count("lots")
    for bad in ("1e400", "0", "nan", "-5B"):
        with pytest.raises(InputError, match=r"--params"):
            memory.parse_count(bad)


def test_memory_math_ladders_are_named_and_the_pages_steps_in_powers_of_two_of_decimal_gb():
    inputs = memory.memory_math_inputs()
    assert inputs.default_ladder == "offload-lab" and set(inputs.ladders) == {"offload-lab", "community-page"}
    page = inputs.ladders["community-page"]
    assert page.unit == "GB" and all(s == 2 ** i for i, s in enumerate(page.sizes))
    assert "community-memory-math" in page.provenance
    rows = memory.memory_math(748.6e9, ladder="community-page")
    assert [r["smallest_memory_gb"] for r in rows] == [1024, 1024, 1024, 512, 512, 512]
    with pytest.raises(InputError, match=r"--ladder nope: no such ladder"):
        memory.memory_math(763.2e9, ladder="nope")
