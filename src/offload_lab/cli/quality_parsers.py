"""``offload-lab quality run|compare|paired|subset|selfcheck``: flags and printing. What each command does is in
:mod:`offload_lab.cli.quality`; flag types (which name the flag in every refusal) in :mod:`offload_lab.cli.common`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from offload_lab.cli.common import action_group, endpoint_url, nonneg_int, positive_int
from offload_lab.cli.common import finish_parser
from offload_lab.cli.common import print_json as _print_json


# --- quality -----------------------------------------------------------------------------------------------------

def _quality_out(args: argparse.Namespace, result: Any, lines: list[str]) -> None:
    if getattr(args, "json", False):
        _print_json(result)
    else:
        print("\n".join(lines))


def cmd_quality_run(args: argparse.Namespace) -> int:
    from offload_lab.cli import quality as commands

    r = commands.run(args)
    lines = [f"side {args.label}: {'valid' if r['valid'] else 'INVALID (kept, not scored)'}; run {r['run']}"]
    lines += [f"  {why}" for why in r["invalid_reasons"]]
    for row in r["summary"] or []:
        lines.append(f"  {row['benchmark']} replicate {row['replicate']}: {row['correct']}/{row['answered']} "
                     f"correct of {row['items']} items")
    _quality_out(args, r, lines)
    return 0 if r["valid"] else 1


def cmd_quality_compare(args: argparse.Namespace) -> int:
    from offload_lab.cli import quality as commands

    r = commands.compare(args)
    lines = [f"comparison written to {r['run']} (delta = local minus reference)"]
    for row in r["comparison"]:
        lines.append(f"  {row['benchmark']}: n={row['n']} delta={row['delta']:+.3f} "
                     f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}] b={row['b']} c={row['c']} "
                     f"McNemar p={row['mcnemar_p']:.3g} flips={row['flip_fraction']:.3f}")
    _quality_out(args, r, lines)
    return 0


def cmd_quality_paired(args: argparse.Namespace) -> int:
    from offload_lab.cli import quality as commands

    r = commands.paired_counts(args)
    _quality_out(args, r, [
        f"delta {r['delta']:+.4f}, paired bootstrap 95% [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}], "
        f"Newcombe [{r['newcombe_low']:+.4f}, {r['newcombe_high']:+.4f}]",
        f"exact McNemar p {r['mcnemar_p']:.4g} (b={r['b']}, c={r['c']}); flip fraction {r['flip_fraction']:.4f} "
        f"[{r['flip_ci_low']:.4f}, {r['flip_ci_high']:.4f}]; smallest resolvable difference "
        f"{r['resolvable_delta']:.4f}",
    ])
    return 0


def cmd_quality_subset(args: argparse.Namespace) -> int:
    from offload_lab.cli import quality as commands

    r = commands.subset(args)
    _quality_out(args, r, [json.dumps(x) for x in r])
    return 0


def cmd_quality_selfcheck(args: argparse.Namespace) -> int:
    from offload_lab.cli import quality as commands

    r = commands.selfcheck(args)
    _quality_out(args, r, [f"HumanEval scorer: {r['canonical_passed']}/{r['problems']} canonical solutions pass, "
                           f"{r['empty_passed']} empty completions pass"])
    return 0


def run_options(parser: argparse.ArgumentParser) -> None:
    """`quality run`'s flags, from the two models it fills: the side's endpoint and the experiment's parameters.
    Each flag's help is its field's description; ``args.quality_options`` builds the models back."""
    from offload_lab.cli.model_options import Option, add_model_options
    from offload_lab.experiments.quality.runner import QualityParams
    from offload_lab.quality.endpoints import EndpointSpec

    endpoint = add_model_options(parser, EndpointSpec, (
        "url", "kind", "label", "model", "api_key_env", "seed", "concurrency", "retries", "timeout_s"), {
        "url": Option(aliases=("--endpoint",), parse=endpoint_url, required=True, metavar="URL"),
        "timeout_s": Option(flag="--timeout")})
    params = add_model_options(parser, QualityParams, (
        "benchmarks", "limit", "replicates", "max_tokens", "exec_timeout_s", "on_canary_failure", "datasets",
        "allow_download"), _param_options())
    parser.set_defaults(quality_options=(endpoint, params))


def _params_options(parser: argparse.ArgumentParser, *fields: str) -> None:
    """Flags for some QualityParams fields; the handler reads them from ``args.params_options.build(...)``."""
    from offload_lab.cli.model_options import add_model_options
    from offload_lab.experiments.quality.runner import QualityParams

    parser.set_defaults(params_options=add_model_options(parser, QualityParams, fields,
                                                         {f: o for f, o in _param_options().items() if f in fields}))


def _param_options() -> dict[str, Any]:
    from offload_lab.cli.model_options import Option
    from offload_lab.cli.quality import parse_max_tokens

    return {"benchmarks": Option(flag="--benchmark", parse=_benchmark_list, metavar="NAMES"),
            "max_tokens": Option(parse=parse_max_tokens, metavar="N|BENCH=N,..."),
            "exec_timeout_s": Option(flag="--exec-timeout"), "allow_download": Option(flag="--download")}


def _benchmark_list(text: str) -> list[str]:
    from offload_lab.cli.quality import benchmark_names

    return benchmark_names(text)


def add_parsers(sub: Any) -> None:
    """Register ``quality`` and its actions on the top-level subparsers."""
    qsub = action_group(sub, "quality", "paired answer-quality comparison (GSM8K, IFEval, HumanEval)",
                        "Compare answer quality of two OpenAI-compatible endpoints (the local stack "
                        "and a reference API) on fixed subsets of GSM8K, IFEval and HumanEval, item by "
                        "item, with paired statistics. API keys come only from environment variables.")
    qr = qsub.add_parser("run", help="answer the fixed subsets with one endpoint and score them",
                         description="Run the canaries (continuation, thinking off, finish reason), then every item "
                                     "of the chosen benchmarks, into a new run of experiment quality-side. Every "
                                     "request, response and status is kept per item. A side whose canaries fail is "
                                     "marked invalid and kept, never scored; the exit status is then 1.")
    run_options(qr)
    finish_parser(qr, cmd_quality_run, campaign="scratch", data_dir=True, json_help="print the result as JSON")
    qc = qsub.add_parser("compare", help="compare two scored sides item by item",
                         description="Copy two sides (from `quality run`) into a new run of experiment quality and "
                                     "compare them per benchmark: difference (local minus reference) with a paired "
                                     "bootstrap 95% interval and Newcombe's interval, exact McNemar p, b and c, flip "
                                     "fraction with a Wilson interval, the smallest resolvable difference, and each "
                                     "side's noise floor (replicate 0 against 1). Invalid sides are refused.")
    qc.add_argument("--reference", required=True, help="the reference side: a quality-side run directory or its "
                                                       "sides/<label> directory")
    qc.add_argument("--local", required=True, help="the local side, likewise")
    _params_options(qc, "resamples", "seed")
    finish_parser(qc, cmd_quality_compare, campaign="scratch", data_dir=True, json_help="print the result as JSON")
    qp = qsub.add_parser("paired", help="paired statistics from counts, for planning and checking",
                         description="From n items, b (only the reference right) and c (only local right): the "
                                     "difference (c-b)/n with its paired bootstrap 95% interval (ci_low, ci_high) "
                                     "and Newcombe's, exact McNemar p, the flip fraction (b+c)/n with its Wilson "
                                     "interval, and the smallest resolvable difference.")
    qp.add_argument("--n", type=positive_int, required=True, help="paired items")
    qp.add_argument("--b", type=nonneg_int, required=True, help="items only the reference got right")
    qp.add_argument("--c", type=nonneg_int, required=True, help="items only the local side got right")
    qp.add_argument("--a", type=nonneg_int, default=None,
                    help="items both got right (only Newcombe's interval uses it; default: every agreeing item)")
    _params_options(qp, "resamples", "seed")
    finish_parser(qp, cmd_quality_paired,
                  json_help="print JSON (keys include delta, ci_low, ci_high, mcnemar_p, flip_fraction)")
    qs = qsub.add_parser("subset", help="check (or, once, write) the fixed item subsets",
                         description="Check that each stored subset is what its recorded seed draws from the pinned "
                                     "data file; --write draws and stores a subset (done once, then committed).")
    _params_options(qs, "benchmarks", "datasets", "allow_download")
    qs.add_argument("--write", action="store_true", help="draw and store the subset instead of checking it")
    qs.add_argument("--n", type=positive_int, default=None, help="with --write: subset size (default 150, 150, 164)")
    qs.add_argument("--seed", type=nonneg_int, default=20261129,
                    help="with --write: the seed to record (default 20261129)")
    finish_parser(qs, cmd_quality_subset, json_help="print JSON")
    qk = qsub.add_parser("selfcheck", help="check the HumanEval scorer: canonical solutions pass, empty ones fail",
                         description="Run the 164 canonical solutions (all must pass) and 164 empty completions "
                                     "(none may pass) in subprocesses, in parallel; exit 2 when either fails.")
    _params_options(qk, "exec_timeout_s")
    finish_parser(qk, cmd_quality_selfcheck, json_help="print JSON")
