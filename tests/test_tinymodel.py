"""The tiny-model builder: deterministic files, clear config errors, a working tokenizer, Qwen3-MoE tensor names."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from tokenizers import Tokenizer

from offload_lab.server import tinymodel
from offload_lab.core.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
REPO_CONFIG = ROOT / "configs" / "models" / "tiny-qwen3-moe.yaml"
EXPECTED_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "offload_lab_build.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    out = tmp_path_factory.mktemp("tiny") / "model"
    return out, tinymodel.build_tiny_model(out)


@pytest.fixture(scope="module")
def spec() -> tinymodel.TinyModelSpec:
    return tinymodel.load_model_spec(REPO_CONFIG)


# ---------------------------------------------------------------------------------------------------------------
# Determinism


def test_two_builds_are_byte_identical(built, tmp_path):
    out1, hashes1 = built
    hashes2 = tinymodel.build_tiny_model(tmp_path / "again")
    assert set(hashes1) == EXPECTED_FILES
    assert hashes1 == hashes2
    for name, sha in hashes1.items():
        assert _sha(out1 / name) == sha
        assert _sha(tmp_path / "again" / name) == sha


def test_tokenizer_is_identical_in_another_process(built, tmp_path):
    # Rayon's thread count and Python's hash seed must not leak into the trained merges.
    out, hashes = built
    code = (
        "import sys; from pathlib import Path; from offload_lab.server import tinymodel; "
        "print(tinymodel.build_tiny_model(Path(sys.argv[1]))['tokenizer.json'])"
    )
    env = dict(os.environ, RAYON_NUM_THREADS="1", PYTHONHASHSEED="12345", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p")], env=env, capture_output=True,
                          text=True, check=True)
    assert proc.stdout.strip() == hashes["tokenizer.json"]


def test_seed_changes_weights_only(built, tmp_path):
    _, hashes = built
    other = tinymodel.build_tiny_model(tmp_path / "s", seed=7)
    assert other["model.safetensors"] != hashes["model.safetensors"]
    for name in ("tokenizer.json", "config.json", "tokenizer_config.json", "generation_config.json"):
        assert other[name] == hashes[name]


def test_rebuild_in_place_leaves_no_temporaries(tmp_path):
    out = tmp_path / "m"
    first = tinymodel.build_tiny_model(out)
    (out / "model.safetensors").write_bytes(b"stale")
    assert tinymodel.build_tiny_model(out) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert {p.name for p in out.iterdir()} == EXPECTED_FILES


def test_json_files_have_sorted_keys_and_no_volatile_fields(built):
    out, _ = built
    for name in EXPECTED_FILES - {"model.safetensors", "tokenizer.json"}:
        text = (out / name).read_text(encoding="utf-8")
        obj = json.loads(text)
        assert list(obj) == sorted(obj), name
        assert str(out) not in text and "transformers_version" not in text


# ---------------------------------------------------------------------------------------------------------------
# Config files


def test_default_config_is_the_repository_file_and_the_packaged_copy_matches():
    assert tinymodel.default_model_config() == REPO_CONFIG
    packaged = tinymodel._resource(tinymodel.DEFAULT_CONFIG_NAME)
    assert packaged.read_bytes() == REPO_CONFIG.read_bytes(), "copy configs/models/tiny-qwen3-moe.yaml to resources/"


def _bad_config(tmp_path: Path, replace: str, by: str) -> Path:
    text = REPO_CONFIG.read_text(encoding="utf-8")
    assert re.search(replace, text, flags=re.M), replace
    path = tmp_path / "bad.yaml"
    path.write_text(re.sub(replace, by, text, flags=re.M), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "replace, by, field",
    [
        (r"^hidden_size: .*$", "hidden_size: 100", "hidden_size"),  # not a multiple of 32
        (r"^head_dim: .*$", "head_dim: 48", "head_dim"),  # no CPU attention kernel
        (r"^num_experts_per_tok: .*$", "num_experts_per_tok: 99", "num_experts_per_tok"),
        (r"^num_key_value_heads: .*$", "num_key_value_heads: 3", "num_key_value_heads"),
        (r"^num_experts: .*$", "num_experts: many", "num_experts"),
        (r"^seed: .*$", "seed: -1", "seed"),
        (r"^architecture: .*$", "architecture: DeepseekV3ForCausalLM", "architecture"),
        (r"^name: .*$", "name: x\nhidden_sise: 256", "hidden_sise"),  # a typo is an unknown field
        (r"^vocab_size: .*\n", "", "vocab_size"),  # missing
    ],
)
def test_bad_field_is_named_with_the_file(tmp_path, replace, by, field):
    path = _bad_config(tmp_path, replace, by)
    with pytest.raises(InputError) as err:
        tinymodel.load_model_spec(path)
    msg = str(err.value)
    assert str(path) in msg
    assert f"field '{field}'" in msg


def test_unreadable_and_non_mapping_configs(tmp_path):
    with pytest.raises(InputError, match="missing.yaml does not exist"):
        tinymodel.load_model_spec(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(InputError, match="expected a mapping"):
        tinymodel.load_model_spec(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        tinymodel.load_model_spec(tmp_path / "broken.yaml")


def test_build_reports_a_bad_config(tmp_path):
    path = _bad_config(tmp_path, r"^hidden_size: .*$", "hidden_size: 100")
    with pytest.raises(InputError, match="hidden_size"):
        tinymodel.build_tiny_model(tmp_path / "m", path)
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer


TEXTS = [
    "Hello world! Measure before you optimise.",
    "  leading spaces, tabs\tand\nnewlines\n\n",
    "def f(x):\n    return x ** 2  # 12345 3.14159",
    "Größe, café, naïve — 模型 モデル Модель 🚀📈",
    "<|im_start|>user\nhi<|im_end|>\n",
]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trips(built, text):
    tok = Tokenizer.from_file(str(built[0] / "tokenizer.json"))
    ids = tok.encode(text).ids
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_tokenizer_fills_the_vocabulary_and_has_chatml_specials(built, spec):
    tok = Tokenizer.from_file(str(built[0] / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == spec.vocab_size
    ids = tok.encode("<|im_start|>assistant\nok<|im_end|>").ids
    assert ids[0] == tok.token_to_id("<|im_start|>") and ids[-1] == tok.token_to_id("<|im_end|>")
    # Every id the model can emit decodes to something, so vLLM's detokenizer never sees an unknown id.
    assert all(tok.id_to_token(i) is not None for i in range(spec.vocab_size))
    # Byte-level: text never seen in the corpus still encodes without an unknown token.
    assert tok.decode(tok.encode("\x00\x7f").ids) == "\x00\x7f"


def test_small_vocabulary_is_padded_with_reserved_specials(tmp_path):
    path = _bad_config(tmp_path, r"^vocab_size: .*$", "vocab_size: 8192")  # more than the corpus can merge
    spec = tinymodel.load_model_spec(path)
    tok = tinymodel.train_tokenizer(spec)
    assert tok.get_vocab_size(with_added_tokens=True) == 8192
    assert tok.token_to_id("<|reserved_0|>") is not None


def test_tokenizer_config_and_generation_config(built):
    out, _ = built
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tcfg = json.loads((out / "tokenizer_config.json").read_text())
    gen = json.loads((out / "generation_config.json").read_text())
    cfg = json.loads((out / "config.json").read_text())
    assert tcfg["eos_token"] == "<|im_end|>" and tcfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    template = tcfg["chat_template"]
    assert "<|im_start|>" in template and "<|im_end|>" in template and "add_generation_prompt" in template
    assert cfg["eos_token_id"] == tok.token_to_id("<|im_end|>")
    assert gen["eos_token_id"] == [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]


def test_chat_template_renders_chatml():
    jinja2 = pytest.importorskip("jinja2")  # the server environment has it; the lab environment may not
    template = tinymodel.tokenizer_config(tinymodel.load_model_spec(REPO_CONFIG))["chat_template"]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    env = jinja2.Environment()
    text = env.from_string(template).render(messages=messages, add_generation_prompt=True)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


# ---------------------------------------------------------------------------------------------------------------
# Weights


def test_safetensors_has_qwen3_moe_layout(built, spec):
    out, _ = built
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"] and cfg["model_type"] == "qwen3_moe"
    assert cfg["num_experts"] == spec.num_experts >= 16
    assert cfg["num_experts_per_tok"] == spec.num_experts_per_tok >= 2
    assert cfg["num_hidden_layers"] == spec.num_hidden_layers >= 2
    assert cfg["max_position_embeddings"] >= 8192 and cfg["vocab_size"] == spec.vocab_size

    with safe_open(str(out / "model.safetensors"), framework="numpy") as f:
        keys = set(f.keys())
        assert f.metadata() == {"format": "pt"}
        shape = {k: tuple(f.get_slice(k).get_shape()) for k in keys}

    layers = {int(m.group(1)) for k in keys if (m := re.match(r"model\.layers\.(\d+)\.", k))}
    assert layers == set(range(spec.num_hidden_layers))
    h, inter = spec.hidden_size, spec.moe_intermediate_size
    for n in range(spec.num_hidden_layers):
        p = f"model.layers.{n}"
        experts = {int(m.group(1)) for k in keys if (m := re.match(rf"{p}\.mlp\.experts\.(\d+)\.", k))}
        assert experts == set(range(spec.num_experts))
        assert shape[f"{p}.mlp.gate.weight"] == (spec.num_experts, h)
        for e in range(spec.num_experts):
            assert shape[f"{p}.mlp.experts.{e}.gate_proj.weight"] == (inter, h)
            assert shape[f"{p}.mlp.experts.{e}.up_proj.weight"] == (inter, h)
            assert shape[f"{p}.mlp.experts.{e}.down_proj.weight"] == (h, inter)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"):
            assert f"{p}.self_attn.{name}.weight" in keys
        assert shape[f"{p}.self_attn.k_proj.weight"] == (spec.num_key_value_heads * spec.head_dim, h)
    for name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
        assert name in keys
    assert shape["model.embed_tokens.weight"] == (spec.vocab_size, h)
    assert keys == set(tinymodel.tensor_shapes(spec))


def test_weights_are_finite_and_scaled(built, spec):
    with safe_open(str(built[0] / "model.safetensors"), framework="numpy") as f:
        gate = f.get_tensor("model.layers.0.mlp.experts.0.gate_proj.weight")
        norm = f.get_tensor("model.layers.0.input_layernorm.weight")
        for k in f.keys():
            assert np.isfinite(f.get_tensor(k)).all(), k
    assert gate.dtype == np.float32
    assert abs(float(gate.std()) - spec.init_std) < 0.1 * spec.init_std
    assert (norm == 1).all()
