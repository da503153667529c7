"""``offload-lab pod predict`` and ``offload-lab pod model check``: a pod predicted from hardware figures (the
catalog, the model's config, the stack's flags), the answer for a team, and a fast check of a pod model file."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from offload_lab.cli.common import finite_float, int_at_least, price, probability, token_rate
from offload_lab.cli.common import print_json as _print_json

DEFAULT_TEAMS = "20,100,250"  # the study's costed team sizes (published E12), when neither flag nor campaign says


def _study_q() -> tuple[float, str]:
    from offload_lab.published.transcription import load_transcription

    t = load_transcription(Path("configs/published/study.yaml"))
    fig = next(f for f in t.figures if f.key == "week_q")
    return float(fig.value), f"published E11: {fig.published}"


def _study_seat() -> tuple[float, str, str]:
    from offload_lab.published.transcription import load_transcription

    t = load_transcription(Path("configs/published/study.yaml"))
    fig = next(f for f in t.figures if f.key == "seat_eur_per_month")
    return float(fig.value), "EUR", f"published E12: {fig.published}"


def _seat_price(args: argparse.Namespace, currency: str | None) -> tuple[float | None, str | None]:
    from offload_lab.core.errors import InputError
    from offload_lab.predict.pod import parse_price

    if args.seat_price is not None:
        v, cur = parse_price(args.seat_price, args.currency or currency)
        if currency and cur != currency:
            raise InputError(f"--seat-price is in {cur} and the pod's price in {currency}; give both in one currency "
                             "(offload-lab converts no currencies)")
        return v, f"--seat-price {args.seat_price}"
    try:
        v, cur, src = _study_seat()
    except (OSError, StopIteration, Exception):  # noqa: BLE001  (no transcription here: ask for the flag)
        return None, None
    if currency and cur != currency:
        return None, (f"no subscription price in {currency}: the study's is {v:g} {cur}; give --seat-price "
                      f"'N {currency}'")
    return v, src


def cmd_pod_predict(args: argparse.Namespace) -> int:
    from offload_lab.core.errors import InputError
    from offload_lab.predict import answer as ans, study
    from offload_lab.predict.catalog import load_catalog
    from offload_lab.predict.physics import Predictor
    from offload_lab.predict.pod import from_description, from_stack, measured_link_efficiency
    from offload_lab.predict.podfile import pod_model_dict, to_yaml

    cat = load_catalog(args.hardware)
    if args.stack:
        pin = from_stack(args.stack, cat, model=args.config)
        if args.price is not None:
            from offload_lab.predict.pod import parse_price
            pin.price_per_hour, pin.currency = parse_price(args.price, args.currency or pin.currency)
    else:
        if not (args.config and args.gpu):
            raise InputError("pod predict: give a stack file, or a pod on the command line: --config CONFIG.json "
                             "--gpu GPU [--gpus N --host-ram GIB --link LINK --price '2.50 USD']")
        pin = from_description(args.config, args.gpu, args.gpus, cat, link=args.link, host_ram_gib=args.host_ram,
                               host_memory=args.host_memory, channels=args.channels, price=args.price,
                               currency=args.currency, tp=args.tp, spec_tokens=args.spec_tokens,
                               util=args.gpu_memory_utilization, max_model_len=args.max_model_len)
    cal = study.calibrate(cat)
    study_p = cal.pop("predictor")
    eff = measured_link_efficiency(cat, pin.pod.link) or 1.0
    factors = dataclasses.replace(study_p.factors, link_efficiency=eff)
    p = Predictor(pin.shape, pin.pod, pin.serving, factors)
    q, q_src = (args.q, "--q") if args.q is not None else _study_q()
    seat, seat_src = _seat_price(args, pin.currency)
    team = ans.Team(sizes=ans.parse_sizes(args.team_sizes), alpha=args.alpha, q=q, q_source=q_src,
                    bar_tok_s=args.bar, margin=args.margin, context_tokens=args.context, seat_price=seat,
                    seat_source=seat_src)
    out: dict[str, Any] = {"label": ans.LABEL, "pod": pin.name, "hardware": dataclasses.asdict(pin.pod),
                           "provenance": pin.provenance, "factor_sources": cal["factor_sources"],
                           "answer": ans.answer(pin, p, team)}
    is_study = bool(args.stack) and Path(args.stack).resolve() == (Path.cwd() / study.STUDY_STACK).resolve()
    if is_study:
        out["figures"] = [{k: f[k] for k in ("name", "published", "predicted", "fitted", "unit", "ratio",
                                             "measured_on")} for f in cal["figures"]]
        out["summary"] = cal["summary"]
        out["not_predicted"] = cal["not_predicted"]
        out["e9"] = study.predict_e9(study_p.factors, cat)
        out["home_rigs"] = study.home_rig_bounds(study_p.factors, cat)
    if args.out:
        from offload_lab.core.runs import atomic_write_text

        atomic_write_text(Path(args.out), to_yaml(pod_model_dict(pin, p, cal["factor_sources"])))
        out["pod_model"] = str(args.out)
    if args.json:
        _print_json(out)
        return 0
    _print_answer(out)
    return 0


def _print_answer(out: dict[str, Any]) -> None:
    a = out["answer"]
    print(f"{out['pod']}: {a['verdict']}  [{out['label']}]")
    f = a["fits"]
    print(f"  each GPU keeps {f['weights_per_gpu_gib']} GiB of weights (+{f['reserve_gib']} GiB reserve) of "
          f"{f['usable_per_gpu_gib']} GiB usable; {f['host_experts']:,} experts on host ({f['host_ram_needed_gib']} GiB"
          f" of host RAM" + (f" of {f['host_ram_gib']} GiB" if "host_ram_gib" in f else "") + ")")
    if a.get("plan"):
        print(f"  plan: {a['plan']}")
    if "streams" in a:
        print(f"  predicted tok/s per stream at a {a['context_tokens']:,}-token context (bar {a['bar_tok_s']:g}, "
              f"margin {a['margin']:.0%}):")
        for r in a["streams"]:
            print(f"    {r['streams']} stream(s): {r['tok_s_per_stream']:8.1f}  {'meets' if r['meets_bar'] else 'misses'}")
        print(f"  streams kept: {a['streams_kept']} (speed {a['streams_kept_by_speed']}, KV cache room "
              f"{a['streams_kept_by_kv']})")
    if "seats_per_pod" in a:
        print(f"  seats at alpha {a['alpha']:g} (q {a['q']['value']:.3g}, {a['q']['source']}): "
              f"{a['seats_per_pod']} developers per pod  [predicted]")
        for t in a["teams"]:
            money = ""
            if "currency" in t:
                money = (f": {t['self_hosted_per_month']:,.0f} {t['currency']} a month against "
                         f"{t['subscriptions_per_month']:,.0f} {t['currency']} of subscriptions "
                         f"({t['saving_fraction']:+.0%})")
            print(f"    team of {t['team']}: {t['pods']} pod(s){money}  [predicted]")
        pr = a.get("price") or {}
        if pr.get("seat_per_month") is None:
            print(f"  cost: {pr.get('seat_source') or 'give --price and --seat-price to cost the teams'}")
    for fig in out.get("figures", []):
        tag = "fitted" if fig["fitted"] else "predicted"
        print(f"  {fig['name']}: published {fig['published']:g}, {tag} {fig['predicted']:.4g} "
              f"(x{fig['ratio']:.2f}, {fig['measured_on']})")
    if out.get("summary"):
        s = out["summary"]
        print(f"  {s['predicted_figures']} figures predicted: median error {s['median_abs_error']:.1%}, worst "
              f"x{s['worst_factor']:.2f}")
    if out.get("pod_model"):
        print(f"  pod model written to {out['pod_model']} (campaign rehearse --pod-model {out['pod_model']})")


def cmd_pod_model_check(args: argparse.Namespace) -> int:
    from offload_lab.emulate.podmodel import check_pod_model

    model, notes = check_pod_model(args.file)
    r = {"file": str(args.file), "ok": True, "name": model.name, "predicted": model.is_prediction,
         "derived": model.derived(), "notes": notes}
    if args.json:
        _print_json(r)
    else:
        kind = "predicted from hardware" if model.is_prediction else "hand-written or published"
        print(f"{args.file}: a valid pod model ({model.name}, {kind})")
        for n in notes:
            print(f"  note: {n}")
    return 0


def add_parsers(sub: Any) -> None:
    """``pod predict`` and ``pod model check``, added to the ``pod`` group that cli/pods.py registers."""
    pod_parser = sub.choices.get("pod")
    if pod_parser is None:  # the pod group is registered elsewhere; without it, stand alone
        pod_parser = sub.add_parser("pod", help="pods")
    psub = next((a for a in pod_parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if psub is None:
        psub = pod_parser.add_subparsers(dest="pod_command", metavar="ACTION")
    p = psub.add_parser(
        "predict", help="predict a pod from hardware figures: fits, tok/s per stream, seats and cost (predicted)",
        description="Derive a pod from the hardware catalog, the model's config and the stack's flags (or a pod "
                    "described on the command line), with the free factors fitted on the study's published figures; "
                    "print whether the model fits, the predicted tok/s per stream at 1-8 streams against the bar, the "
                    "streams a pod keeps, seats at alpha and pods and cost for the team sizes. Every figure is a "
                    "prediction. Nothing is written unless --out is given (a pod model for campaign rehearse).")
    p.add_argument("stack", nargs="?", help="stack file (its pod:, model, flags, plan and price)")
    p.add_argument("--config", help="the model's config.json (or its directory); with a stack: replaces its model")
    p.add_argument("--gpu", help="GPU from the catalog (e.g. h100-sxm, rtx-pro-6000-blackwell, b300)")
    p.add_argument("--gpus", type=int_at_least(1, 64), default=1, help="GPUs in the pod (default: 1)")
    p.add_argument("--tp", type=int_at_least(1, 64), help="tensor parallel size (default: every GPU)")
    p.add_argument("--link", help="host link from the catalog (default: the GPU's own, e.g. pcie-gen5-x16)")
    p.add_argument("--host-ram", type=finite_float(0, 1e6, low_open=True), help="host RAM in GiB")
    p.add_argument("--host-memory", help="host DRAM kind from the catalog (e.g. ddr5-4800), with --channels")
    p.add_argument("--channels", type=int_at_least(1, 64), help="host DRAM channels")
    p.add_argument("--spec-tokens", type=int_at_least(0, 16), default=0, help="speculative tokens per step")
    p.add_argument("--gpu-memory-utilization", type=probability, default=0.9, help="vLLM's (default: 0.9)")
    p.add_argument("--max-model-len", type=int_at_least(1024), help="the longest context (default: the config's)")
    p.add_argument("--price", help="pod price an hour with its currency, e.g. '2.50 USD' (a stack's own by default)")
    p.add_argument("--currency", help="currency of --price/--seat-price when they give a bare number (e.g. USD)")
    p.add_argument("--seat-price", help="subscription a seat a month, e.g. '180 EUR' (default: the study's, if "
                                        "the currency matches)")
    p.add_argument("--team-sizes", default=DEFAULT_TEAMS, help="team sizes, comma-separated (default: %(default)s)")
    p.add_argument("--alpha", type=probability, default=0.01,
                   help="allowed chance that more developers generate than the pods have streams (default: 0.01)")
    p.add_argument("--q", type=probability, help="chance a developer is generating (default: the study's 7.1%%)")
    p.add_argument("--bar", type=token_rate, default=40.0, help="tok/s per stream a stream must keep (default: 40)")
    p.add_argument("--margin", type=finite_float(0, 1), default=0.10, help="margin over the bar (default: 0.10)")
    p.add_argument("--context", type=int_at_least(1), default=88000,
                   help="context tokens a stream holds (default: the study's agent turns, 88,000)")
    p.add_argument("--hardware", help="a YAML file of more GPUs, links and host memory (the catalog's shape)")
    p.add_argument("--out", help="write the predicted pod model here (for campaign rehearse --pod-model)")
    p.add_argument("--json", action="store_true", help="print JSON (with \"figures\" for the study's stack)")
    p.set_defaults(func=cmd_pod_predict)
    _ = price  # the flag types come from cli.common; prices here carry their currency as text

    m = psub.add_parser("model", help="pod model files: check", description="Pod model files (configs/pods/).")
    msub = m.add_subparsers(dest="pod_model_command", metavar="ACTION")
    c = msub.add_parser("check", help="validate a pod model file in well under a second (exit 2 naming the field)",
                        description="Read a pod model file as the emulated pod would and apply its rules once "
                                    "(TPOT, prefill, cached prefill, KV capacity); exit 2 naming the field at fault.")
    c.add_argument("file", help="pod model YAML (e.g. configs/pods/study-published.yaml)")
    c.add_argument("--json", action="store_true", help="print JSON")
    c.set_defaults(func=cmd_pod_model_check)
    _ = sys


__all__ = ["add_parsers"]
