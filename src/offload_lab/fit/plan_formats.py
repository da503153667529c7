"""Plans in the format a stack's offload part reads: one writer and one reader per format.

The formats are named in :mod:`offload_lab.server.plan_spec` (``plans.format`` of a stack file):

- ``offload-lab``: offload-lab's own plan file (:mod:`offload_lab.fit.plan_file`, docs/plan-files.md);
- ``dsv41-host-plan``: the ``host-plan.json`` of the public dsv41 stack (:mod:`offload_lab.fit.hostplan`), read by
  its vllm-exl3 host-DMA patch from ``$EXL3_HOST_EXPERTS``.

Each reader parses the file as the offload part would and says what that code would do with it, for the MoE layers of
a checkpoint: which experts each layer would keep on host, which keys it would never look at, and every way the file
differs from the plan it was written from. For ``dsv41-host-plan`` that is a re-implementation of the patch's
``_host_plan_for`` (written here from reading it, not copied): for a layer, the entry under its vLLM ``layer_name``;
when there is none, the first key (in file order) that ends with the name or that the name ends with; then
``sorted(set(int(e) for e in entry))``, and a missing or empty entry is no host experts. The reader is stricter than
the patch wherever the patch would go on silently with something other than what was meant: an entry that is not a
list of JSON integers (``int()`` would take ``"3"``, ``3.9`` or ``true``; a string would be iterated digit by digit),
an id listed twice or outside the layer, a key that no MoE layer's lookup reaches (an offload-lab plan handed to the
patch is all such keys: the patch finds no layer, keeps every expert on the GPU, and the boot runs out of memory),
and a key that two layers' lookups reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offload_lab.core import inputs
from offload_lab.core.errors import InputError
from offload_lab.fit import hostplan
from offload_lab.fit.plan_file import FORMAT as OWN_FORMAT, PLAN_MAX_BYTES, PlanFile, parse_plan_json, plan_from_dict
from offload_lab.fit.plan_file import write_plan
from offload_lab.server.plan_spec import PLAN_FORMATS

if TYPE_CHECKING:  # pragma: no cover
    from offload_lab.server.stack import Stack

# vLLM's layer_name of a DeepSeek-V4.1 MoE layer as the pack's host plan names it; the patch's suffix match also
# takes a prefixed name (language_model.model.layers.N...), which the reader checks too.
DSV41_LAYER_NAMES = ("model.layers.{layer}.ffn.experts", "language_model.model.layers.{layer}.ffn.experts")


@dataclass
class PatchView:
    """What the offload part would do with a plan file, for a checkpoint's MoE layers."""

    path: str
    format: str
    host_experts: dict[int, list[int]] = field(default_factory=dict)  # MoE layer -> expert ids kept on host
    layers_found: list[int] = field(default_factory=list)  # MoE layers whose lookup found an entry (even empty)
    moe_layers: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "ok": self.ok, "moe_layers": len(self.moe_layers),
                "layers_found": len(self.layers_found), "host_experts": sum(len(v) for v in self.host_experts.values()),
                "layers_with_host_experts": len([v for v in self.host_experts.values() if v]),
                "problems": list(self.problems)}


def write_as(plan: PlanFile, fmt: str, path: Path | str) -> list[str]:
    """Write ``plan`` in format ``fmt`` to ``path``; returns what the format could not carry."""
    if fmt == "offload-lab":
        write_plan(plan, path)
        return []
    if fmt == "dsv41-host-plan":
        mapping, dropped = hostplan.to_host_plan(plan)
        hostplan.write_host_plan(mapping, path)
        return dropped
    raise InputError(f"no writer for plan format {fmt!r}; formats: {', '.join(PLAN_FORMATS)}")


def read_as(path: Path | str, fmt: str, moe_layers: list[int], experts_per_layer: int,
            expected: PlanFile | None = None) -> PatchView:
    """Read ``path`` as the code that reads format ``fmt`` would, for these MoE layers; ``expected`` is the
    offload-lab plan the file was written from (the view's host experts must be exactly its)."""
    p = Path(path)
    text = inputs.decode_utf8(inputs.read_bytes(p, "plan file", PLAN_MAX_BYTES), p, "plan file")
    raw = parse_plan_json(text, f"plan file {p}")
    if fmt == "offload-lab":
        view = _read_own(raw, str(p), moe_layers, experts_per_layer)
    elif fmt == "dsv41-host-plan":
        view = read_dsv41(raw, str(p), moe_layers, experts_per_layer)
    else:
        raise InputError(f"no reader for plan format {fmt!r}; formats: {', '.join(PLAN_FORMATS)}")
    if expected is not None and view.ok:
        view.problems += differences(view, expected)
    return view


def sniff(raw: Any) -> str | None:
    """Which format a parsed plan file looks like, if any."""
    if isinstance(raw, dict) and raw.get("format") == OWN_FORMAT:
        return "offload-lab"
    if isinstance(raw, dict) and raw and all(isinstance(k, str) and k.endswith(".ffn.experts") for k in raw):
        return "dsv41-host-plan"
    return None


def _read_own(raw: dict[str, Any], where: str, moe_layers: list[int], n_exp: int) -> PatchView:
    view = PatchView(path=where, format="offload-lab", moe_layers=list(moe_layers))
    if sniff(raw) != "offload-lab":
        view.problems.append(f"not an offload-lab plan ({_looks_like(raw)}); write it with `offload-lab plan make`")
        return view
    plan = plan_from_dict(raw, f"plan file {where}")
    layers = set(moe_layers)
    for key, ids in plan.host_experts.items():
        layer = int(key)
        if layer not in layers:
            view.problems.append(f"layer {layer} is not a MoE layer of the checkpoint")
            continue
        view.problems += _id_problems(f"layer {layer}", ids, n_exp)
        view.host_experts[layer] = sorted(ids)
        view.layers_found.append(layer)
    return view


def read_dsv41(raw: Any, where: str, moe_layers: list[int], n_exp: int,
               layer_names: tuple[str, ...] = DSV41_LAYER_NAMES) -> PatchView:
    """The patch's lookup for every MoE layer under each of ``layer_names`` (all must give the same answer)."""
    view = PatchView(path=where, format="dsv41-host-plan", moe_layers=list(moe_layers))
    if not isinstance(raw, dict):  # the patch calls .get on it: anything else stops the model load
        view.problems.append(f"a host plan is a JSON object of layer name -> expert ids, not {type(raw).__name__}")
        return view
    if sniff(raw) == "offload-lab":
        view.problems.append("this is an offload-lab plan, not a dsv41 host plan: the patch would find none of the "
                             f"{len(moe_layers)} MoE layers' keys in it and keep every expert on the GPU; write it "
                             "with `offload-lab plan export PLAN --format dsv41-host-plan` (`stack install` does)")
        return view
    reached: dict[str, set[int]] = {}
    answers: dict[str, dict[int, str | None]] = {}
    for template in layer_names:
        answers[template] = {}
        for layer in moe_layers:
            key = patch_lookup(raw, template.format(layer=layer))
            answers[template][layer] = key
            if key is not None:
                reached.setdefault(key, set()).add(layer)
    first = answers[layer_names[0]]
    for template in layer_names[1:]:
        differ = [layer for layer in moe_layers if answers[template][layer] != first[layer]]
        if differ:
            view.problems.append(f"layer {differ[0]} is found under another key when vLLM names it "
                                 f"{template.format(layer=differ[0])!r} ({len(differ)} layer(s) differ)")
    for key in raw:
        if key not in reached:
            view.problems.append(f"key {key[:80]!r} is looked up by no MoE layer (the patch looks for "
                                 f"{layer_names[0].format(layer='<N>')!r}, N in {_span(moe_layers)}); its experts "
                                 "would stay on the GPU")
        elif len(reached[key]) > 1:
            view.problems.append(f"key {key[:80]!r} is matched by {len(reached[key])} layers' lookups (e.g. "
                                 f"{sorted(reached[key])[:3]}); name each layer in full")
    for layer in moe_layers:
        key = first[layer]
        if key is None:
            continue
        view.layers_found.append(layer)
        entry = raw[key]
        if not isinstance(entry, list):
            view.problems.append(f"{key}: expected a list of expert ids, got {type(entry).__name__} (the patch would "
                                 "iterate it)")
            continue
        bad = [e for e in entry if type(e) is not int]
        if bad:
            view.problems.append(f"{key}: {len(bad)} entr{'y is' if len(bad) == 1 else 'ies are'} not JSON integers "
                                 f"(e.g. {bad[0]!r}); the patch would take int() of it")
            continue
        view.problems += _id_problems(key, entry, n_exp)
        view.host_experts[layer] = sorted(set(entry))  # the patch: sorted(set(int(e) ...)), empty -> none
    view.problems = inputs.summarize(view.problems)
    return view


def patch_lookup(mapping: dict[str, Any], layer_name: str) -> str | None:
    """The key the dsv41 patch's ``_host_plan_for`` takes for ``layer_name``: the exact key; when that is absent, the
    first key in file order that ends with the name or that the name ends with."""
    if mapping.get(layer_name) is not None:
        return layer_name
    for key in mapping:
        if key.endswith(layer_name) or layer_name.endswith(key):
            return key
    return None


def _id_problems(what: str, ids: list[int], n_exp: int) -> list[str]:
    out = []
    over = [e for e in ids if not 0 <= e < n_exp]
    if over:
        out.append(f"{what}: expert id {over[0]} is out of range (a layer has {n_exp} experts, ids 0-{n_exp - 1})")
    if len(set(ids)) != len(ids):
        twice = sorted({e for e in ids if ids.count(e) > 1})
        out.append(f"{what} lists expert {twice[0]} twice")
    return out


def differences(view: PatchView, expected: PlanFile) -> list[str]:
    want = {int(k): sorted(v) for k, v in expected.host_experts.items() if v}
    got = {k: v for k, v in view.host_experts.items() if v}
    out = []
    for layer in sorted(set(want) | set(got)):
        if want.get(layer, []) != got.get(layer, []):
            out.append(f"layer {layer}: the offload part would keep {len(got.get(layer, []))} expert(s) on host, "
                       f"the plan says {len(want.get(layer, []))}; write the file again from the plan")
    return inputs.summarize(out)


def _looks_like(raw: Any) -> str:
    fmt = sniff(raw)
    return f"it looks like a {fmt} file" if fmt else "its keys are " + ", ".join(repr(k) for k in list(raw)[:3])


def _span(layers: list[int]) -> str:
    return f"{min(layers)}-{max(layers)}" if layers else "none"


# ----------------------------------------------------------------------------------------------------------------
# A stack's plans as its offload part gets them (`stack check`)


def stack_plan_report(stack: "Stack") -> tuple[dict[str, Any] | None, list[str]]:
    """What the stack's offload part gets (format, variable, reader, each plan's files) and every plan file present in
    the wrong format or not covering the model. Files not made yet are reported as missing, not as problems."""
    plans = stack.spec.plans
    if plans is None:
        return None, []
    reader = plans.reader()
    info: dict[str, Any] = {
        "format": plans.format, "env": plans.env, "use": plans.use,
        "read_by": plans.read_by.model_dump() if plans.read_by else None,
        "reader_known": reader is not None, "reader_provenance": reader.provenance if reader else None,
        "format_provenance": plans.format_provenance, "files": {}}
    layers = _model_layers(stack)
    problems: list[str] = []
    weights = _weight_format(stack)
    info["weight_format"] = weights
    if reader is not None and reader.weight_formats and weights not in reader.weight_formats:
        problems.append(f"the plan's reader ({plans.read_by.patch if plans.read_by else '?'}) loads only "
                        f"{'/'.join(reader.weight_formats)} weights and the stack serves {weights} weights "
                        "(server.flags.quantization, else the model's config.json): no layer would read the plan; "
                        "serve the weights in a format the reader loads or use another offload part")
    for name, spec in plans.files.items():
        source, served = stack.resolve(spec.path), stack.resolve(plans.served_path(name))
        row: dict[str, Any] = {"path": str(source), "served_path": str(served),
                               "present": source.is_file(), "served_present": served.is_file()}
        info["files"][name] = row
        own = _own_plan(source, problems, f"plan {name}") if source.is_file() else None
        if not served.is_file() or (served == source and own is None):
            continue
        moe, n_exp = layers or _layers_from(own) or (None, None)
        if moe is None or n_exp is None:
            fmt = sniff(_raw_or_none(served))
            if fmt != plans.format:
                problems.append(f"plan {name}: {served} is {'a ' + fmt + ' file' if fmt else 'in no known format'}, "
                                f"the offload part reads {plans.format}")
            row["checked_against"] = None
            continue
        view = read_as(served, plans.format, moe, n_exp, expected=own)
        row.update({"checked_against": "model" if layers else "the plan's checkpoint", **view.summary()})
        problems += [f"plan {name}: {served} as {plans.format}: {p}" for p in view.problems]
    return info, problems


def _weight_format(stack: "Stack") -> str:
    """The weights' format as vLLM will load them: server.flags.quantization, else the model's config.json
    ``quantization_config.quant_method``, else its dtype (unquantized)."""
    q = stack.spec.server.flags.quantization
    if q:
        return str(q)
    cfg_path = stack.model_path / "config.json"
    if cfg_path.is_file():
        try:
            cfg = inputs.read_json(cfg_path, "config.json", expect=dict)
        except InputError:
            return "unknown"
        qc = cfg.get("quantization_config")
        if isinstance(qc, dict) and qc.get("quant_method"):
            return str(qc["quant_method"])
        return str(cfg.get("torch_dtype") or cfg.get("dtype") or "unquantized")
    return "unquantized"


def _own_plan(path: Path, problems: list[str], what: str) -> PlanFile | None:
    try:
        from offload_lab.fit.plan_file import read_plan

        return read_plan(path)
    except InputError as e:
        problems.append(f"{what}: {path} is not an offload-lab plan ({e})")
        return None


def _raw_or_none(path: Path) -> Any:
    try:
        return parse_plan_json(inputs.decode_utf8(inputs.read_bytes(path, "plan file", PLAN_MAX_BYTES), path,
                                                  "plan file"), f"plan file {path}")
    except InputError:
        return None


def _layers_from(plan: PlanFile | None) -> tuple[list[int], int] | None:
    ref = plan.checkpoint if plan is not None else None
    if ref is None or ref.moe_layers is None or ref.experts_per_layer is None:
        return None
    return list(ref.moe_layers), ref.experts_per_layer


def _model_layers(stack: "Stack") -> tuple[list[int], int] | None:
    """The MoE layers and experts per layer of the stack's model, when its headers are here."""
    from offload_lab.fit import checkpoint

    model = stack.model_path
    if not (model.is_dir() and any(model.glob("*.safetensors"))):
        return None
    cls = checkpoint.classify(checkpoint.read_checkpoint(model))
    return cls.moe_layers(), max((e for _, e in cls.expert_bytes()), default=-1) + 1
