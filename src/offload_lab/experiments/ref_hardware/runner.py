"""Runner of ``ref_hardware``: the prediction table of the study's pod, E9 and the home rigs' bounds, as files."""

from __future__ import annotations

from typing import Any

import pandas as pd

from offload_lab.core import paths, runs
from offload_lab.predict import study
from offload_lab.predict.catalog import load_catalog

EXPERIMENT = "ref_hardware"
FIGURES = "figures.csv"
E9 = "e9.csv"
RIGS = "home_rigs.csv"
FACTORS = "factors.json"


def run_experiment(run: runs.Run, params: dict[str, Any]) -> dict[str, Any]:
    root = paths.find_root()
    cat = load_catalog(params.get("hardware"))
    r = study.report(cat, root)
    run.write_table(FIGURES, pd.DataFrame(r["figures"]))
    e9 = r["e9"]
    run.write_table(E9, pd.DataFrame([{"streams": int(s), "tok_s_per_stream": v}
                                      for s, v in e9["agent_turns_tok_s"].items()]))
    run.write_table(RIGS, pd.DataFrame(r["home_rigs"]))
    summary = {"factors": r["factors"], "factor_sources": r["factor_sources"], "summary": r["summary"],
               "not_predicted": r["not_predicted"], "provenance": r["provenance"],
               "e9": {k: v for k, v in e9.items() if k != "agent_turns_tok_s"}}
    run.write_json(FACTORS, summary)
    return {"summary": r["summary"], "factors": r["factors"]}
