"""What a GPU must keep free beside the weights for the model to serve: the KV cache at a stated context length and
number of streams, computed per layer from the architecture, plus the activations/graphs reserve.

Per decoder layer (its token mixer, as ``transformers`` builds the model, see :mod:`offload_lab.fit.hfmodel`):

- full attention: ``context`` tokens per stream. MLA (``kv_lora_rank``) caches ``kv_lora_rank + qk_rope_head_dim``
  values per token, whole on every TP rank (vLLM replicates the latent); GQA/MHA ``2 * kv_heads * head_dim``,
  ``max(1, kv_heads / tp)`` heads per rank;
- sliding-window attention (``layer_types[i] == "sliding_attention"``): ``min(context, sliding_window)`` tokens;
- state-space and linear-attention mixers (Mamba, gated DeltaNet, ...): no KV; a fixed state per stream (the
  convolution window and the recurrent state, read off the mixer's parameter shapes), at the model's dtype.

The reserve for activations, CUDA graphs and staging buffers defaults to :data:`DEFAULT_RESERVE_GIB`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from offload_lab.fit.classify import config_int, config_levels

# Activations, CUDA graphs and staging buffers per GPU: the dsv41 anchor's "~5 GiB" beside 7.7 GiB of dense weights
# (0xSero/dsv41-flash-offload README, as summarised in the study's expert-offload anchor). A stated default, not a
# measurement of your stack: vLLM profiles it at start-up; set --reserve-gib to what yours reports.
DEFAULT_RESERVE_GIB = 5.0
DEFAULT_CONTEXT = 32768  # tokens per stream, when the model allows that many (else its max_position_embeddings)
DEFAULT_STREAMS = 1
_STATE_MIXER = ("Mamba", "DeltaNet", "LinearAttention", "ShortConv", "Lightning", "SSM")
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


@dataclass(frozen=True)
class KVBudget:
    context: int
    streams: int
    kind: str  # mla | gqa | mha | hybrid
    full_layers: int
    sliding_layers: int
    sliding_window: int | None
    state_layers: int
    kv_bytes_per_token_per_gpu: int  # one token in every full-attention layer
    state_bytes_per_stream_per_gpu: int
    bytes_per_gpu: int
    dtype_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gib_per_gpu": self.bytes_per_gpu / 2**30}


def default_context(config: Mapping[str, Any] | None) -> int:
    limit = config_int(config, "max_position_embeddings", "max_seq_len")
    return min(DEFAULT_CONTEXT, limit) if limit else DEFAULT_CONTEXT


def _dtype_bytes(config: Mapping[str, Any]) -> int:
    dtype = next((str(c.get("torch_dtype") or c.get("dtype")) for c in config_levels(config)
                  if c.get("torch_dtype") or c.get("dtype")), "bfloat16")
    return _DTYPE_BYTES.get(dtype.removeprefix("torch."), 2)


def kv_budget(config: Mapping[str, Any], tp: int, context: int, streams: int, layout: Any = None,
              dtype_bytes: int | None = None) -> KVBudget:
    """KV cache and mixer state per GPU for ``streams`` sequences of ``context`` tokens (see the module docstring).
    ``layout`` (an :class:`offload_lab.fit.hfmodel.ModelLayout`) tells which layers hold state instead of KV; without
    it every decoder layer is taken for attention."""
    from offload_lab.fit.memory import kv_cache

    per_token = kv_cache(config, tp, dtype_bytes)  # one layer's share: per_gpu_bytes / layers
    db = dtype_bytes or _dtype_bytes(config)
    layers = per_token.layers
    layer_types = next((c.get("layer_types") for c in config_levels(config) if isinstance(c.get("layer_types"), list)),
                       None)
    if layout is not None:
        tc = getattr(layout.config, "get_text_config", lambda: layout.config)()
        lt = getattr(tc, "layer_types", None)
        layer_types = list(lt) if isinstance(lt, (list, tuple)) else layer_types
    window = config_int(config, "sliding_window")
    state_by_layer = _state_layers(layout, tp, db) if layout is not None else {}
    full = sliding = 0
    for i in range(layers):
        if i in state_by_layer:
            continue
        kind = layer_types[i] if layer_types and i < len(layer_types) else "full_attention"
        if kind == "sliding_attention" and window:
            sliding += 1
        elif kind in ("full_attention", "attention", "sliding_attention") or not state_by_layer:
            full += 1
    per_layer = per_token.per_gpu_bytes // layers
    tokens_sliding = min(context, window) if window else context
    state = sum(state_by_layer.values())
    total = streams * (per_layer * (full * context + sliding * tokens_sliding) + state)
    kind = "hybrid" if state_by_layer else per_token.kind
    return KVBudget(context, streams, kind, full, sliding, window if sliding else None, len(state_by_layer),
                    per_layer * full, state, total, db)


def _state_layers(layout: Any, tp: int, dtype_bytes: int) -> dict[int, int]:
    """Layer -> bytes of one stream's recurrent state on one GPU, for the layers whose mixer keeps a state."""
    out: dict[int, int] = {}
    tc = getattr(layout.config, "get_text_config", lambda: layout.config)()
    d_state = next((getattr(tc, k) for k in ("mamba_d_state", "ssm_state_size", "state_size", "mamba_state_size")
                    if isinstance(getattr(tc, k, None), int)), None)
    for t in layout.tensors:
        if t.category != "attention" or t.layer is None or not any(w in t.mixer for w in _STATE_MIXER):
            continue
        elems = 0
        if t.name.endswith("conv1d.weight") and len(t.shape) == 3:
            elems = t.shape[0] * (t.shape[2] - 1)  # the convolution window: kernel - 1 past inputs per channel
        elif t.name.endswith("A_log") and len(t.shape) == 2:
            elems = t.shape[0] * t.shape[1]  # Mamba-1: d_inner x d_state
        elif t.name.endswith("A_log") and len(t.shape) == 1:
            heads = t.shape[0]
            kd = getattr(tc, "linear_key_head_dim", None)
            vd = getattr(tc, "linear_value_head_dim", None)
            if isinstance(kd, int) and isinstance(vd, int):
                elems = heads * kd * vd  # gated DeltaNet: a k x v matrix per value head
            elif d_state:
                head_dim = getattr(tc, "mamba_head_dim", None) or getattr(tc, "head_dim", None) or 64
                elems = heads * int(head_dim) * d_state  # Mamba-2: heads x head_dim x d_state
        out[t.layer] = out.get(t.layer, 0) + math.ceil(elems * dtype_bytes / tp)
    return {k: v for k, v in out.items() if v} or {k: 0 for k in out}
