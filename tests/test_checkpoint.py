"""Header reading from files, directories and HTTP range requests, checked against the safetensors library; servers
that ignore Range or fail; Hugging Face sources and tokens; tensor classification rules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fit_helpers import http_root, sharded, small_moe_tensors, tiny_model, write_named  # noqa: F401
from safetensors import safe_open

from offload_lab.fit import checkpoint
from offload_lab.fit import rangeserver
from offload_lab.fit import synthetic
from offload_lab.fit.checkpoint import FetchError, RangeNotSupportedError, RemoteOptions
from offload_lab.core.errors import InputError

# ----------------------------------------------------------------------------------------------------------------
# Against the safetensors library


def test_tiny_model_headers_match_the_safetensors_library(tiny_model):
    ckpt = checkpoint.read_checkpoint(tiny_model)
    path = tiny_model / "model.safetensors"
    with safe_open(str(path), "np") as f:
        names = set(f.keys())
        assert set(ckpt.tensors) == names
        for name in names:
            s = f.get_slice(name)
            t = ckpt.tensors[name]
            assert list(t.shape) == list(s.get_shape())
            assert t.dtype == s.get_dtype()
        # Offsets are right if the bytes there are the library's tensor, for a few tensors of every kind.
        raw = path.read_bytes()
        for name in ["model.embed_tokens.weight", "model.layers.3.mlp.experts.31.down_proj.weight",
                     "model.layers.0.self_attn.q_norm.weight", "lm_head.weight"]:
            t = ckpt.tensors[name]
            assert raw[t.offset:t.offset + t.nbytes] == f.get_tensor(name).tobytes()
    assert ckpt.total_bytes + 8 + ckpt.shards[0].header_bytes == path.stat().st_size
    assert ckpt.config["model_type"] == "qwen3_moe"


def test_tiny_model_over_http_equals_local(tiny_model, http_root):
    root, server = http_root
    shutil.copytree(tiny_model, root / "tiny")
    local = checkpoint.read_checkpoint(tiny_model)
    remote = checkpoint.read_checkpoint(f"{server.url}/tiny")
    assert remote.fingerprint() == local.fingerprint()
    assert {n: t.offset for n, t in remote.tensors.items()} == {n: t.offset for n, t in local.tensors.items()}
    assert remote.config == local.config
    body = (root / "tiny" / "model.safetensors").stat().st_size
    shard_requests = [r for r in server.records if r.path.endswith(".safetensors")]
    assert shard_requests and all(r.range and r.status == 206 for r in shard_requests)
    # Only the header came over the wire, never the weights.
    assert sum(r.body_bytes for r in shard_requests) < 100_000 < body


def test_sharded_directory_local_and_http(sharded, http_root):
    root, server = http_root
    local = checkpoint.read_checkpoint(sharded)
    assert len(local.shards) == 3 and len(local.tensors) == len(small_moe_tensors())
    for shard in local.shards:
        with safe_open(str(sharded / shard.file), "np") as f:
            assert {t.name for t in shard.tensors} == set(f.keys())
    shutil.copytree(sharded, root / "ckpt")
    for source in (f"{server.url}/ckpt", f"{server.url}/ckpt/model.safetensors.index.json"):
        remote = checkpoint.read_checkpoint(source, RemoteOptions(concurrency=3))
        assert remote.fingerprint() == local.fingerprint()
        assert remote.requests == 3  # one range request per shard: each header fits the first read


def test_single_file_local_and_url(sharded, http_root):
    root, server = http_root
    shard = sorted(sharded.glob("*.safetensors"))[0]
    local = checkpoint.read_checkpoint(shard)
    assert local.kind == "file" and len(local.shards) == 1
    shutil.copy(shard, root / shard.name)
    remote = checkpoint.read_checkpoint(f"{server.url}/{shard.name}")
    assert remote.fingerprint() == local.fingerprint()


def test_long_header_takes_a_second_range_request(sharded, http_root):
    root, server = http_root
    shutil.copytree(sharded, root / "ckpt")
    remote = checkpoint.read_checkpoint(f"{server.url}/ckpt", RemoteOptions(first_read=8))
    assert remote.requests == 6  # the 8-byte length, then the header, for each of 3 shards
    assert remote.fingerprint() == checkpoint.read_checkpoint(sharded).fingerprint()
    ranges = [r.range for r in server.records if r.path.endswith("00001-of-00003.safetensors")]
    assert ranges[0] == "bytes=0-7" and ranges[1].startswith("bytes=8-")


def test_server_ignoring_range_is_detected_and_the_transfer_aborted(tmp_path):
    # A 2 GiB shard (sparse) behind a server that answers every range request with the whole file.
    big = [synthetic.TensorSpec(f"model.layers.0.mlp.experts.{e}.up_proj.weight", "BF16", (8192, 8192))
           for e in range(16)]
    (tmp_path / "www").mkdir()
    synthetic.write_sparse_safetensors(tmp_path / "www" / "model.safetensors", big)
    size = (tmp_path / "www" / "model.safetensors").stat().st_size
    with rangeserver.serve_directory(tmp_path / "www", rangeserver.ServerBehaviour(honour_range=False)) as server:
        with pytest.raises(RangeNotSupportedError, match=r"ignored the Range header.*no weights were downloaded"):
            checkpoint.read_checkpoint(f"{server.url}/model.safetensors")
        sent = server.body_bytes()
    assert size > 2 * 2**30
    # Aborted after the header: at most what socket buffers held when the client hung up.
    assert sent < 64 * 2**20


def test_retries_ride_out_transient_failures(sharded, tmp_path):
    root = tmp_path / "www"
    shutil.copytree(sharded, root / "ckpt")
    with rangeserver.serve_directory(root, rangeserver.ServerBehaviour(fail_first=2)) as server:
        ckpt = checkpoint.read_checkpoint(f"{server.url}/ckpt", RemoteOptions(retries=3, backoff_s=0.01))
        assert len(ckpt.shards) == 3
        assert sum(1 for r in server.records if r.status == 503) == 2 * 5  # index, config, three shards
    with rangeserver.serve_directory(root, rangeserver.ServerBehaviour(fail_first=10)) as server:
        with pytest.raises(FetchError, match=r"model.safetensors.index.json.*after 2 attempts.*HTTP 503"):
            checkpoint.read_checkpoint(f"{server.url}/ckpt", RemoteOptions(retries=1, backoff_s=0.01))


def test_missing_remote_file_is_named(http_root):
    root, server = http_root
    with pytest.raises(InputError, match=r"nothing\.safetensors: HTTP 404"):
        checkpoint.read_checkpoint(f"{server.url}/nothing.safetensors")


# ----------------------------------------------------------------------------------------------------------------
# Hugging Face sources


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_hf_source_resolves_to_file_urls_without_network(sharded, tmp_path, monkeypatch):
    root = tmp_path / "hub"
    shutil.copytree(sharded, root / "acme" / "tiny-moe" / "resolve" / COMMIT)
    secret = "hf_" + "s3cr3t" * 6
    monkeypatch.setenv("HF_TOKEN", secret)
    behaviour = rangeserver.ServerBehaviour(extra_headers={"X-Repo-Commit": COMMIT})
    with rangeserver.serve_directory(root, behaviour) as server:
        ckpt = checkpoint.read_checkpoint(f"hf://acme/tiny-moe@{COMMIT}", hf_endpoint=server.url)
        records = server.records
    assert ckpt.kind == "hf" and ckpt.revision == COMMIT and ckpt.commit == COMMIT
    assert ckpt.fingerprint() == checkpoint.read_checkpoint(sharded).fingerprint()
    assert all(r.path.startswith(f"/acme/tiny-moe/resolve/{COMMIT}/") for r in records)
    assert all(r.authorization == f"Bearer {secret}" for r in records)
    # The token reaches the endpoint and nothing else: not the record, the summary, or the audit's JSON.
    cls = checkpoint.classify(ckpt)
    text = json.dumps([ckpt.record(), checkpoint.summary(ckpt, cls)], default=str)
    assert secret not in text and "s3cr3t" not in text


def test_token_is_not_sent_to_plain_urls(sharded, http_root, monkeypatch):
    root, server = http_root
    monkeypatch.setenv("HF_TOKEN", "hf_should_not_travel")
    shutil.copytree(sharded, root / "ckpt")
    checkpoint.read_checkpoint(f"{server.url}/ckpt")
    assert all(r.authorization is None for r in server.records)


def test_hf_source_needs_a_revision():
    with pytest.raises(InputError, match=r"name a revision"):
        checkpoint.parse_hf_source("hf://acme/tiny-moe")
    src = checkpoint.parse_hf_source(f"hf://acme/tiny-moe@{COMMIT}/sub/dir")
    assert src.pinned and src.subfolder == "sub/dir"
    assert not checkpoint.parse_hf_source("hf://acme/tiny-moe@main").pinned
    url = checkpoint.hf_file_url(src, "config.json", endpoint="https://example.invalid")
    assert url == f"https://example.invalid/acme/tiny-moe/resolve/{COMMIT}/sub/dir/config.json"


# ----------------------------------------------------------------------------------------------------------------
# Damaged input


def _write_raw(path: Path, header: bytes, data: bytes = b"", length: int | None = None) -> Path:
    path.write_bytes((len(header) if length is None else length).to_bytes(8, "little") + header + data)
    return path


def test_damaged_files_are_named(tmp_path):
    with pytest.raises(InputError, match=r"bad.safetensors.*not valid UTF-8 JSON"):
        checkpoint.read_checkpoint(_write_raw(tmp_path / "bad.safetensors", b"{not json"))
    with pytest.raises(InputError, match=r"huge.safetensors: header length .* outside"):
        checkpoint.read_checkpoint(_write_raw(tmp_path / "huge.safetensors", b"{}", length=10**12))
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    with pytest.raises(InputError, match=r"short.safetensors: header says the file is .* truncated"):
        checkpoint.read_checkpoint(_write_raw(tmp_path / "short.safetensors", header, b"\0" * 8))
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}).encode()
    with pytest.raises(InputError, match=r"tensor w: F32 \[4\] needs 16 bytes"):
        checkpoint.read_checkpoint(_write_raw(tmp_path / "odd.safetensors", header, b"\0" * 12))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"empty has neither model.safetensors.index.json nor any"):
        checkpoint.read_checkpoint(tmp_path / "empty")
    with pytest.raises(InputError, match=r"does not exist"):
        checkpoint.read_checkpoint(tmp_path / "nope")


def test_index_naming_a_missing_tensor_is_an_error(sharded):
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.layers.9.mlp.gate.weight"] = "model-00001-of-00003.safetensors"
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError, match=r"model.layers.9.mlp.gate.weight is listed for model-00001"):
        checkpoint.read_checkpoint(sharded)


# ----------------------------------------------------------------------------------------------------------------
# Classification


def _classified(tmp_path: Path, specs, config=None, **kw) -> dict[str, checkpoint.Classified]:
    ckpt = checkpoint.read_checkpoint(write_named(tmp_path / "c", specs, config))
    cls = checkpoint.classify(ckpt, **kw)
    return {it.name: it for it in cls.items}, cls


def test_tiny_model_classification(tiny_model):
    ckpt = checkpoint.read_checkpoint(tiny_model)
    cls = checkpoint.classify(ckpt)
    cats = cls.by_category()
    assert cls.architecture == "qwen3_moe"
    assert cats["routed_expert"]["tensors"] == 4 * 32 * 3 and cats["other"]["tensors"] == 0
    assert cats["router"]["tensors"] == 4 and cats["embedding"]["tensors"] == 1 and cats["lm_head"]["tensors"] == 1
    eb = cls.expert_bytes()
    assert len(eb) == 128 and set(eb.values()) == {3 * 128 * 256 * 4}
    assert sum(v["bytes"] for v in cats.values()) == ckpt.total_bytes


def test_deepseek_v3_names_with_fp8_scales_and_mtp(tmp_path):
    specs = [
        ("model.embed_tokens.weight", "BF16", (32, 8)), ("lm_head.weight", "BF16", (32, 8)),
        ("model.norm.weight", "BF16", (8,)),
        ("model.layers.0.mlp.gate_proj.weight", "F8_E4M3", (16, 8)),  # dense layer (first_k_dense_replace)
        ("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", "F8_E4M3", (8, 8)),
        ("model.layers.0.self_attn.indexer.wk.weight", "BF16", (8, 8)),  # V3.2 selector: attention
        ("model.layers.1.mlp.experts.7.down_proj.weight", "F8_E4M3", (8, 16)),
        ("model.layers.1.mlp.experts.7.down_proj.weight_scale_inv", "F32", (1, 1)),
        ("model.layers.1.mlp.shared_experts.up_proj.weight", "F8_E4M3", (16, 8)),
        ("model.layers.1.mlp.gate.weight", "BF16", (8, 8)),
        ("model.layers.1.mlp.gate.e_score_correction_bias", "F32", (8,)),
        ("model.layers.1.post_attention_layernorm.weight", "BF16", (8,)),
        ("model.layers.2.mlp.experts.0.up_proj.weight", "F8_E4M3", (16, 8)),  # MTP: layer >= num_hidden_layers
        ("model.layers.2.eh_proj.weight", "BF16", (8, 16)),
        ("some.unknown.tensor", "U8", (100,)),
    ]
    items, cls = _classified(tmp_path, specs, {"model_type": "deepseek_v3", "num_hidden_layers": 2})
    assert cls.architecture == "deepseek_v3"
    assert items["model.layers.0.mlp.gate_proj.weight"].category == "dense_mlp"
    assert items["model.layers.0.self_attn.indexer.wk.weight"].category == "attention"
    e = items["model.layers.1.mlp.experts.7.down_proj.weight_scale_inv"]
    assert (e.category, e.layer, e.expert, e.quant) == ("routed_expert", 1, 7, "fp8-block")
    assert items["model.layers.1.mlp.shared_experts.up_proj.weight"].category == "shared_expert"
    assert items["model.layers.1.mlp.gate.e_score_correction_bias"].category == "router"
    assert items["model.layers.1.post_attention_layernorm.weight"].category == "norm"
    assert items["model.layers.2.mlp.experts.0.up_proj.weight"].category == "mtp"
    assert items["model.layers.2.eh_proj.weight"].category == "mtp"
    other = items["some.unknown.tensor"]
    assert other.category == "other" and other.nbytes == 100
    assert cls.by_category()["other"] == {"tensors": 1, "bytes": 100}


def test_deepseek_v4_native_names_exl3_suffixes_and_engram_pattern(tmp_path):
    specs = [("embed.weight", "BF16", (32, 16)), ("head.weight", "BF16", (32, 16)), ("norm.weight", "BF16", (16,))]
    for comp, dtype, shape in (("trellis", "I16", (1, 2, 48)), ("suh", "F16", (16,)), ("svh", "F16", (32,)),
                               ("mcg", "I32", (1,)), ("mul1", "I32", (1,))):
        specs.append((f"layers.0.ffn.experts.5.w1.{comp}", dtype, shape))
    specs += [("layers.0.ffn.gate.weight", "F32", (8, 16)), ("layers.0.ffn.gate.tid2eid", "I32", (32, 2)),
              ("layers.0.ffn.shared_experts.w2.trellis", "I16", (2, 1, 96)),
              ("layers.0.attn.wkv_a.trellis", "I16", (1, 1, 96)), ("layers.0.attn_norm.weight", "BF16", (16,)),
              ("engram.0.weight", "U8", (64, 8)), ("ngram_table.1", "U8", (64, 8))]
    items, cls = _classified(tmp_path, specs, {"model_type": "deepseek_v4", "num_hidden_layers": 1})
    assert cls.architecture == "deepseek_v4"
    for comp in ("trellis", "suh", "svh", "mcg", "mul1"):
        it = items[f"layers.0.ffn.experts.5.w1.{comp}"]
        assert (it.category, it.layer, it.expert, it.quant) == ("routed_expert", 0, 5, "exl3")
    assert items["layers.0.ffn.gate.tid2eid"].category == "router"
    assert items["layers.0.ffn.shared_experts.w2.trellis"].category == "shared_expert"
    assert items["layers.0.attn.wkv_a.trellis"].category == "attention"
    assert items["embed.weight"].category == "embedding" and items["head.weight"].category == "lm_head"
    assert items["engram.0.weight"].category == "engram"
    assert items["ngram_table.1"].category == "other"
    # The Engram pattern is configurable.
    items2, _ = _classified(tmp_path / "again", specs, {"model_type": "deepseek_v4"},
                            engram_pattern=r"^(engram|ngram_table)\.")
    assert items2["ngram_table.1"].category == "engram" and items2["engram.0.weight"].category == "engram"


def test_qwen2_moe_shared_expert_and_stacked_experts(tmp_path):
    specs = [("model.layers.0.mlp.shared_expert.gate_proj.weight", "BF16", (8, 8)),
             ("model.layers.0.mlp.shared_expert_gate.weight", "BF16", (1, 8)),
             ("model.layers.0.mlp.gate.weight", "BF16", (4, 8)),
             ("model.layers.0.mlp.experts.3.up_proj.weight", "BF16", (8, 8)),
             ("model.layers.0.self_attn.q_proj.bias", "BF16", (8,))]
    items, cls = _classified(tmp_path, specs)  # no config: detected from the names
    assert cls.architecture == "qwen2_moe"
    assert items["model.layers.0.mlp.shared_expert.gate_proj.weight"].category == "shared_expert"
    assert items["model.layers.0.mlp.shared_expert_gate.weight"].category == "shared_expert"
    assert items["model.layers.0.self_attn.q_proj.bias"].category == "attention"
    # vLLM / vllm-exl3 stacked layout: one tensor per layer holding every expert along dim 0.
    stacked = [("model.layers.1.mlp.experts.w13_weight", "BF16", (4, 16, 8)),
               ("model.layers.1.mlp.experts.w2_trellis", "I16", (4, 1, 1, 48))]
    items, cls = _classified(tmp_path / "s", stacked, {"model_type": "qwen3_moe"})
    assert items["model.layers.1.mlp.experts.w13_weight"].stacked_experts == 4
    eb = cls.expert_bytes()
    assert sorted(eb) == [(1, e) for e in range(4)]
    assert sum(eb.values()) == 4 * 16 * 8 * 2 + 4 * 48 * 2


def test_unknown_architecture_is_an_input_error(sharded):
    with pytest.raises(InputError, match=r"unknown architecture 'llama'"):
        checkpoint.classify(checkpoint.read_checkpoint(sharded), architecture="llama")

