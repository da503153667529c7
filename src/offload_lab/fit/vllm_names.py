"""The ``layer_name`` vLLM gives an architecture's MoE layers, read from vLLM's own model code (not typed per model).

vLLM names a fused-MoE layer by the ``prefix`` its model code passes down: the decoder layer ``model.layers.N``, the
MoE block's attribute (``mlp``, ``block_sparse_moe``, ``feed_forward``...), then the ``FusedMoE``'s (``experts``).
The installed vLLM's source is parsed, never imported (it needs a GPU build or a CPU server environment): its model
registry (``model_executor/models/registry.py``) maps the config's architecture to a module, and in that module the
``FusedMoE``/``SharedFusedMoE`` call's ``prefix=f"{prefix}.experts"`` names the experts, and the call that builds
the class holding it, ``prefix=f"{prefix}.mlp"``, names the block. vLLM is looked for in this Python, then in the
project's server environment (``.venvs/server``, or the one ``$OFFLOAD_LAB_VLLM_SOURCE`` names).
"""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from offload_lab.core.errors import InputError

VLLM_SOURCE_ENV = "OFFLOAD_LAB_VLLM_SOURCE"
LAYER_PREFIX = "model.layers.{layer}"  # vLLM's make_layers under the model's "model" prefix


@dataclass(frozen=True)
class MoENames:
    architecture: str
    module: str  # vllm.model_executor.models.<module>
    block: str  # attribute of the decoder layer holding the MoE block
    experts: str  # attribute of the block holding the FusedMoE
    source: str  # the file read

    @property
    def template(self) -> str:
        return f"{LAYER_PREFIX}.{self.block}.{self.experts}"

    def layer_name(self, layer: int) -> str:
        return self.template.format(layer=layer)


def vllm_root() -> Path | None:
    env = os.environ.get(VLLM_SOURCE_ENV)
    if env:
        return Path(env)
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.origin:
        return Path(spec.origin).parent
    from offload_lab.core.paths import find_root

    try:
        root = find_root(Path(__file__).resolve().parent)
    except Exception:  # noqa: BLE001 - an installed package outside a checkout has no server environment
        return None
    found = sorted((root / ".venvs" / "server" / "lib").glob("python*/site-packages/vllm"))
    return found[-1] if found else None


@lru_cache(maxsize=None)
def _registry(root: Path) -> dict[str, tuple[str, str]]:
    tree = ast.parse((root / "model_executor" / "models" / "registry.py").read_text(encoding="utf-8"))
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if (isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Tuple)
                        and len(v.elts) == 2 and all(isinstance(e, ast.Constant) for e in v.elts)):
                    out.setdefault(k.value, (v.elts[0].value, v.elts[1].value))  # type: ignore[union-attr]
    return out


def _prefix_suffix(call: ast.Call) -> str | None:
    """``X`` of a ``prefix=f"{prefix}.X"`` keyword."""
    for kw in call.keywords:
        if kw.arg in ("prefix",) and isinstance(kw.value, ast.JoinedStr):
            parts = kw.value.values
            if (len(parts) == 2 and isinstance(parts[0], ast.FormattedValue) and isinstance(parts[1], ast.Constant)
                    and isinstance(parts[1].value, str) and parts[1].value.startswith(".")):
                return parts[1].value[1:]
    return None


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def moe_names(architecture: str, hf_block: str | None = None) -> MoENames:
    """vLLM's MoE layer names for ``architecture`` (a config.json ``architectures`` entry). ``hf_block``, the
    transformers model's MoE block attribute, settles a module that builds its block indirectly (``self.mlp_cls``)
    only when vLLM's source passes that same prefix."""
    root = vllm_root()
    if root is None or not (root / "model_executor" / "models" / "registry.py").is_file():
        raise InputError("vLLM's source is not here (neither in this Python nor in .venvs/server); set "
                         f"{VLLM_SOURCE_ENV} to an installed vllm package folder to read its MoE layer names")
    reg = _registry(root)
    if architecture not in reg:
        raise InputError(f"architecture {architecture}: the installed vLLM ({root}) does not implement it")
    module, _ = reg[architecture]
    path = root / "model_executor" / "models" / f"{module}.py"
    if not path.is_file():
        raise InputError(f"architecture {architecture}: vLLM's registry names {module}, which is not a model file "
                         f"of {root}")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    holders: dict[str, str] = {}  # class building a FusedMoE -> its prefix suffix
    calls: list[tuple[str, str]] = []  # (callee, prefix suffix) of every call passing prefix=f"{prefix}.X"
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for call in (n for n in ast.walk(cls) if isinstance(n, ast.Call)):
            suffix = _prefix_suffix(call)
            if suffix is None:
                continue
            calls.append((_callee(call), suffix))
            if "FusedMoE" in _callee(call):
                holders.setdefault(cls.name, suffix)
    if not holders:
        raise InputError(f"architecture {architecture}: vLLM's {path.name} builds no FusedMoE layer")
    blocks = {suffix for callee, suffix in calls if callee in holders}
    experts = next(iter(holders.values()))
    if len(blocks) != 1:
        prefixes = {suffix for _, suffix in calls}
        if hf_block and hf_block in prefixes:
            blocks = {hf_block}
        else:
            raise InputError(f"architecture {architecture}: cannot tell from vLLM's {path.name} which prefix its MoE "
                             f"block gets (candidates: {sorted(blocks or prefixes)[:6]})")
    return MoENames(architecture, module, blocks.pop(), experts, str(path))
