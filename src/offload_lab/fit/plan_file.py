"""Plan files: the file model, reading and writing it, and checking a plan against a checkpoint.

File format (JSON, one object; docs/plan-files.md has an example and says exactly what is refused)::

    {
      "format": "offload-lab-plan",          # required, exactly this
      "version": 1,                          # required, the integer 1
      "model": "tiny-qwen3-moe",             # a name for people; not checked
      "checkpoint": {                        # what the plan was made for
        "source": "...", "revision": null, "commit": null,
        "fingerprint": "<sha256 of tensor names, dtypes, shapes>",
        "moe_layers": [0, 1, 2, 3], "experts_per_layer": 32
      },
      "host_experts": {"0": [3, 17], "2": [5]},   # checkpoint layer number -> expert ids on host
      "host_tensors": ["model.embed_tokens.weight"],   # whole tensors on host, by name
      "generator": {"name": "activation-aware", "parameters": {...}},
      "statistics": {"path": "...", "sha256": "...", "tokens": 8279} | null,   # routing counts used, if any
      "created_at": "2025-...Z",
      "predicted": {...}                     # optional, informational (see offload_lab.fit.predict)
    }

Layer numbers are the checkpoint's own (DeepSeek-V3's first MoE layer is 3), as strings because JSON keys are
strings. Reading refuses, before anything else is looked at, what would let one layer or one expert be written two
ways: a layer key must be canonical ASCII decimal (``"1"``, never ``"01"``, ``"+1"``, ``" 1"``, ``"١"`` or ``"¹"``)
up to :data:`MAX_LAYER`, an expert id a JSON integer (never ``true``, ``1.0`` or ``"1"``) from 0 to
:data:`MAX_EXPERT_ID`, each expert once per layer. A file is at most :data:`PLAN_MAX_BYTES`, UTF-8, with no NaN or
Infinity anywhere. Repeated problems are counted, not listed one by one.

``plan check`` (:func:`check_plan`) then rejects against a checkpoint: a layer that has no routed experts, an expert id
the layer does not have, a host tensor that does not exist or that belongs to a routed expert (list the expert
instead), a tensor listed twice. A checkpoint whose fingerprint differs from the plan's is a warning (a plan may be
reused across quantizations of the same model).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from offload_lab.core import inputs, runs
from offload_lab.core.errors import InputError
from offload_lab.fit.classify import Classification
from offload_lab.fit.memory import HostSet
from offload_lab.fit.headers import Checkpoint

FORMAT = "offload-lab-plan"
VERSION = 1
# Bounds far above any model (DeepSeek-V3: 61 layers, 256 experts) that keep a damaged or hostile file small to read.
MAX_LAYER = 99_999
MAX_EXPERT_ID = 999_999
PLAN_MAX_BYTES = 16 * 2**20  # a plan of 100 layers x 1,024 experts, indented, is about 1 MB
_LAYER_KEY = re.compile(r"0|[1-9][0-9]{0,4}")  # re's [0-9] is ASCII only: no Unicode digits
_EXAMPLES = 3  # names shown for a counted problem


class _Strict(BaseModel):
    # strict: no "1" for 1, no true for 1; extra="forbid": a misspelt field is an error, never ignored.
    model_config = ConfigDict(extra="forbid", strict=True)


class CheckpointRef(_Strict):
    source: str | None = None
    revision: str | None = None
    commit: str | None = None
    fingerprint: str | None = None
    moe_layers: list[int] | None = None
    experts_per_layer: int | None = None


class GeneratorRef(_Strict):
    name: str
    parameters: dict[str, Any] = Field(default_factory=dict)


class StatisticsRef(_Strict):
    path: str | None = None
    sha256: str
    tokens: int | None = None


class PlanFile(_Strict):
    format: Literal["offload-lab-plan"]
    version: int
    model: str = ""
    checkpoint: CheckpointRef = Field(default_factory=CheckpointRef)
    host_experts: dict[str, list[int]] = Field(default_factory=dict)
    host_tensors: list[str] = Field(default_factory=list)
    generator: GeneratorRef | None = None
    statistics: StatisticsRef | None = None
    created_at: str | None = None
    predicted: dict[str, Any] | None = None

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, v: Any) -> Any:
        # Literal[1] would take true and 1.0 (they compare equal to 1).
        if type(v) is not int or v != VERSION:
            raise ValueError(f"must be the integer {VERSION} (got {v!r})")
        return v

    @field_validator("host_experts", mode="before")
    @classmethod
    def _host_experts(cls, v: Any) -> Any:
        # Checked by hand, before pydantic's per-item validation: one message per kind of problem, counted, so that a
        # list of a million bad entries costs one line and no million error records.
        if not isinstance(v, dict):
            raise ValueError(f"must be an object of layer number -> list of expert ids, not {type(v).__name__}")
        problems = host_expert_problems(v)
        if problems:
            raise ValueError("; ".join(inputs.summarize(problems)))
        return v

    def experts(self) -> list[tuple[int, int]]:
        return [(int(layer), e) for layer, es in self.host_experts.items() for e in es]

    def host_set(self) -> HostSet:
        return HostSet(frozenset(self.experts()), frozenset(self.host_tensors))


def host_expert_problems(mapping: dict[Any, Any]) -> list[str]:
    """What is wrong with a ``host_experts`` mapping as such (no checkpoint needed), each kind counted once."""
    problems: list[str] = []
    for key, experts in mapping.items():
        if not isinstance(key, str) or not _LAYER_KEY.fullmatch(key):
            problems.append(_bad_key(key))
            continue
        if not isinstance(experts, list):
            problems.append(f"layer {key}: expected a list of expert ids, got {type(experts).__name__}")
            continue
        if len(experts) > MAX_EXPERT_ID + 1:
            problems.append(f"layer {key}: {len(experts):,} entries, more than the {MAX_EXPERT_ID + 1:,} distinct "
                            "expert ids a layer can have")
            continue
        kinds: dict[str, list[Any]] = {}
        for e in experts:
            kind = _bad_expert(e)
            if kind:
                kinds.setdefault(kind, []).append(e)
        for kind, examples in kinds.items():
            shown = ", ".join(repr(x) for x in examples[:_EXAMPLES])
            count = f"{len(examples):,} entries are" if len(examples) > 1 else "an entry is"
            problems.append(f"layer {key}: {count} {kind} (e.g. {shown})")
        repeats = [(e, n) for e, n in Counter(e for e in experts if type(e) is int).items() if n > 1]
        for e, n in repeats[:_EXAMPLES]:
            problems.append(f"layer {key} lists expert {e} twice" + (f" ({n:,} times)" if n > 2 else ""))
        if len(repeats) > _EXAMPLES:
            problems.append(f"layer {key} repeats {len(repeats) - _EXAMPLES:,} more expert ids")
    return problems


def _bad_key(key: Any) -> str:
    text = str(key)
    shown = repr(text) if len(text) <= 40 else f"{text[:12]!r}... ({len(text):,} characters)"
    hint = ""
    if text.isascii() and text.isdigit() and len(text) <= 12 and int(text) <= MAX_LAYER:
        hint = f"; write {str(int(text))!r}"  # "01": the same layer as "1", written another way
    return (f"layer key {shown} is not a layer number: write 0 to {MAX_LAYER} in ASCII digits, without leading zeros, "
            f"signs or spaces{hint}")


def _bad_expert(e: Any) -> str | None:
    if isinstance(e, bool):
        return "booleans, not expert ids"
    if isinstance(e, float):
        return "numbers with a decimal point, not integer expert ids"
    if not isinstance(e, int):
        return f"{type(e).__name__ if e is not None else 'null'}s, not integer expert ids"
    if e < 0:
        return "negative expert ids"
    if e > MAX_EXPERT_ID:
        return f"expert ids above {MAX_EXPERT_ID:,}"
    return None


@dataclass
class Problem:
    level: Literal["error", "warning"]
    message: str


# ----------------------------------------------------------------------------------------------------------------
# Reading and writing


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise InputError(f"key {k!r} appears twice in one object (for host_experts: list a layer once)")
        seen[k] = v
    return seen


def _no_constant(name: str) -> Any:
    raise InputError(f"{name} is not a number JSON allows; write a finite number")


def parse_plan_json(text: str, where: str) -> dict[str, Any]:
    """The JSON object of a plan file: duplicate keys, NaN/Infinity, deep nesting and non-objects are InputErrors."""
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not valid JSON ({e})") from e
    except RecursionError as e:
        raise InputError(f"{where}: nested too deeply to be a plan") from e
    except InputError as e:
        raise InputError(f"{where}: {e}") from e
    if not isinstance(raw, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    return raw


def read_plan(path: Path | str) -> PlanFile:
    """Read and validate the structure of a plan file; errors name the file and the field."""
    p = Path(path)
    where = f"plan file {p}"
    text = inputs.decode_utf8(inputs.read_bytes(p, "plan file", PLAN_MAX_BYTES), p, "plan file")
    return plan_from_dict(parse_plan_json(text, where), where)


def plan_from_dict(raw: dict[str, Any], where: str) -> PlanFile:
    if raw.get("format") != FORMAT:
        raise InputError(f"{where}: field 'format' must be {FORMAT!r} (got {raw.get('format')!r}); "
                         "see docs/plan-files.md")
    try:
        return PlanFile.model_validate(raw)
    except ValidationError as e:
        details = inputs.summarize(f"field '{'.'.join(map(str, err['loc']))}': {err['msg']}" for err in e.errors())
        raise InputError(f"{where}: " + "; ".join(details)) from e


def write_plan(plan: PlanFile, path: Path | str) -> Path:
    runs.atomic_write_text(Path(path), plan.model_dump_json(indent=2) + "\n")
    return Path(path)


# ----------------------------------------------------------------------------------------------------------------
# Checking against a checkpoint


def check_plan(plan: PlanFile, cls: Classification, ckpt: Checkpoint | None = None) -> list[Problem]:
    """Every way the plan does not fit the checkpoint (see the module docstring), one problem per kind and layer."""
    problems: list[Problem] = []
    per_layer: dict[int, set[int]] = {}
    for layer, e in cls.expert_bytes():
        per_layer.setdefault(layer, set()).add(e)
    not_moe = sorted(int(k) for k in plan.host_experts if int(k) not in per_layer)
    if not_moe:
        which = (f"layer {not_moe[0]} has" if len(not_moe) == 1 else
                 f"{len(not_moe):,} layers ({_some(not_moe)}) have")
        problems.append(Problem("error", f"host_experts: {which} no routed experts in the checkpoint "
                                         f"(MoE layers: {_ranges(sorted(per_layer))})"))
    for key, experts in plan.host_experts.items():
        layer = int(key)
        if layer not in per_layer:
            continue
        for e, n in Counter(experts).items():
            if n > 1:  # only for a PlanFile built without validation (model_construct)
                problems.append(Problem("error", f"host_experts: layer {layer} lists expert {e} twice"))
        absent = sorted(set(experts) - per_layer[layer])
        if absent:
            problems.append(Problem("error", f"host_experts: layer {layer} has no expert {_some(absent)} (it has "
                                             f"{len(per_layer[layer])}, ids {_ranges(sorted(per_layer[layer]))})"))
    problems += _tensor_problems(plan.host_tensors, cls)
    if ckpt is not None and plan.checkpoint.fingerprint and plan.checkpoint.fingerprint != ckpt.fingerprint():
        problems.append(Problem("warning", "the plan was made for a checkpoint with a different tensor layout "
                                           f"(fingerprint {plan.checkpoint.fingerprint[:12]}..., this one "
                                           f"{ckpt.fingerprint()[:12]}...)"))
    return problems


def _tensor_problems(names: Sequence[str], cls: Classification) -> list[Problem]:
    by_name = {it.name: it for it in cls.items}
    twice = [n for n, k in Counter(names).items() if k > 1]
    missing = [n for n in dict.fromkeys(names) if n not in by_name]
    experts = [n for n in dict.fromkeys(names) if n in by_name and by_name[n].category == "routed_expert"]
    out = []
    if twice:
        out.append(Problem("error", f"host_tensors: {_some(twice)} {'is' if len(twice) == 1 else 'are'} listed twice"))
    if missing:
        verb = "does" if len(missing) == 1 else f"({len(missing):,} tensors) do"
        out.append(Problem("error", f"host_tensors: {_some(missing)} {verb} not exist in the checkpoint"))
    for name in experts[:_EXAMPLES]:
        it = by_name[name]
        where = f"layer {it.layer}, expert {it.expert}" if it.expert is not None else f"layer {it.layer}"
        out.append(Problem("error", f"host_tensors: {name} is a routed expert's tensor ({where}); list the expert in "
                                    "host_experts instead"))
    if len(experts) > _EXAMPLES:
        out.append(Problem("error", f"host_tensors: {len(experts) - _EXAMPLES:,} more are routed experts' tensors"))
    return out


def _some(xs: Sequence[Any]) -> str:
    """The first few of xs, then how many more."""
    head = ", ".join(str(x) for x in xs[:_EXAMPLES])
    return head if len(xs) <= _EXAMPLES else f"{head} and {len(xs) - _EXAMPLES:,} more"


def _ranges(xs: Sequence[int]) -> str:
    if not xs:
        return "none"
    out, start, prev = [], xs[0], xs[0]
    for x in list(xs[1:]) + [None]:  # type: ignore[list-item]
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
        if x is not None:
            start = prev = x
    return ",".join(out)


def plan_summary(plan: PlanFile) -> dict[str, Any]:
    per_layer = {int(k): len(v) for k, v in plan.host_experts.items()}
    return {
        "model": plan.model,
        "generator": plan.generator.name if plan.generator else None,
        "parameters": plan.generator.parameters if plan.generator else {},
        "host_experts": sum(per_layer.values()),
        "layers_with_host_experts": len([v for v in per_layer.values() if v]),
        "host_experts_per_layer_min": min(per_layer.values(), default=0),
        "host_experts_per_layer_max": max(per_layer.values(), default=0),
        "host_tensors": list(plan.host_tensors),
        "statistics_sha256": plan.statistics.sha256 if plan.statistics else None,
        "checkpoint_fingerprint": plan.checkpoint.fingerprint,
    }
