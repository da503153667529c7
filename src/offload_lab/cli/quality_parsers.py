"""``offload-lab quality run|compare|paired|subset|selfcheck``: flags from the models (``EndpointSpec``,
``QualityParams``, and those of :mod:`offload_lab.quality.commands` and
:mod:`offload_lab.experiments.quality.commands`), one call into those layers, the result as text or ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from offload_lab.cli.common import action_group, endpoint_url, print_json
from offload_lab.cli.model_options import Command, Option, add_commands


def _out(args: argparse.Namespace, result: Any, lines: list[str]) -> None:
    print_json(result) if args.json else print("\n".join(lines))


def cmd_quality_run(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.experiments.quality import commands

    filing, local, params = p
    r = commands.run_side(local, params, filing, log=lambda m: print(m, file=sys.stderr, flush=True))
    lines = [f"side {local.label}: {'valid' if r['valid'] else 'INVALID (kept, not scored)'}; run {r['run']}"]
    lines += [f"  {why}" for why in r["invalid_reasons"]]
    lines += [f"  {row['benchmark']} replicate {row['replicate']}: {row['correct']}/{row['answered']} correct of "
              f"{row['items']} items" for row in r["summary"] or []]
    _out(args, r, lines)
    return 0 if r["valid"] else 1


def cmd_quality_compare(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.experiments.quality import commands

    r = commands.compare(*p)
    _out(args, r, [f"comparison written to {r['run']} (delta = local minus reference)"] + [
        f"  {row['benchmark']}: n={row['n']} delta={row['delta']:+.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}] "
        f"b={row['b']} c={row['c']} McNemar p={row['mcnemar_p']:.3g} flips={row['flip_fraction']:.3f}"
        for row in r["comparison"]])
    return 0


def cmd_quality_paired(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.quality import commands

    r = commands.paired_counts(p)
    _out(args, r, [
        f"delta {r['delta']:+.4f}, paired bootstrap 95% [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}], "
        f"Newcombe [{r['newcombe_low']:+.4f}, {r['newcombe_high']:+.4f}]",
        f"exact McNemar p {r['mcnemar_p']:.4g} (b={r['b']}, c={r['c']}); flip fraction {r['flip_fraction']:.4f} "
        f"[{r['flip_ci_low']:.4f}, {r['flip_ci_high']:.4f}]; smallest resolvable difference "
        f"{r['resolvable_delta']:.4f}"])
    return 0


def cmd_quality_subset(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.quality import commands

    how, params = p
    r = commands.subset(how, params.benchmarks, params.datasets, params.allow_download)
    _out(args, r, [json.dumps(x) for x in r])
    return 0


def cmd_quality_selfcheck(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.quality import commands

    r = commands.selfcheck(p.exec_timeout_s)
    _out(args, r, [f"HumanEval scorer: {r['canonical_passed']}/{r['problems']} canonical solutions pass, "
                   f"{r['empty_passed']} empty completions pass"])
    return 0


def add_parsers(sub: Any) -> None:
    """Register ``quality`` and its actions on the top-level subparsers (details in docs/cli.md)."""
    from offload_lab.experiments.quality import commands as exp
    from offload_lab.experiments.quality.runner import QualityParams
    from offload_lab.quality import commands as q
    from offload_lab.quality.endpoints import EndpointSpec

    opts = {"benchmarks": Option(flag="--benchmark", parse=q.benchmark_names, metavar="NAMES"),
            "max_tokens": Option(parse=q.parse_max_tokens, metavar="N|BENCH=N,..."),
            "exec_timeout_s": Option(flag="--exec-timeout"), "allow_download": Option(flag="--download"),
            "datasets": Option(metavar="DIR"), "bootstrap_seed": Option(aliases=("--seed",))}

    def params(*fields: str) -> tuple[Any, tuple[str, ...], dict[str, Option]]:
        return (QualityParams, fields, {f: o for f, o in opts.items() if f in fields})

    as_json = "print the result as JSON"
    add_commands(action_group(sub, "quality", "paired answer-quality comparison (GSM8K, IFEval, HumanEval)",
                              "Compare answer quality of two OpenAI-compatible endpoints on fixed subsets of GSM8K, "
                              "IFEval and HumanEval, item by item, with paired statistics (docs/cli.md). API "
                              "keys come only from environment variables."), [
        Command("run", "answer the fixed subsets with one endpoint and score them", cmd_quality_run,
                exp.FilingParams, json=as_json, also=(
                    (EndpointSpec, exp.ENDPOINT_FIELDS, {
                        "url": Option(aliases=("--endpoint",), parse=endpoint_url, required=True, metavar="URL"),
                        "timeout_s": Option(flag="--timeout"), "api_key_env": Option(metavar="NAME")}),
                    params(*exp.RUN_FIELDS)),
                description="Run the canaries, then the chosen benchmarks, into a new run of quality-side; a "
                            "side whose canaries fail is kept, marked invalid, never scored (exit 1)."),
        Command("compare", "compare two scored sides item by item", cmd_quality_compare, exp.CompareSidesParams,
                json=as_json, also=(params("resamples", "bootstrap_seed"),),
                description="Copy two sides (from `quality run`) into a new run of quality and compare them per "
                            "benchmark: difference with paired bootstrap and Newcombe intervals, exact McNemar p, "
                            "flip fraction, the smallest resolvable difference. Invalid sides are refused."),
        Command("paired", "paired statistics from counts, for planning and checking", cmd_quality_paired,
                q.PairedCountsParams, options={"bootstrap_seed": opts["bootstrap_seed"]},
                json="print JSON (keys include delta, ci_low, ci_high, mcnemar_p, flip_fraction)",
                description="From n items, b (only the reference right) and c (only local right): the difference "
                            "(c-b)/n with its intervals, exact McNemar p, the flip fraction, the smallest resolvable "
                            "difference."),
        Command("subset", "check (or, once, write) the fixed item subsets", cmd_quality_subset, q.SubsetWriteParams,
                options={"size": Option(aliases=("--n",)), "subset_seed": Option(aliases=("--seed",))},
                also=(params("benchmarks", "datasets", "allow_download"),),
                description="Check that each stored subset is what its recorded seed draws from the pinned data "
                            "file; --write draws and stores a subset (done once, then committed)."),
        Command("selfcheck", "check the HumanEval scorer: canonical solutions pass, empty ones fail",
                cmd_quality_selfcheck, QualityParams, ("exec_timeout_s",), {"exec_timeout_s": opts["exec_timeout_s"]},
                description="Run the 164 canonical solutions (all must pass) and 164 empty completions (none may "
                            "pass); exit 2 when either fails."),
    ])
