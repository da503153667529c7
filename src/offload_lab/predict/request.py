"""What ``pod predict``, ``pod model check`` and ``compare-prediction`` are asked, typed once (their flags come from
these models through cli/model_options.py), and the calls that answer them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from offload_lab.core.commands import data_dir_field
from offload_lab.core.errors import InputError
from offload_lab.core.outcome import Outcome

DEFAULT_TEAMS = [20, 100, 250]  # the study's costed team sizes (published E12), when neither flag nor campaign says
TRANSCRIPTION = Path("configs/published/study.yaml")


class PredictRequest(BaseModel):
    """A pod to predict: a stack file, or a pod described by its parts; and the team to answer for."""

    model_config = ConfigDict(extra="forbid")

    stack: Path | None = Field(None, description="stack file (its pod:, model, flags, plan and price)")
    config: Path | None = Field(None, description="the model's config.json (or its folder); replaces a stack's model")
    gpu: str | None = Field(None, description="GPU from the catalog (e.g. h100-sxm, rtx-pro-6000-blackwell)")
    gpus: int = Field(1, ge=1, le=64, description="GPUs in the pod")
    tp: int | None = Field(None, ge=1, le=64, description="tensor parallel size (default: every GPU)")
    link: str | None = Field(None, description="host link from the catalog (default: the GPU's own)")
    host_ram: float | None = Field(None, gt=0, le=1e6, description="host RAM in GiB")
    host_memory: str | None = Field(None, description="host DRAM kind from the catalog (e.g. ddr5-4800)")
    channels: int | None = Field(None, ge=1, le=64, description="host DRAM channels")
    spec_tokens: int = Field(0, ge=0, le=16, description="speculative tokens per step")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="vLLM's share of GPU memory")
    max_model_len: int | None = Field(None, ge=1024, description="the longest context (default: the config's)")
    price: str | None = Field(None, description="pod price an hour with its currency, e.g. '2.50 USD'")
    currency: str | None = Field(None, description="currency of a bare --price/--seat-price (e.g. USD)")
    seat_price: str | None = Field(None, description="a seat's subscription a month, e.g. '180 EUR' "
                                                     "(default: the study's)")
    team_sizes: list[int] = Field(default_factory=lambda: list(DEFAULT_TEAMS), description="team sizes")
    alpha: float = Field(0.01, gt=0, lt=1, description="allowed chance that more developers generate than streams")
    q: float | None = Field(None, gt=0, lt=1, description="chance a developer is generating (default: the study's)")
    bar_tok_s: float = Field(40.0, gt=0, le=1e6, validation_alias=AliasChoices("bar_tok_s", "bar"),
                             description="tok/s per stream a stream must keep")
    margin: float = Field(0.10, ge=0, le=1, description="margin over the bar")
    context: int = Field(88000, ge=1, description="context tokens a stream holds")
    hardware: Path | None = Field(None, description="a YAML file of more GPUs, links and host memory")
    out: Path | None = Field(None, description="write the predicted pod model here (for campaign rehearse)")


class CheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: Path = Field(description="pod model YAML (e.g. configs/pods/study-published.yaml)")


class CompareRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A campaign *file* (everywhere else --campaign is a campaign's name): the field is named so (pod plan's too).
    campaign_file: Path = Field(validation_alias=AliasChoices("campaign_file", "campaign"),
                                description="campaign file whose runs to compare (e.g. "
                                            "configs/campaigns/reference.yaml)")
    data_dir: Path = data_dir_field()
    hardware: Path | None = Field(None, description="a YAML file of more GPUs, links and host memory")


def _study_figure(key: str) -> Any:
    from offload_lab.published.transcription import load_transcription

    return next(f for f in load_transcription(TRANSCRIPTION).figures if f.key == key)


def _seat_price(req: PredictRequest, currency: str | None) -> tuple[float | None, str | None]:
    from offload_lab.predict.pod import parse_price

    if req.seat_price is not None:
        v, cur = parse_price(req.seat_price, req.currency or currency)
        if currency and cur != currency:
            raise InputError(f"--seat-price is in {cur} and the pod's price in {currency}; give both in one currency "
                             "(offload-lab converts no currencies)")
        return v, f"--seat-price {req.seat_price}"
    try:
        fig = _study_figure("seat_eur_per_month")
    except (OSError, StopIteration, InputError):  # no transcription here: ask for the flag
        return None, None
    v, cur = float(fig.value), "EUR"
    if currency and cur != currency:
        return None, (f"no subscription price in {currency}: the study's is {v:g} {cur}; give --seat-price "
                      f"'N {currency}'")
    return v, f"published E12: {fig.published}"


def predict(req: PredictRequest) -> dict[str, Any]:
    """The answer for a pod: fits, tok/s per stream, streams kept, seats and cost, all predicted; for the study's own
    stack also the published figures beside their predictions, E9 and the home rigs."""
    from offload_lab.predict import answer as ans, study
    from offload_lab.predict.catalog import load_catalog
    from offload_lab.predict.physics import Predictor
    from offload_lab.predict.pod import from_description, from_stack, measured_link_efficiency, parse_price
    from offload_lab.predict.podfile import pod_model_dict, to_yaml

    cat = load_catalog(req.hardware)
    if req.stack:
        pin = from_stack(req.stack, cat, model=req.config)
        if req.price is not None:
            pin.price_per_hour, pin.currency = parse_price(req.price, req.currency or pin.currency)
    elif req.config and req.gpu:
        pin = from_description(req.config, req.gpu, req.gpus, cat, link=req.link, host_ram_gib=req.host_ram,
                               host_memory=req.host_memory, channels=req.channels, price=req.price,
                               currency=req.currency, tp=req.tp, spec_tokens=req.spec_tokens,
                               util=req.gpu_memory_utilization, max_model_len=req.max_model_len)
    else:
        raise InputError("pod predict: give a stack file, or a pod on the command line: --config CONFIG.json "
                         "--gpu GPU [--gpus N --host-ram GIB --link LINK --price '2.50 USD']")
    cal = study.calibrate(cat)
    study_p = cal.pop("predictor")
    factors = dataclasses.replace(study_p.factors, link_efficiency=measured_link_efficiency(cat, pin.pod.link) or 1.0)
    p = Predictor(pin.shape, pin.pod, pin.serving, factors)
    if req.q is not None:
        q, q_src = req.q, "--q"
    else:
        fig = _study_figure("week_q")
        q, q_src = float(fig.value), f"published E11: {fig.published}"
    seat, seat_src = _seat_price(req, pin.currency)
    team = ans.Team(sizes=ans.parse_sizes(req.team_sizes), alpha=req.alpha, q=q, q_source=q_src,
                    bar_tok_s=req.bar_tok_s, margin=req.margin, context_tokens=req.context, seat_price=seat,
                    seat_source=seat_src)
    out: dict[str, Any] = {"label": ans.LABEL, "pod": pin.name, "hardware": dataclasses.asdict(pin.pod),
                           "provenance": pin.provenance, "factor_sources": cal["factor_sources"],
                           "answer": ans.answer(pin, p, team)}
    if req.stack and Path(req.stack).resolve() == (Path.cwd() / study.STUDY_STACK).resolve():
        out["figures"] = [{k: f[k] for k in ("name", "published", "predicted", "fitted", "unit", "ratio",
                                             "measured_on", "note")} for f in cal["figures"]]
        out |= {"summary": cal["summary"], "not_predicted": cal["not_predicted"],
                "e9": study.predict_e9(study_p.factors, cat), "home_rigs": study.home_rig_bounds(study_p.factors, cat)}
    if req.out:
        from offload_lab.core.runs import atomic_write_text

        atomic_write_text(Path(req.out), to_yaml(pod_model_dict(pin, p, cal["factor_sources"])))
        out["pod_model"] = str(req.out)
    return out


def check(req: CheckRequest) -> dict[str, Any]:
    from offload_lab.emulate.podmodel import check_pod_model

    model, notes = check_pod_model(req.file)
    return {"file": str(req.file), "ok": True, "name": model.name, "predicted": model.is_prediction,
            "derived": model.derived(), "notes": notes}


def compare(req: CompareRequest) -> dict[str, Any]:
    from offload_lab.predict.compare import compare as run

    return run(req.campaign_file, req.data_dir, hardware=req.hardware)


def predict_outcome(req: PredictRequest) -> Outcome:
    """:func:`predict` as the command shows it."""
    out = predict(req)
    lines: list[str] = []
    write = lines.append
    a, f = out["answer"], out["answer"]["fits"]
    write(f"{out['pod']}: {a['verdict']}  [{out['label']}]")
    write(f"  each GPU keeps {f['weights_per_gpu_gib']} GiB of weights (+{f['reserve_gib']} GiB reserve) of "
          f"{f['usable_per_gpu_gib']} GiB usable; {f['host_experts']:,} experts on host ({f['host_ram_needed_gib']} GiB"
          f" of host RAM" + (f" of {f['host_ram_gib']} GiB" if "host_ram_gib" in f else "") + ")")
    if a.get("plan"):
        write(f"  plan: {a['plan']}")
    if "streams" in a:
        write(f"  predicted tok/s per stream at a {a['context_tokens']:,}-token context (bar {a['bar_tok_s']:g}, "
              f"margin {a['margin']:.0%}):")
        for r in a["streams"]:
            verdict = "meets" if r["meets_bar"] else "misses"
            write(f"    {r['streams']} stream(s): {r['tok_s_per_stream']:8.1f}  {verdict}")
        write(f"  streams kept: {a['streams_kept']} (speed {a['streams_kept_by_speed']}, KV cache room "
              f"{a['streams_kept_by_kv']})")
    if "seats_per_pod" in a:
        write(f"  seats at alpha {a['alpha']:g} (q {a['q']['value']:.3g}, {a['q']['source']}): "
              f"{a['seats_per_pod']} developers per pod  [predicted]")
        for t in a["teams"]:
            money = (f": {t['self_hosted_per_month']:,.0f} {t['currency']} a month against "
                     f"{t['subscriptions_per_month']:,.0f} {t['currency']} of subscriptions "
                     f"({t['saving_fraction']:+.0%})") if "currency" in t else ""
            write(f"    team of {t['team']}: {t['pods']} pod(s){money}  [predicted]")
        pr = a.get("price") or {}
        if pr.get("seat_per_month") is None:
            write(f"  cost: {pr.get('seat_source') or 'give --price and --seat-price to cost the teams'}")
    for fig in out.get("figures", []):
        tag = "fitted" if fig["fitted"] else "predicted"
        write(f"  {fig['name']}: published {fig['published']:g}, {tag} {fig['predicted']:.4g} "
              f"(x{fig['ratio']:.2f}, {fig['measured_on']})" + (" [see note in --json]" if fig.get("note") else ""))
    if out.get("summary"):
        s = out["summary"]
        write(f"  {s['predicted_figures']} figures predicted: median error {s['median_abs_error']:.1%}, worst "
              f"x{s['worst_factor']:.2f}")
    if out.get("pod_model"):
        write(f"  pod model written to {out['pod_model']} (campaign rehearse --pod-model {out['pod_model']})")
    return Outcome(out, lines)


def check_outcome(req: CheckRequest) -> Outcome:
    """:func:`check` as the command shows it."""
    r = check(req)
    out: list[str] = []
    write = out.append
    kind = "predicted from hardware" if r["predicted"] else "hand-written or published"
    write(f"{r['file']}: a valid pod model ({r['name']}, {kind})")
    for n in r["notes"]:
        write(f"  note: {n}")
    return Outcome(r, out)


def compare_outcome(req: CompareRequest) -> Outcome:
    """:func:`compare` as the command shows it."""
    r = compare(req)
    out: list[str] = []
    write = out.append
    write(f"{r['campaign']} on {r['pod']}: {r['basis']}")
    write(f"  {'figure':<40} {'measured':>10} {'predicted':>10} {'ratio':>7}  run")
    for f in r["figures"]:
        ratio = "fitted" if f.get("fitted") else (f"x{f['ratio']:.2f}" if f["ratio"] else "-")
        measured = "-" if f["measured"] is None else f"{f['measured']:.4g}"
        write(f"  {f['name']:<40} {measured:>10} {f['predicted']:>10.4g} {ratio:>7}  {f['run'] or '-'}")
    for m in r["missing"]:
        write(f"  missing: {m['figure']}: {m['why']}")
    s = r["summary"]
    if s["compared"]:
        write(f"  {s['compared']} figures compared: median error {s['median_abs_error']:.1%}, "
              f"worst x{s['worst_factor']:.2f}")
    return Outcome(r, out)
