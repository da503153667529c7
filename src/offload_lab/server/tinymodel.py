"""The embedded default model: a tiny random-weight Qwen3-MoE that vLLM's CPU build serves.

``build_tiny_model`` writes a Hugging Face style directory (``config.json``, ``model.safetensors``, a byte-level BPE
``tokenizer.json`` trained here on a corpus shipped in the package, ``tokenizer_config.json`` with a ChatML chat
template, ``generation_config.json``) in a few seconds. The same config and seed give byte-identical files, on any
machine: weights come from numpy's seeded PCG64 stream per tensor, every JSON file is written with sorted keys, and
nothing records a time, a path or a library version.

Qwen3-MoE rather than a DeepSeek layout because vLLM's CPU backend turns prefix caching off for MLA attention.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from offload_lab.core.errors import InputError
from offload_lab.core.inputs import read_yaml

DEFAULT_CONFIG_NAME = "tiny-qwen3-moe.yaml"
CORPUS_NAME = "tokenizer_corpus.txt"
CHAT_TEMPLATE_NAME = "chat_template.jinja"
WEIGHTS_NAME = "model.safetensors"
BUILD_INFO_NAME = "offload_lab_build.json"

# Qwen's ChatML tokens. The pad/document token comes first so that id 0 is never a token a chat turn produces.
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# vLLM CPU kernels: the unquantized MoE kernel needs hidden and intermediate sizes divisible by 32, and the CPU
# attention backend supports only these head sizes (vllm/v1/attention/backends/cpu_attn.py).
CPU_ALIGNMENT = 32
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# The embedded model is built in memory on any laptop: 250M parameters (1 GiB of float32) is already far from tiny,
# and a typo (hidden_size: 10000000) would otherwise try to allocate tens of GiB.
MAX_TINY_PARAMETERS = 250_000_000


class TinyModelSpec(BaseModel):
    """What ``configs/models/tiny-qwen3-moe.yaml`` may say; names follow Hugging Face's config.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    architecture: Literal["Qwen3MoeForCausalLM"] = "Qwen3MoeForCausalLM"
    seed: int = Field(ge=0, lt=2**63)
    vocab_size: int = Field(ge=512, le=65536)
    hidden_size: int = Field(gt=0)
    num_hidden_layers: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_key_value_heads: int = Field(ge=1)
    head_dim: int
    num_experts: int = Field(ge=1)
    num_experts_per_tok: int = Field(ge=1)
    moe_intermediate_size: int = Field(gt=0)
    norm_topk_prob: bool = True
    max_position_embeddings: int = Field(ge=128)
    rope_theta: float = Field(gt=0)
    rms_norm_eps: float = Field(gt=0)
    tie_word_embeddings: bool = False
    torch_dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    init_std: float = Field(gt=0, le=1)
    tokenizer_min_frequency: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> TinyModelSpec:
        # Raised as ValueError so pydantic reports them; load_model_spec names the file and the field.
        if self.hidden_size % CPU_ALIGNMENT:
            raise ValueError(
                f"hidden_size: {self.hidden_size} is not a multiple of {CPU_ALIGNMENT} (vLLM CPU MoE kernel)"
            )
        if self.moe_intermediate_size % CPU_ALIGNMENT:
            raise ValueError(
                f"moe_intermediate_size: {self.moe_intermediate_size} is not a multiple of {CPU_ALIGNMENT} "
                "(vLLM CPU MoE kernel)"
            )
        if self.head_dim not in CPU_HEAD_SIZES:
            raise ValueError(f"head_dim: {self.head_dim} is not one of vLLM CPU attention's {list(CPU_HEAD_SIZES)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads: {self.num_key_value_heads} does not divide "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok: {self.num_experts_per_tok} is more than num_experts {self.num_experts}"
            )
        if self.parameter_count() > MAX_TINY_PARAMETERS:
            raise ValueError(
                f"these sizes make {self.parameter_count():,} parameters ({self.parameter_count() * 4 / 2**30:,.1f} "
                f"GiB of float32 weights to build in memory); a tiny model has at most {MAX_TINY_PARAMETERS:,}: "
                "shrink hidden_size, num_hidden_layers, num_experts or moe_intermediate_size"
            )
        return self

    def parameter_count(self) -> int:
        """Weights the builder allocates: embeddings and head, attention, router and experts per layer."""
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        attention = h * q * 2 + h * kv * 2
        experts = self.num_experts * 3 * h * self.moe_intermediate_size + h * self.num_experts
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_hidden_layers * (attention + experts)


# ----------------------------------------------------------------------------------------------------------------
# Config files


def _resource(name: str) -> Path:
    # The package ships as plain files (setuptools package-data), so the traversable is a real path.
    return Path(str(resources.files("offload_lab") / "resources" / name))


def default_model_config() -> Path:
    """The repository's ``configs/models/tiny-qwen3-moe.yaml`` when running from a checkout, else the packaged copy.

    Found from the package's own location, not the working directory, so that a checkout elsewhere on the path
    is never picked up by accident.
    """
    here = Path(__file__).resolve().parent
    for parent in here.parents:
        candidate = parent / "configs" / "models" / DEFAULT_CONFIG_NAME
        if candidate.is_file():
            return candidate
        if (parent / "pyproject.toml").is_file():
            break
    return _resource(DEFAULT_CONFIG_NAME)


def _describe(err: Any) -> tuple[str, str]:
    """(field, message) of one pydantic error."""
    msg = str(err["msg"]).removeprefix("Value error, ")
    loc = tuple(err.get("loc", ()))
    if loc:
        got = "" if err["type"] == "missing" else f" (got {err['input']!r})"
        return ".".join(str(p) for p in loc), msg + got
    # Cross-field checks carry no location; their message starts with "field: ".
    head, _, rest = msg.partition(": ")
    return (head, rest) if head.isidentifier() and rest else ("(model)", msg)


def load_model_spec(path: Path | str) -> TinyModelSpec:
    """Read and validate a tiny-model config; errors name the file and the field."""
    path = Path(path)
    raw = read_yaml(path, "tiny model config")  # bounded, UTF-8 checked, a mapping
    try:
        return TinyModelSpec.model_validate(raw)
    except ValidationError as exc:
        problems = [f"field '{field}': {msg}" for field, msg in map(_describe, exc.errors())]
        raise InputError(f"tiny model config {path}: " + "; ".join(problems)) from exc


# ----------------------------------------------------------------------------------------------------------------
# Tokenizer


def read_corpus() -> str:
    """The tokenizer's training text, with line endings normalised so a CRLF checkout trains the same tokenizer."""
    return _resource(CORPUS_NAME).read_text(encoding="utf-8").replace("\r\n", "\n")


def train_tokenizer(spec: TinyModelSpec) -> Any:
    """Train the byte-level BPE, exactly ``spec.vocab_size`` tokens with the ChatML specials at ids 0-2."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=spec.tokenizer_min_frequency,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        # Every byte gets a token even if the corpus lacks it, so any text encodes.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([read_corpus()], trainer=trainer)
    size = tok.get_vocab_size(with_added_tokens=True)
    if size > spec.vocab_size:
        raise InputError(f"tokenizer came out with {size} tokens, more than vocab_size {spec.vocab_size}")
    if size < spec.vocab_size:
        # The corpus ran out of merges. Fill the gap with reserved specials so that every id the model can sample
        # decodes (an id beyond the tokenizer would be an error in vLLM's detokenizer).
        tok.add_special_tokens(
            [AddedToken(f"<|reserved_{i}|>", special=True, normalized=False) for i in range(spec.vocab_size - size)]
        )
    return tok


def tokenizer_config(spec: TinyModelSpec) -> dict[str, Any]:
    template = _resource(CHAT_TEMPLATE_NAME).read_text(encoding="utf-8").replace("\r\n", "\n")
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": IM_END,
        "errors": "replace",
        "model_max_length": spec.max_position_embeddings,
        "pad_token": ENDOFTEXT,
        "split_special_tokens": False,
        # The generic fast tokenizer loads tokenizer.json as it is; Qwen2Tokenizer would rebuild the pre-tokenizer
        # with Qwen's own regex and tokenize differently from what was trained here.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


# ----------------------------------------------------------------------------------------------------------------
# Weights


def tensor_shapes(spec: TinyModelSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint, with vLLM's / Hugging Face's Qwen3-MoE names."""
    h, hd = spec.hidden_size, spec.head_dim
    q, kv, inter = spec.num_attention_heads * hd, spec.num_key_value_heads * hd, spec.moe_intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (spec.vocab_size, h),
        "model.norm.weight": (h,),
    }
    if not spec.tie_word_embeddings:
        shapes["lm_head.weight"] = (spec.vocab_size, h)
    for n in range(spec.num_hidden_layers):
        p = f"model.layers.{n}"
        shapes.update({
            f"{p}.input_layernorm.weight": (h,),
            f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (q, h),
            f"{p}.self_attn.k_proj.weight": (kv, h),
            f"{p}.self_attn.v_proj.weight": (kv, h),
            f"{p}.self_attn.o_proj.weight": (h, q),
            f"{p}.self_attn.q_norm.weight": (hd,),
            f"{p}.self_attn.k_norm.weight": (hd,),
            f"{p}.mlp.gate.weight": (spec.num_experts, h),
        })
        for e in range(spec.num_experts):
            shapes[f"{p}.mlp.experts.{e}.gate_proj.weight"] = (inter, h)
            shapes[f"{p}.mlp.experts.{e}.up_proj.weight"] = (inter, h)
            shapes[f"{p}.mlp.experts.{e}.down_proj.weight"] = (h, inter)
    return shapes


def _tensor_rng(seed: int, name: str) -> np.random.Generator:
    # One stream per tensor, keyed by its name: adding or resizing one tensor leaves every other tensor unchanged.
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, key])))


def make_weights(spec: TinyModelSpec, seed: int) -> dict[str, np.ndarray]:
    """Random normal weights scaled by ``init_std``; norm weights are 1 so activations stay near unit RMS."""
    std = np.float32(spec.init_std)
    out: dict[str, np.ndarray] = {}
    for name, shape in tensor_shapes(spec).items():
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, dtype=np.float32)
        else:
            out[name] = _tensor_rng(seed, name).standard_normal(shape, dtype=np.float32) * std
    return out


# ----------------------------------------------------------------------------------------------------------------
# config.json and friends


def hf_config(spec: TinyModelSpec, eos_id: int, bos_id: int) -> dict[str, Any]:
    return {
        "architectures": [spec.architecture],
        "model_type": "qwen3_moe",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "decoder_sparse_step": 1,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "hidden_size": spec.hidden_size,
        "initializer_range": spec.init_std,
        # Qwen3-MoE has a dense intermediate size too; unused when every layer is sparse, but transformers wants it.
        "intermediate_size": spec.moe_intermediate_size * spec.num_experts_per_tok,
        "max_position_embeddings": spec.max_position_embeddings,
        "max_window_layers": spec.num_hidden_layers,
        "mlp_only_layers": [],
        "moe_intermediate_size": spec.moe_intermediate_size,
        "norm_topk_prob": spec.norm_topk_prob,
        "num_attention_heads": spec.num_attention_heads,
        "num_experts": spec.num_experts,
        "num_experts_per_tok": spec.num_experts_per_tok,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_key_value_heads": spec.num_key_value_heads,
        "output_router_logits": False,
        "rms_norm_eps": spec.rms_norm_eps,
        # Both spellings: transformers 4.x reads rope_theta/rope_scaling, 5.x reads rope_parameters.
        "rope_parameters": {"rope_theta": spec.rope_theta, "rope_type": "default"},
        "rope_scaling": None,
        "rope_theta": spec.rope_theta,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "torch_dtype": spec.torch_dtype,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": spec.vocab_size,
    }


def _json_bytes(obj: Any) -> bytes:
    # Sorted keys and a fixed layout: the bytes depend only on the content.
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def render_files(spec: TinyModelSpec, seed: int | None = None) -> dict[str, bytes]:
    """Every file of the model directory, as bytes, in memory."""
    from safetensors.numpy import save as save_safetensors

    seed = spec.seed if seed is None else seed
    tok = train_tokenizer(spec)
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    files = {
        "config.json": _json_bytes(hf_config(spec, eos_id=ids[IM_END], bos_id=ids[ENDOFTEXT])),
        "generation_config.json": _json_bytes({
            "bos_token_id": ids[ENDOFTEXT],
            # A chat turn ends at <|im_end|>, a document at <|endoftext|>: either stops generation.
            "eos_token_id": [ids[IM_END], ids[ENDOFTEXT]],
            "pad_token_id": ids[ENDOFTEXT],
        }),
        "tokenizer.json": (tok.to_str(pretty=True) + "\n").encode("utf-8"),
        "tokenizer_config.json": _json_bytes(tokenizer_config(spec)),
        "special_tokens_map.json": _json_bytes({
            "additional_special_tokens": [IM_START, IM_END],
            "eos_token": IM_END,
            "pad_token": ENDOFTEXT,
        }),
        # "pt" lets transformers load the file too; no other metadata, so nothing varies between builds.
        WEIGHTS_NAME: save_safetensors(make_weights(spec, seed), metadata={"format": "pt"}),
    }
    build_info = {
        "builder": "offload_lab.server.tinymodel",
        "seed": seed,
        "spec": spec.model_dump(mode="json"),
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
    }
    files[BUILD_INFO_NAME] = _json_bytes(build_info)
    return files


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def build_tiny_model(
    out_dir: Path | str, config_path: Path | str | None = None, seed: int | None = None
) -> dict[str, str]:
    """Build the tiny model into ``out_dir``; returns {file name: sha256} of every file written.

    ``seed`` overrides the config's seed. Files land atomically: a half-finished build never leaves a
    ``model.safetensors`` behind (the stack takes that file as "built").
    """
    out_dir = Path(out_dir)
    spec = load_model_spec(config_path if config_path is not None else default_model_config())
    files = render_files(spec, seed)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it owner-only; the model directory should read like any other
        for name, data in files.items():
            _write_file(tmp / name, data)
        if not out_dir.exists():
            os.replace(tmp, out_dir)
        else:
            # Rebuild in place: weights last, so an interrupted rebuild is never mistaken for a complete one.
            (out_dir / WEIGHTS_NAME).unlink(missing_ok=True)
            for name in sorted(files, key=lambda n: n == WEIGHTS_NAME):
                os.replace(tmp / name, out_dir / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
