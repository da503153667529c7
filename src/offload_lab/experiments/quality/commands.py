"""What ``offload-lab quality run|compare`` do, beside the experiment they file runs of: one side answered and
scored into a new run of quality-side, or two sides compared into a new run of quality. Tested without the command
line; the flags come from :class:`FilingParams`, :class:`CompareSidesParams`, ``EndpointSpec`` and
``QualityParams``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from pydantic import Field

from offload_lab.core import runs
from offload_lab.core.commands import Params, data_dir_field
from offload_lab.core.errors import InputError
from offload_lab.core.inputs import check_dir
from offload_lab.experiments.quality import runner as experiment
from offload_lab.quality import EXPERIMENT, SIDE_EXPERIMENT
from offload_lab.quality.endpoints import EndpointSpec


# The endpoint fields `quality run` sets from flags, and records in the parameters (``local``).
ENDPOINT_FIELDS = ("url", "kind", "label", "model", "api_key_env", "seed", "concurrency", "retries", "timeout_s")
# The experiment's fields `quality run` sets from flags.
RUN_FIELDS = ("benchmarks", "limit", "replicates", "max_tokens", "exec_timeout_s", "on_canary_failure", "datasets",
              "allow_download")


class FilingParams(Params):
    campaign: str = Field("scratch", description="campaign the run is filed under")
    data_dir: str = data_dir_field()


class CompareSidesParams(FilingParams):
    reference: str = Field(description="the reference side: a quality-side run directory or its sides/<label> "
                                       "directory")
    local: str = Field(description="the local side, likewise")


def _records(frame: Any) -> list[dict[str, Any]]:
    """Rows as JSON-safe dicts: NaN (a metric that does not apply) becomes null."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")]


def run_side(local: EndpointSpec, params: experiment.QualityParams, filing: FilingParams,
             log: Callable[[str], None]) -> dict[str, Any]:
    """Answer and score one side into a new run. Everything is checked before a server is contacted, so a bad flag
    is never reported as a server that does not answer."""
    params = params.model_copy(update={"local": local.model_dump(include=set(ENDPOINT_FIELDS))})
    spec = experiment.local_spec(local.url, params)
    runs.check_name("--label", spec.label)
    runs.check_name("--campaign", filing.campaign)
    check_dir(filing.data_dir, "--data-dir", write=True)
    if params.datasets is not None and not Path(params.datasets).is_dir():
        raise InputError(f"--datasets {params.datasets}: no such directory (it would hold gsm8k/test.jsonl and "
                         "ifeval/input_data.jsonl); leave --datasets out to read the copies offload-lab ships")
    from offload_lab.core.environment import capture_environment

    r = runs.new_run(filing.data_dir, filing.campaign, SIDE_EXPERIMENT, params.model_dump(),
                     environment=capture_environment(), quality={"endpoint": spec.record()})
    try:
        side = experiment.run_side(r.path, spec, params, log=log)
    except BaseException as e:
        r.finish("stopped" if isinstance(e, KeyboardInterrupt) else "failed", error=str(e))
        raise
    r.finish("ok", quality={"endpoint": spec.record(), "valid": side.valid, "invalid_reasons": side.reasons})
    return {"run": str(r.path), "side": str(side.path), "valid": side.valid, "invalid_reasons": side.reasons,
            "summary": _records(side.summary) if side.summary is not None else None}


def compare(p: CompareSidesParams, stats: experiment.QualityParams) -> dict[str, Any]:
    """Copy two sides into a new run of quality and compare them per benchmark."""
    from offload_lab.core.environment import capture_environment

    inputs = {"reference": str(Path(p.reference).resolve()), "local": str(Path(p.local).resolve())}
    r = runs.new_run(p.data_dir, p.campaign, EXPERIMENT,
                     {**inputs, "resamples": stats.resamples, "seed": stats.bootstrap_seed},
                     environment=capture_environment())
    try:
        dirs = {role: experiment.copy_side(Path(x), r.path, role) for role, x in inputs.items()}
        # Provenance of the copies: which run each came from, with that run's manifest hash when it has one.
        sources = {}
        for role, x in inputs.items():
            run_dir = next((q for q in [Path(x), *Path(x).parents] if (q / runs.MANIFEST).is_file()), None)
            sources[role] = {"path": x, "run": str(run_dir) if run_dir else None,
                             "manifest_sha256": runs.sha256_file(run_dir / runs.MANIFEST) if run_dir else None}
        r.update(quality={"inputs": sources, "valid": True})
        table = experiment.write_comparison(r.path, dirs["reference"], dirs["local"], stats.resamples,
                                            stats.bootstrap_seed)
    except BaseException as e:
        r.finish("stopped" if isinstance(e, KeyboardInterrupt) else "failed", error=str(e))
        raise
    r.finish("ok")
    return {"run": str(r.path), "comparison": _records(table)}
