"""Header-only synthetic checkpoints: exact headers, sparse data, readable by the safetensors library and over HTTP."""

from __future__ import annotations

import json

import pytest
from fit_helpers import tiny_model  # noqa: F401
from safetensors import safe_open

from offload_lab.fit import checkpoint
from offload_lab.fit import rangeserver
from offload_lab.fit import synthetic
from offload_lab.core.errors import InputError


def test_synthetic_from_the_tiny_config_has_the_tiny_models_layout(tiny_model, tmp_path):
    """From its config.json alone, transformers' model of the tiny model has the tiny checkpoint's parameters, its
    (layer, expert) entries and its categories; and `checkpoint synth` writes that model's own tensor names."""
    pytest.importorskip("transformers")
    from offload_lab.fit import hfcheckpoint, hfmodel

    real = checkpoint.read_checkpoint(tiny_model)
    _, cls_cfg, lay = hfmodel.read_model(str(tiny_model / "config.json"))
    assert lay.params()["total"] == sum(t.numel for t in real.tensors.values())
    typed = checkpoint.classify(real)  # the typed rules
    mapped = hfcheckpoint.classify_checkpoint(real, lay)  # each name onto transformers' module
    assert {it.name: (it.category, it.layer, it.expert) for it in mapped.items} == \
        {it.name: (it.category, it.layer, it.expert) for it in typed.items}
    assert set(cls_cfg.expert_bytes()) == set(typed.expert_bytes())
    hfcheckpoint.write_synthetic(str(tiny_model / "config.json"), tmp_path / "syn", 2)
    syn = checkpoint.read_checkpoint(tmp_path / "syn")
    assert set(syn.tensors) == {t.name for t in lay.tensors}
    assert syn.config["offload_lab_synthetic"]


@pytest.mark.slow
def test_full_scale_synthetic_is_sparse_and_reads_like_a_real_checkpoint(repo_root, tmp_path):
    spec = synthetic.load_spec(repo_root / "configs/checkpoints/synthetic-dsv41-flash-exl3.yaml")
    info = synthetic.write_checkpoint(spec, tmp_path / "syn")
    assert 95 <= info["shards"] <= 100
    assert info["apparent_bytes"] > 250 * 2**30
    assert info["disk_bytes"] < 200 * 2**20  # holes cost nothing; headers are a few hundred KB per shard
    local = checkpoint.read_checkpoint(tmp_path / "syn")
    cls = checkpoint.classify(local)
    eb = cls.expert_bytes()
    assert len(eb) == 40 * 384
    # An EXL3 expert: 3 projections of H x I at 3 bits (trellis) plus fp16 suh/svh vectors.
    h, i = spec.hidden_size, spec.moe_intermediate_size
    assert set(eb.values()) == {3 * h * i * 3 // 8 + 3 * (h + i) * 2}
    assert cls.by_category()["other"]["tensors"] == 0
    # The safetensors library opens a shard and reads zeros from the hole.
    first = sorted((tmp_path / "syn").glob("*.safetensors"))[1]
    with safe_open(str(first), "np") as f:
        names = list(f.keys())
        assert set(names) == {t.name for t in local.shards[1].tensors}
        assert not f.get_tensor(names[0]).any()
    with rangeserver.serve_directory(tmp_path) as server:
        remote = checkpoint.read_checkpoint(f"{server.url}/syn")
    assert remote.fingerprint() == local.fingerprint()
    assert remote.fetched_bytes < 2 * sum(s.header_bytes for s in local.shards) + 100 * 65536


def test_spec_errors_name_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnaming: deepseek_v4\nnum_hidden_layers: 2\nnum_experts: 4\nnum_experts_per_tok: 2\n"
                   "hidden_size: 30\nmoe_intermediate_size: 16\nvocab_size: 10\nattention: mla\n"
                   "num_attention_heads: 2\nkv_lora_rank: 8\nqk_nope_head_dim: 4\nqk_rope_head_dim: 4\n"
                   "v_head_dim: 4\nexpert_format: exl3\nexpert_bits: 3\n")
    with pytest.raises(InputError, match=r"bad.yaml.*hidden_size: EXL3 tiles are 16x16"):
        synthetic.load_spec(bad)


def test_writing_into_a_non_empty_directory_is_refused(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    spec = synthetic.SyntheticSpec(name="t", naming="qwen3_moe", num_hidden_layers=1, num_experts=2,
                                   num_experts_per_tok=1, hidden_size=16, moe_intermediate_size=16, vocab_size=8,
                                   attention="gqa", num_attention_heads=1, num_key_value_heads=1, head_dim=16)
    with pytest.raises(InputError, match=r"not empty"):
        synthetic.write_checkpoint(spec, tmp_path / "x")


def test_shards_balance_bytes_and_give_huge_tensors_their_own():
    tensors = [synthetic.TensorSpec(f"t{i}", "U8", (10,)) for i in range(100)]
    tensors.insert(50, synthetic.TensorSpec("huge", "U8", (5000,)))
    groups = synthetic.assign_shards(tensors, 10)
    assert [t.name for g in groups for t in g] == [t.name for t in tensors]  # order kept, nothing lost
    assert ["huge"] in [[t.name for t in g] for g in groups]
    assert 9 <= len(groups) <= 11
