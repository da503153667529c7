"""What the merged paper says about the spread of repeated boots (experiments/boot_spread/claims.py), from
boot_spread.csv rows as the analysis writes them: which spreads the boots' placement lets the data tell apart, each
with its count, and no verdict when boots shared their machine with other vLLM servers."""

from __future__ import annotations

import json

import pandas as pd

from offload_lab.experiments.boot_spread import claims as spread
from offload_lab.paper.sources import Sources


def _src(tmp_path, **over) -> Sources:
    row = {"metric": "tpot_ms", "group_by": "context_tokens", "group": 256, "boots": 3, "n_total": 48, "n_min": 16,
           "median_of_medians": 5.5, "between_sd": 0.4, "between_range": 0.8, "between_range_rel": 0.15,
           "within_sd_pooled": 0.3, "between_over_within_sd": 1.3, "null_between_sd": 0.1, "permutation_p": 0.001,
           "icc": 0.6, "pods": 3, "between_pod_sd": 0.4, "between_boot_within_pod_sd": None,
           "boots_with_other_servers": 0, "unit": "ms", **over}
    pd.DataFrame([row]).to_csv(tmp_path / "boot_spread.csv", index=False)
    (tmp_path / "manifest.json").write_text(json.dumps({"experiment": "boot_spread", "parameters": {}}))
    return Sources("test", tmp_path, {"experiment": "boot_spread"}, ["boot_spread.csv", "manifest.json"])


def test_one_boot_per_pod_is_called_the_spread_between_machines(tmp_path):
    """Before: with --pods 3 every boot on another machine, the paper called it the spread "after a restart" and
    never printed between_pod_sd. After: machines, with the count and the SD."""
    words = spread._spread_structure(_src(tmp_path))
    assert "the three boots ran on 3 machines of the same kind, one boot each" in words
    assert "the SD of the 3 machines' medians was 0.40 ms" in words
    assert "after a restart on one machine is not measured apart" in words and "48 requests" in words
    assert spread._spread_judged(_src(tmp_path)) == "yes" and spread._spread_narrower(_src(tmp_path)) == "TPOT"


def test_boots_within_pods_and_one_machine(tmp_path):
    words = spread._spread_structure(_src(tmp_path, boots=4, pods=2, between_boot_within_pod_sd=0.2))
    assert "four boots ran on 2 machines" in words and "between boots on the same machine" in words
    assert "0.20 ms" in words
    one = spread._spread_structure(_src(tmp_path, pods=1, between_pod_sd=None))
    assert one.startswith("all three boots ran on one machine") and "no spread between machines is held" in one


def test_no_verdict_when_boots_shared_the_machine(tmp_path):
    """Before: 3 of 3 boots beside other servers still gave "an interval from a single boot is narrower ...". After:
    no verdict, and the sentence that states one is left out (spread.narrower is "none")."""
    src = _src(tmp_path, boots_with_other_servers=3)
    assert spread._spread_judged(src) == "no"
    assert spread._spread_verdict(src).startswith("no verdict: 3 of the 3 boots were measured while another vLLM")
    assert spread._spread_narrower(src) == "none" and spread._spread_sig(src) == "not judged"
