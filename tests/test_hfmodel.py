"""A model is its config: tensors and categories from transformers' own modeling code (fit/hfmodel.py), checked
against transformers' own parameter count and the model cards' published totals and actives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from offload_lab.fit import hfcheckpoint, hfmodel, kvbudget  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _meta_count(config) -> int:
    """transformers' own count of the same model on the meta device."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return model.num_parameters()


# Every MoE model_type of the installed transformers whose default config builds (a few ship defaults that do not:
# their real configs fill the fields; see the issue note).
MOE_TYPES = hfmodel.moe_model_types()


def _default(mt: str):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING[mt]()


@pytest.mark.parametrize("mt", MOE_TYPES)
def test_total_equals_transformers_count(mt: str) -> None:
    cfg = _default(mt)
    try:
        lay = hfmodel.layout(cfg)
    except hfmodel.InputError as e:
        pytest.skip(f"{mt}: {e}")
    assert lay.params()["total"] == _meta_count(cfg)
    cats = {t.category for t in lay.tensors}
    assert "routed_expert" in cats and "attention" in cats or "routed_expert" in cats
    # Every routed expert of every MoE layer is there, as (layer, expert) entries.
    ckpt, cls = hfmodel.as_checkpoint(lay, cfg.to_dict(), f"{mt}.json")
    eb = cls.expert_bytes()
    assert eb and len({e for _, e in eb}) >= lay.num_experts


# (config, total, active) as the model cards print them, in billions, the digits they print, and which active count
# the card's is (the cards differ: gpt-oss's table leaves the input embedding out, the others count every active
# parameter). A figure agrees when it is within one unit of the card's last printed digit (cards round or truncate).
def _qwen3_30b_a3b():
    return transformers.Qwen3MoeConfig(num_hidden_layers=48, hidden_size=2048, num_experts=128,
                                       moe_intermediate_size=768, num_experts_per_tok=8, num_attention_heads=32,
                                       num_key_value_heads=4, head_dim=128, vocab_size=151936,
                                       tie_word_embeddings=False)


CARDS = {
    # deepseek-ai/DeepSeek-V3 card: "671B total parameters with 37B activated for each token".
    "deepseek_v3": (lambda: transformers.DeepseekV3Config(), 671, 37, 0, "active"),
    # mistralai/Mixtral-8x7B: 46.7B total, 12.9B active (Mistral's announcement, "Mixtral of experts").
    "mixtral": (lambda: transformers.MixtralConfig(), 46.7, 12.9, 1, "active"),
    # openai/gpt-oss-120b model card (its parameter table): 116.83B total, 5.13B active ("117B"/"5.1B" in its text);
    # its active count leaves the input embedding out.
    "gpt_oss": (lambda: transformers.GptOssConfig(), 116.83, 5.13, 2, "active_without_input_embedding"),
    # Qwen/Qwen3-30B-A3B card: "Number of Parameters: 30.5B in total and 3.3B activated".
    "qwen3_30b_a3b": (_qwen3_30b_a3b, 30.5, 3.3, 1, "active"),
}


@pytest.mark.parametrize("name", sorted(CARDS))
def test_totals_and_actives_against_model_cards(name: str) -> None:
    make, total, active, digits, key = CARDS[name]
    cfg = make()
    p = hfmodel.layout(cfg).params()
    assert p["total"] == _meta_count(cfg)
    unit = 10.0 ** -digits
    assert abs(p["total"] / 1e9 - total) < unit
    assert abs(p[key] / 1e9 - active) < unit


def test_transformers_defaults_are_those_models() -> None:
    """The three defaults the card test leans on are the published models' dimensions."""
    ds = transformers.DeepseekV3Config()
    assert (ds.num_hidden_layers, ds.hidden_size, ds.n_routed_experts, ds.num_experts_per_tok) == (61, 7168, 256, 8)
    mx = transformers.MixtralConfig()
    assert (mx.num_hidden_layers, mx.hidden_size, mx.num_local_experts, mx.intermediate_size) == (32, 4096, 8, 14336)
    go = transformers.GptOssConfig()
    assert (go.num_hidden_layers, go.num_local_experts, go.num_experts_per_tok) == (36, 128, 4)


def test_categories_by_module() -> None:
    lay = hfmodel.layout(transformers.DeepseekV3Config(num_hidden_layers=4, first_k_dense_replace=1))
    cat = {t.name: t.category for t in lay.tensors}
    assert cat["model.layers.1.mlp.experts.gate_up_proj"] == "routed_expert"
    assert cat["model.layers.1.mlp.gate.weight"] == "router"
    assert cat["model.layers.1.mlp.shared_experts.down_proj.weight"] == "shared_expert"
    assert cat["model.layers.0.mlp.down_proj.weight"] == "dense_mlp"
    assert cat["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"] == "attention"
    assert cat["model.embed_tokens.weight"] == "embedding"
    assert cat["lm_head.weight"] == "lm_head"
    assert cat["model.norm.weight"] == "norm"


def test_checkpoint_names_map_through_transformers_conversion() -> None:
    """Mixtral's per-expert checkpoint names (block_sparse_moe.experts.E.w1) land on the fused experts, expert E."""
    from offload_lab.fit.headers import Checkpoint, Shard, Tensor

    cfg = transformers.MixtralConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    lay = hfmodel.layout(cfg)
    names = {"model.layers.1.block_sparse_moe.experts.3.w1.weight": (128, 64),
             "model.layers.1.block_sparse_moe.gate.weight": (8, 64),
             "model.layers.0.self_attn.q_proj.weight": (64, 64), "model.embed_tokens.weight": (100, 64)}
    tensors = tuple(Tensor(n, "BF16", s, 2 * s[0] * s[1], "x", 0) for n, s in names.items())
    ckpt = Checkpoint("x", "directory", [Shard("x", 0, None, {}, tensors)], config=cfg.to_dict())
    got = {it.name: (it.category, it.layer, it.expert) for it in hfcheckpoint.classify_checkpoint(ckpt, lay).items}
    assert got["model.layers.1.block_sparse_moe.experts.3.w1.weight"] == ("routed_expert", 1, 3)
    assert got["model.layers.1.block_sparse_moe.gate.weight"][0] == "router"
    assert got["model.layers.0.self_attn.q_proj.weight"][0] == "attention"
    assert got["model.embed_tokens.weight"][0] == "embedding"


def test_kv_budget_by_architecture() -> None:
    go = transformers.GptOssConfig()
    kv = kvbudget.kv_budget(go.to_dict(), 1, 32768, 2, hfmodel.layout(go))
    assert (kv.full_layers, kv.sliding_layers, kv.sliding_window) == (18, 18, 128)
    # 8 KV heads x 64 dims x (k, v) x 2 bytes per layer and token
    per_layer = 2 * 8 * 64 * 2
    assert kv.bytes_per_gpu == 2 * per_layer * (18 * 32768 + 18 * 128)
    ds = transformers.DeepseekV3Config()
    kv = kvbudget.kv_budget(ds.to_dict(), 8, 1000, 1, hfmodel.layout(ds))
    assert kv.kind == "mla" and kv.bytes_per_gpu == 61 * (512 + 64) * 2 * 1000  # the latent, whole on each rank
    jb = transformers.JambaConfig()
    kv = kvbudget.kv_budget(jb.to_dict(), 1, 1000, 1, hfmodel.layout(jb))
    assert kv.kind == "hybrid" and kv.full_layers == 4 and kv.state_layers == 28 and kv.state_bytes_per_stream_per_gpu


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "offload_lab.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_audit_and_plan_make_from_config_json(tmp_path: Path) -> None:
    cfg = _qwen3_30b_a3b()
    path = tmp_path / "config.json"
    cfg.to_json_file(str(path))
    r = _cli("audit", str(path), "--tp", "1", "--usable-gib", "80", "--json", "--context", "4096")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["params"]["total"] == _meta_count(cfg)
    assert out["params"]["active_counts_input_embedding"] is True
    kv = out["budget"]["kv"]
    assert kv["context"] == 4096 and kv["bytes_per_gpu"] == 48 * 2 * 4 * 128 * 2 * 4096
    assert out["memory"]["without_plan"]["reserve_gib"] == pytest.approx(
        kvbudget.DEFAULT_RESERVE_GIB + kv["bytes_per_gpu"] / 2**30)
    # A plan needing more pinned host RAM than the host has is refused, with the figure.
    r = _cli("plan", "make", str(path), "--generator", "uniform", "--fraction", "0.9", "--host-ram-gib", "8",
             "--out", str(tmp_path / "p.json"))
    assert r.returncode == 2 and "GiB of pinned host RAM" in r.stderr and not (tmp_path / "p.json").exists()
    r = _cli("plan", "make", str(path), "--generator", "uniform", "--fraction", "0.9", "--no-host-limit",
             "--out", str(tmp_path / "p.json"))
    assert r.returncode == 0, r.stderr


def test_config_by_url_and_from_config_on_a_folder_with_weights(tmp_path, capsys):
    """A config.json over HTTP (the audit reads that one file), and --from-config on a folder that holds weights."""
    from offload_lab.cli.main import main
    from offload_lab.fit import rangeserver

    cfg = transformers.MixtralConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    (tmp_path / "m").mkdir()
    cfg.to_json_file(str(tmp_path / "m" / "config.json"))
    (tmp_path / "m" / "model.safetensors").write_bytes(b"not read")
    with rangeserver.serve_directory(tmp_path) as server:
        assert main(["audit", f"{server.url}/m/config.json", "--tp", "1", "--usable-gib", "80", "--json"]) == 0
    by_url = json.loads(capsys.readouterr().out)
    assert by_url["checkpoint"]["kind"] == "config" and by_url["params"]["total"] == _meta_count(cfg)
    assert main(["audit", str(tmp_path / "m"), "--from-config", "--tp", "1", "--usable-gib", "80", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"]["total"] == _meta_count(cfg)
