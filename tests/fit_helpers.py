"""Fixtures for the "will it fit" tests: the tiny model's real files, small sharded checkpoints written with the
safetensors library, checkpoints from name lists (sparse, header-exact), and range-capable / Range-ignoring HTTP
servers on loopback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np
import pytest
from safetensors.numpy import save_file

from offload_lab.fit import rangeserver
from offload_lab.fit import synthetic
from offload_lab.server import tinymodel
from offload_lab.fit.synthetic import TensorSpec


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded tiny model built fresh (deterministic, about a second)."""
    out = tmp_path_factory.mktemp("tiny") / "tiny-qwen3-moe"
    tinymodel.build_tiny_model(out)
    return out


def write_sharded(out: Path, tensors: dict[str, np.ndarray], shards: int, config: dict | None = None) -> Path:
    """A real sharded checkpoint written by the safetensors library, with model.safetensors.index.json."""
    out.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    groups = [names[i::shards] for i in range(shards)]
    weight_map = {}
    for i, group in enumerate(groups, 1):
        fname = f"model-{i:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in group}, str(out / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in group})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    if config is not None:
        (out / "config.json").write_text(json.dumps(config))
    return out


def small_moe_tensors(layers: int = 3, experts: int = 4, hidden: int = 16, inter: int = 8, seed: int = 0,
                      ) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t: dict[str, np.ndarray] = {"model.embed_tokens.weight": rng.standard_normal((64, hidden), dtype=np.float32),
                                "model.norm.weight": np.ones(hidden, dtype=np.float32),
                                "lm_head.weight": rng.standard_normal((64, hidden), dtype=np.float32)}
    for n in range(layers):
        p = f"model.layers.{n}"
        t[f"{p}.self_attn.q_proj.weight"] = rng.standard_normal((hidden, hidden), dtype=np.float32)
        t[f"{p}.input_layernorm.weight"] = np.ones(hidden, dtype=np.float32)
        t[f"{p}.mlp.gate.weight"] = rng.standard_normal((experts, hidden), dtype=np.float32)
        for e in range(experts):
            for proj, shape in (("gate_proj", (inter, hidden)), ("up_proj", (inter, hidden)),
                                ("down_proj", (hidden, inter))):
                t[f"{p}.mlp.experts.{e}.{proj}.weight"] = rng.standard_normal(shape, dtype=np.float32)
    return t


SMALL_CONFIG = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 3,
                "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "hidden_size": 16,
                "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8, "vocab_size": 64,
                "torch_dtype": "float32"}


@pytest.fixture
def sharded(tmp_path: Path) -> Path:
    return write_sharded(tmp_path / "ckpt", small_moe_tensors(), shards=3, config=SMALL_CONFIG)


def write_named(path: Path, specs: Iterable[tuple[str, str, tuple[int, ...]]], config: dict | None = None) -> Path:
    """A header-exact sparse checkpoint directory from (name, dtype, shape) triples."""
    path.mkdir(parents=True, exist_ok=True)
    synthetic.write_sparse_safetensors(path / "model.safetensors", [TensorSpec(n, d, s) for n, d, s in specs])
    if config is not None:
        (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture
def http_root(tmp_path: Path):
    """(root directory, running range-honouring server) for the test to fill and read."""
    root = tmp_path / "www"
    root.mkdir()
    with rangeserver.serve_directory(root) as server:
        yield root, server
