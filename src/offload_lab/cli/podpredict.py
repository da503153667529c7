"""``pod predict``, ``pod model check`` and ``compare-prediction``: flags from offload_lab.predict.request's models,
one call into the predict layer, its Outcome shown as text or --json (docs/predict.md)."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import calling
from offload_lab.cli.model_options import Command, Option, add_commands
from offload_lab.predict import request as rq

RQ = "offload_lab.predict.request"
_PREDICT = {"stack": Option(metavar="FILE"), "bar_tok_s": Option(flag="--bar", metavar="TOK_S"),
            "team_sizes": Option(metavar="N,N,..."),
            **{f: Option(metavar=m) for f, m in (("config", "FILE"), ("host_ram", "GIB"), ("host_memory", "KIND"),
                                                 ("gpu_memory_utilization", "U"), ("seat_price", "PRICE"),
                                                 ("hardware", "FILE"), ("out", "FILE"), ("currency", "CUR"))}}


def add_parsers(sub: Any) -> None:
    """``pod predict`` and ``pod model check`` on the ``pod`` group (cli/pods.py), and ``compare-prediction``."""
    pod = sub.choices.get("pod") or sub.add_parser("pod", help="pods")
    psub = next((a for a in pod._actions if isinstance(a, argparse._SubParsersAction)), None)
    psub = psub or pod.add_subparsers(dest="pod_command", metavar="ACTION")
    add_commands(psub, [Command(
        "predict", "predict a pod from hardware figures: fits, tok/s per stream, seats and cost (predicted)",
        calling(f"{RQ}:predict_outcome"), rq.PredictRequest, options=_PREDICT, old_positional="stack",
        json='print JSON (with "figures" for the study\'s stack)',
        description="Predict a stack's pod (--stack), or --config on --gpu, from hardware figures (docs/predict.md).")])
    model = psub.add_parser("model", help="pod model files: check", description="Pod model files (configs/pods/).")
    add_commands(model.add_subparsers(dest="pod_model_command", metavar="ACTION"), [Command(
        "check", "validate a pod model file in well under a second (exit 2 naming the field)",
        calling(f"{RQ}:check_outcome"), rq.CheckRequest, options={"file": Option(positional=True, metavar="FILE")})])
    add_commands(sub, [Command(
        "compare-prediction", "each figure predicted from hardware beside the one a campaign measured",
        calling(f"{RQ}:compare_outcome"), rq.CompareRequest,
        options={"campaign_file": Option(positional=True, metavar="CAMPAIGN")},
        description="Set each figure predicted from hardware (pod predict) beside the one the campaign's runs "
                    "measured (the runs the paper reads), at the campaign's own conditions; say what is missing.")])


__all__ = ["add_parsers"]
