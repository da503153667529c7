"""What the ``offload-lab quality ...`` subcommands do; ``cli/quality_parsers.py`` parses the flags and calls these."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from offload_lab.core import runs
from offload_lab.cli.common import MAX_TOKENS
from offload_lab.core.errors import InputError
from offload_lab.core.inputs import check_dir
from offload_lab.quality import EXPERIMENT, SIDE_EXPERIMENT, data, humaneval, paired, subsets
from offload_lab.experiments.quality import runner as experiment


def parse_max_tokens(text: str | None) -> dict[str, int]:
    """``gsm8k=1024,ifeval=1280`` to a dict; a bare number applies to every benchmark."""
    if not text:
        return {}
    def count(value: str) -> int:
        # ASCII digits only (str.isdigit takes '²' and Arabic digits), and at least one token.
        if not (value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_TOKENS):
            raise InputError(f"--max-tokens {text!r}: use N or BENCH=N[,BENCH=N] with N a whole number from 1 to "
                             f"{MAX_TOKENS:,} "
                             f"and BENCH in {', '.join(data.BENCHMARKS)}")
        return int(value)

    if "=" not in text:
        return {b: count(text) for b in data.BENCHMARKS}
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name not in data.BENCHMARKS:
            count("")  # raises, naming the flag
        out[name] = count(value)
    return out


def _records(frame: Any) -> list[dict[str, Any]]:
    """Rows as JSON-safe dicts: NaN (a metric that does not apply) becomes null."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")]


def benchmark_names(text: str) -> list[str]:
    names = [b.strip() for b in text.split(",") if b.strip()]
    if "all" in names:
        return list(data.BENCHMARKS)
    unknown = [b for b in names if b not in data.BENCHMARKS]
    if unknown or not names:
        raise InputError(f"--benchmark {text!r}: choose from {', '.join(data.BENCHMARKS)} (comma-separated) or all")
    return names


def run(args: argparse.Namespace) -> dict[str, Any]:
    # Everything is checked before a server is contacted, so a bad flag is never reported as a server that does
    # not answer. The flags come from the two models (cli/quality_parsers.run_options), which name them in refusals.
    endpoint_options, params_options = args.quality_options
    local = endpoint_options.build(args, "quality run")
    params = params_options.build(args, "quality run", local={k: v for k, v in local.model_dump().items()
                                                              if k in endpoint_options.flags})
    spec = experiment.local_spec(local.url, params)
    runs.check_name("--label", spec.label)
    runs.check_name("--campaign", args.campaign)
    check_dir(args.data_dir, "--data-dir", write=True)
    if params.datasets is not None and not Path(params.datasets).is_dir():
        raise InputError(f"--datasets {params.datasets}: no such directory (it would hold gsm8k/test.jsonl and "
                         "ifeval/input_data.jsonl); leave --datasets out to read the copies offload-lab ships")
    from offload_lab.core.environment import capture_environment

    r = runs.new_run(args.data_dir, args.campaign, SIDE_EXPERIMENT, params.model_dump(),
                     environment=capture_environment(), quality={"endpoint": spec.record()})
    try:
        side = experiment.run_side(r.path, spec, params, log=lambda m: print(m, file=sys.stderr, flush=True))
    except BaseException as e:
        r.finish("stopped" if isinstance(e, KeyboardInterrupt) else "failed", error=str(e))
        raise
    r.finish("ok", quality={"endpoint": spec.record(), "valid": side.valid, "invalid_reasons": side.reasons})
    return {"run": str(r.path), "side": str(side.path), "valid": side.valid, "invalid_reasons": side.reasons,
            "summary": _records(side.summary) if side.summary is not None else None}


def compare(args: argparse.Namespace) -> dict[str, Any]:
    from offload_lab.core.environment import capture_environment

    stats = args.params_options.build(args, "quality compare")
    inputs = {"reference": str(Path(args.reference).resolve()), "local": str(Path(args.local).resolve())}
    r = runs.new_run(args.data_dir, args.campaign, EXPERIMENT,
                     {"reference": inputs["reference"], "local": inputs["local"], "resamples": stats.resamples,
                      "seed": stats.seed}, environment=capture_environment())
    try:
        dirs = {role: experiment.copy_side(Path(p), r.path, role) for role, p in inputs.items()}
        # Provenance of the copies: which run each came from, with that run's manifest hash when it has one.
        sources = {}
        for role, p in inputs.items():
            run_dir = next((q for q in [Path(p), *Path(p).parents] if (q / runs.MANIFEST).is_file()), None)
            sources[role] = {"path": p, "run": str(run_dir) if run_dir else None,
                             "manifest_sha256": runs.sha256_file(run_dir / runs.MANIFEST) if run_dir else None}
        r.update(quality={"inputs": sources, "valid": True})
        table = experiment.write_comparison(r.path, dirs["reference"], dirs["local"], stats.resamples, stats.seed)
    except BaseException as e:
        r.finish("stopped" if isinstance(e, KeyboardInterrupt) else "failed", error=str(e))
        raise
    r.finish("ok")
    return {"run": str(r.path), "comparison": _records(table)}


def paired_counts(args: argparse.Namespace) -> dict[str, Any]:
    # Each count is >= 0 (argparse); what is left are the sums, named by their flags.
    if args.b + args.c > args.n:
        raise InputError(f"--b {args.b} + --c {args.c} is more than --n {args.n}: b and c count items that differ, "
                         "out of n paired items")
    if args.a is not None and args.a + args.b + args.c > args.n:
        raise InputError(f"--a {args.a} + --b {args.b} + --c {args.c} is more than --n {args.n}")
    try:
        t = paired.Table.from_counts(args.n, args.b, args.c, args.a)
    except ValueError as e:
        raise InputError(f"quality paired: {e}") from e
    p = args.params_options.build(args, "quality paired")
    return paired.analyse(t, p.resamples, p.seed).to_json()


def subset(args: argparse.Namespace) -> list[dict[str, Any]]:
    p = args.params_options.build(args, "quality subset")
    out = []
    for b in p.benchmarks:
        if args.write:
            ids = [it.item_id for it in data.items(b, p.datasets, p.allow_download)]
            s = subsets.choose(b, ids, args.n or subsets.SIZES[b], args.seed)
            path = subsets.write(s)
            out.append({"benchmark": b, "written": str(path), "n": s.n, "seed": s.seed})
            continue
        stored = subsets.load(b)
        again = subsets.rederive(b, p.datasets, p.allow_download)
        same = again.ids == stored.ids
        out.append({"benchmark": b, "n": stored.n, "seed": stored.seed, "reproduced": same})
        if not same:
            raise InputError(f"the stored {b} subset is not what seed {stored.seed} draws from the pinned file")
    return out


def selfcheck(args: argparse.Namespace) -> dict[str, Any]:
    p = args.params_options.build(args, "quality selfcheck")
    check = humaneval.self_check([it.fields for it in data.humaneval_items()], p.exec_timeout_s)
    if not check.ok:
        raise InputError(f"HumanEval scorer self-check failed: {json.dumps(check.to_json())}")
    return check.to_json()
