"""What the command line asks of the quality layer: the parameters of ``quality paired|subset|selfcheck`` (their
flags come from these models through ``cli/model_options.py``), the parsers of ``--benchmark`` and
``--max-tokens``, and the work behind the commands, tested without the command line."""

from __future__ import annotations

import json
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from offload_lab.core.bounds import MAX_TOKENS
from offload_lab.core.errors import InputError
from offload_lab.quality import data, humaneval, paired, subsets

SUBSET_SEED = 20261129  # the seed the committed subsets record


class PairedCountsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(ge=1, description="paired items")
    b: int = Field(ge=0, description="items only the reference got right")
    c: int = Field(ge=0, description="items only the local side got right")
    a: int | None = Field(None, ge=0, description="items both got right (only Newcombe's interval uses it; default: "
                                                  "every agreeing item)")
    resamples: int = Field(paired.DEFAULT_RESAMPLES, ge=100, description="bootstrap resamples")
    bootstrap_seed: int = Field(0, ge=0, validation_alias=AliasChoices("bootstrap_seed", "seed"),
                                description="bootstrap seed")


class SubsetWriteParams(BaseModel):
    """How ``quality subset --write`` draws a subset (which benchmarks and data files: ``QualityParams``' fields)."""

    model_config = ConfigDict(extra="forbid")

    write: bool = Field(False, description="draw and store the subset instead of checking it")
    size: int | None = Field(None, ge=1, description="with --write: subset size (default 150, 150, 164)")
    subset_seed: int = Field(SUBSET_SEED, ge=0, description="with --write: the seed to record")


def parse_max_tokens(text: str | None) -> dict[str, int]:
    """``gsm8k=1024,ifeval=1280`` to a dict; a bare number applies to every benchmark."""
    if not text:
        return {}

    def count(value: str) -> int:
        # ASCII digits only (str.isdigit takes '²' and Arabic digits), and at least one token.
        if not (value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_TOKENS):
            raise InputError(f"--max-tokens {text!r}: use N or BENCH=N[,BENCH=N] with N a whole number from 1 to "
                             f"{MAX_TOKENS:,} and BENCH in {', '.join(data.BENCHMARKS)}")
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


def benchmark_names(text: str) -> list[str]:
    names = [b.strip() for b in text.split(",") if b.strip()]
    if "all" in names:
        return list(data.BENCHMARKS)
    unknown = [b for b in names if b not in data.BENCHMARKS]
    if unknown or not names:
        raise InputError(f"--benchmark {text!r}: choose from {', '.join(data.BENCHMARKS)} (comma-separated) or all")
    return names


def paired_counts(p: PairedCountsParams) -> dict[str, Any]:
    """Paired statistics from counts; the sums are checked here, named by their flags."""
    if p.b + p.c > p.n:
        raise InputError(f"--b {p.b} + --c {p.c} is more than --n {p.n}: b and c count items that differ, out of n "
                         "paired items")
    if p.a is not None and p.a + p.b + p.c > p.n:
        raise InputError(f"--a {p.a} + --b {p.b} + --c {p.c} is more than --n {p.n}")
    try:
        t = paired.Table.from_counts(p.n, p.b, p.c, p.a)
    except ValueError as e:
        raise InputError(f"quality paired: {e}") from e
    return paired.analyse(t, p.resamples, p.bootstrap_seed).to_json()


def subset(p: SubsetWriteParams, benchmarks: list[str], datasets: str | None = None,
           allow_download: bool = False) -> list[dict[str, Any]]:
    """Check each stored subset is what its seed draws from the pinned file; with ``p.write`` draw and store it."""
    out = []
    for b in benchmarks:
        if p.write:
            ids = [it.item_id for it in data.items(b, datasets, allow_download)]
            s = subsets.choose(b, ids, p.size or subsets.SIZES[b], p.subset_seed)
            out.append({"benchmark": b, "written": str(subsets.write(s)), "n": s.n, "seed": s.seed})
            continue
        stored = subsets.load(b)
        same = subsets.rederive(b, datasets, allow_download).ids == stored.ids
        out.append({"benchmark": b, "n": stored.n, "seed": stored.seed, "reproduced": same})
        if not same:
            raise InputError(f"the stored {b} subset is not what seed {stored.seed} draws from the pinned file")
    return out


def selfcheck(exec_timeout_s: float) -> dict[str, Any]:
    """The HumanEval scorer: every canonical solution passes, no empty completion does."""
    check = humaneval.self_check([it.fields for it in data.humaneval_items()], exec_timeout_s)
    if not check.ok:
        raise InputError(f"HumanEval scorer self-check failed: {json.dumps(check.to_json())}")
    return check.to_json()
