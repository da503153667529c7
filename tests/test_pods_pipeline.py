"""Per-GPU memory under pipeline parallelism (fit.memory.per_gpu_pipeline) and vLLM's layer split."""

from __future__ import annotations

import json

import pytest
from fit_helpers import tiny_model  # noqa: F401

from offload_lab.core.errors import InputError
from offload_lab.fit.classify import Classification, Classified
from offload_lab.fit.memory import HostSet, Parallelism, per_gpu, per_gpu_pipeline
from offload_lab.server.multinode import parse_partition, pp_layer_ranges

CONFIG = {"num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "torch_dtype": "bfloat16"}


def _item(name: str, category: str, nbytes: int, layer: int | None = None, expert: int | None = None) -> Classified:
    return Classified(name, category, nbytes, layer, expert, None, None, None)


def _model() -> Classification:
    items = [_item("model.embed_tokens.weight", "embedding", 500), _item("lm_head.weight", "lm_head", 500),
             _item("model.norm.weight", "norm", 10), _item("model.layers.4.eh_proj.weight", "mtp", 300, 4),
             _item("mystery.weight", "other", 7)]
    for layer in range(4):
        items.append(_item(f"model.layers.{layer}.self_attn.o_proj.weight", "attention", 100, layer))
        items += [_item(f"model.layers.{layer}.mlp.experts.{e}.w1.weight", "routed_expert", 1000, layer, e)
                  for e in range(2)]
    return Classification("deepseek_v3", "", items, 4)


def test_layer_split_follows_vllm():
    assert [len(r) for r in pp_layer_ranges(61, 2)] == [31, 30]
    assert [len(r) for r in pp_layer_ranges(10, 4)] == [2, 3, 3, 2]  # the remainder to the stages before the last
    assert [list(r) for r in pp_layer_ranges(8, 2, [5, 3])] == [[0, 1, 2, 3, 4], [5, 6, 7]]
    assert parse_partition("5,3") == [5, 3] and parse_partition(None) is None
    with pytest.raises(InputError, match="summing to 8"):
        pp_layer_ranges(8, 2, [4, 3])
    with pytest.raises(InputError, match="at least as many layers"):
        pp_layer_ranges(2, 3)
    with pytest.raises(InputError, match="VLLM_PP_LAYER_PARTITION"):
        parse_partition("5;3")


def test_stages_hold_their_layers_and_the_ends():
    first, last = per_gpu_pipeline(_model(), Parallelism(tp=1), pp=2, config=CONFIG)
    # stage 0: layers 0-1 (attention + experts), the embedding, the unknown tensor (counted on every stage)
    assert first.ranks[0].device_total == 2 * 100 + 4 * 1000 + 500 + 7
    # stage 1: layers 2-3, lm_head, the final norm and the MTP layer
    assert last.ranks[0].device_total == 2 * 100 + 4 * 1000 + 500 + 10 + 300 + 7
    assert [r.rank for r in first.ranks + last.ranks] == [0, 1]
    whole = per_gpu(_model(), Parallelism(tp=1), config=CONFIG)
    assert first.per_gpu_bytes + last.per_gpu_bytes - 7 == whole.per_gpu_bytes
    # KV per token per GPU: each stage its own two layers (MLA: 512 + 64 values, bf16)
    assert first.kv.per_gpu_bytes == last.kv.per_gpu_bytes == 2 * 576 * 2 == whole.kv.per_gpu_bytes // 2


def test_tensor_and_pipeline_parallel_together_with_a_plan():
    host = HostSet(experts=frozenset({(3, 0), (3, 1)}))
    stages = per_gpu_pipeline(_model(), Parallelism(tp=2), pp=2, host=host, usable_gib=1.0, config=CONFIG)
    assert [r.rank for s in stages for r in s.ranks] == [0, 1, 2, 3]  # stage x tp + tp rank, as vLLM numbers them
    first, last = stages
    assert first.ranks[0].device_total == (2 * 100 + 4 * 1000 + 500) // 2 + 7
    # layer 3's experts are on host: only the last stage gets lighter, by its TP share
    assert last.ranks[1].host_total == 1000
    assert last.ranks[1].device_total == (2 * 100 + 2 * 1000 + 500 + 300) // 2 + 10 + 7
    assert all(s.fits for s in stages)
    uneven = per_gpu_pipeline(_model(), Parallelism(tp=1), pp=2, partition=[3, 1], config=CONFIG)
    assert [s.kv.layers for s in uneven] == [3, 1]


def test_one_stage_is_per_gpu_and_missing_layer_count_is_refused():
    [only] = per_gpu_pipeline(_model(), Parallelism(tp=2), pp=1, config=CONFIG)
    assert only.per_gpu_bytes == per_gpu(_model(), Parallelism(tp=2), config=CONFIG).per_gpu_bytes
    bare = Classification("deepseek_v3", "", _model().items, None)
    with pytest.raises(InputError, match="num_hidden_layers"):
        per_gpu_pipeline(bare, Parallelism(tp=1), pp=2)


def test_audit_prints_per_stage_memory_under_pipeline_parallelism(capsys, tiny_model):  # noqa: F811
    from offload_lab.cli.main import main

    assert main(["audit", str(tiny_model), "--tp", "1", "--pp", "2", "--usable-gib", "1",
                 "--reserve-gib", "0", "--context", "0"]) == 0
    out = capsys.readouterr().out
    assert "without plan, pipeline parallel 2:" in out and "stage 0:" in out and "stage 1:" in out
    assert main(["audit", str(tiny_model), "--tp", "1", "--pp", "2", "--usable-gib", "1",
                 "--reserve-gib", "0", "--context", "0", "--json"]) == 0
    stages = json.loads(capsys.readouterr().out)["pipeline"]["without_plan"]
    assert len(stages) == 2 and all(s["per_gpu_gib"] > 0 for s in stages)
    assert main(["audit", str(tiny_model), "--tp", "1", "--pp", "2", "--pp-partition", "1;1", "--usable-gib",
                 "1"]) == 2
    assert "VLLM_PP_LAYER_PARTITION" in capsys.readouterr().err
