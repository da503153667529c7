"""Greedy answers token for token: the agreement module, and two servers behind one URL compared in three runs (a
side on each, then compare_runs), as the embedded campaign compares its bfloat16 and float32 stacks."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from quality_fixtures import FakeEndpoint, chat_response, datasets_dir

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.quality import agreement, endpoints, subsets
from offload_lab.experiments.quality import runner as experiment


def _rec(bench: str, item: str, rep: int, tokens=None, content: str = "x", status: str = "ok") -> dict:
    choice = {"message": {"content": content}} | ({"token_ids": tokens} if tokens is not None else {})
    return {"kind": "item", "benchmark": bench, "item_id": item, "replicate": rep, "status": status,
            "content": content, "response": None if status == "timeout" else {"choices": [choice]}}


def test_first_divergence() -> None:
    assert agreement.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert agreement.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert agreement.first_divergence([1, 2], [1, 2, 3]) == 2  # a prefix: they part where the shorter one ends
    assert agreement.first_divergence("abc", "abd") == 2


def test_pairs_on_token_ids_leaves_out_infrastructure_failures_and_falls_back_to_text() -> None:
    ref = [_rec("gsm8k", "1", 0, [1, 2, 3]), _rec("gsm8k", "2", 0, [1, 2, 3]), _rec("gsm8k", "3", 0, [4]),
           _rec("gsm8k", "1", 1, [1, 2, 3]), _rec("gsm8k", "2", 1, [1, 2, 7]), _rec("gsm8k", "3", 1, [4]),
           _rec("ifeval", "9", 0, content="hello world")]
    loc = [_rec("gsm8k", "1", 0, [1, 2, 3]), _rec("gsm8k", "2", 0, [1, 9, 9]), _rec("gsm8k", "3", 0, status="timeout"),
           _rec("ifeval", "9", 0, content="hello there")]
    summary, items = agreement.agreement(ref, loc)
    g = summary.set_index("benchmark").loc["gsm8k"]
    assert (g["n"], g["identical"], g["diverged"], g["first_divergence_median"]) == (2, 1, 1, 1.0)
    assert g["basis"] == "token_ids" and g["agree_share"] == 0.5
    # The reference against itself: items 1 and 3 identical, item 2 parts at token 2; the local side has no
    # second replicate.
    assert (g["self_n_reference"], g["self_identical_reference"]) == (3, 2) and pd.isna(g["self_agree_local"])
    i = summary.set_index("benchmark").loc["ifeval"]
    assert i["basis"] == "text" and i["first_divergence_median"] == 6.0
    assert set(items.columns) == set(agreement.ITEM_COLUMNS) and len(items) == 3


def test_vllm_requests_ask_for_the_token_ids() -> None:
    spec = endpoints.EndpointSpec(url="http://x", kind="vllm")
    assert endpoints.chat_payload(spec, "m", [{"role": "user", "content": "u"}], 8)["return_token_ids"] is True
    other = endpoints.EndpointSpec(url="http://x", kind="openai")
    assert "return_token_ids" not in endpoints.chat_payload(other, "m", [{"role": "user", "content": "u"}], 8)


def _server(state: dict, gold: dict[str, tuple[str, str]]):
    """One URL, two servers in turn: ``state["dtype"]`` says which. float32 answers like bfloat16 on even items and
    parts at token 3 on odd ones; both answer every item wrong (random weights)."""

    def handler(path, body, headers):
        msgs = body["messages"]
        if "17 + 25" in msgs[-1]["content"]:
            return 200, chat_response("42")  # the canary
        question = msgs[0]["content"].split("\n\nSolve the problem")[0]
        item_id, _ = gold[question]
        k = list(gold).index(question)
        tokens = [k, 1, 2, 3, 4]
        if state["dtype"] == "float32" and k % 2:
            tokens[3] = 99
        out = chat_response("The answer is -99999.")
        out["choices"][0]["token_ids"] = tokens
        return 200, out

    return handler


def _side_run(data: Path, experiment_name: str, dtype: str, side: str, url: str, params: dict) -> Path:
    p = experiment.QualityParams(**params, side=side)
    run = runs.new_run(data, "embedded-fixture", experiment_name, p.model_dump(mode="json"),
                       server={"url": url, "boot_run": f"/data/embedded/boots/boot-{dtype}", "variant": dtype},
                       stack={"spec": {"name": f"embedded-{dtype}", "server": {"args": ["--dtype", dtype]}}})
    experiment.run_experiment(runs.attach_run(run.path), url, p, log=lambda m: None)
    run.finish("ok")
    return run.path


def test_two_servers_behind_one_url_compared_in_three_runs(tmp_path: Path) -> None:
    items = subsets.subset_items("gsm8k", datasets_dir(), limit=6)
    gold = {it.fields["question"]: (it.item_id, it.fields["gold"]) for it in items}
    params = {"benchmarks": ["gsm8k"], "limit": 6, "replicates": 2, "datasets": str(datasets_dir()),
              "resamples": 500}
    data = tmp_path / "data"
    state = {"dtype": "bfloat16"}
    with FakeEndpoint(_server(state, gold)) as fake:
        local = _side_run(data, "quality_bfloat16", "bfloat16", "local", fake.url, params)
        state["dtype"] = "float32"
        reference = _side_run(data, "quality_float32", "float32", "reference", fake.url, params)
    assert json.loads((local / "sides" / "local" / "side.json").read_text())["server"]["dtype"] == "bfloat16"
    p = experiment.QualityParams(**params, compare_runs={"reference": "quality_float32", "local": "quality_bfloat16"})
    run = runs.new_run(data, "embedded-fixture", "quality", p.model_dump(mode="json"))
    table = experiment.run_experiment(runs.attach_run(run.path), None, p, log=lambda m: None)
    run.finish("ok")
    assert table.set_index("benchmark").loc["gsm8k", "flip_fraction"] == 0
    doc = json.loads((run.path / experiment.COMPARISON_JSON).read_text())
    # Same URL and model, but two boots: two servers, not an A/A run.
    assert doc["same_endpoint"] is False and doc["note"] is None
    assert (doc["reference"]["server"]["dtype"], doc["local"]["server"]["dtype"]) == ("float32", "bfloat16")
    agree = pd.read_csv(run.path / experiment.AGREEMENT_CSV).set_index("benchmark").loc["gsm8k"]
    assert (agree["n"], agree["identical"], agree["first_divergence_median"]) == (6, 3, 3.0)
    assert agree["self_agree_reference"] == 1.0 and agree["self_agree_local"] == 1.0
    meta = json.loads((run.path / experiment.QUALITY_JSON).read_text())
    assert meta["valid"] and meta["compared_runs"]["local"]["run"] == str(local)
    assert Path(meta["compared_runs"]["reference"]["run"]) == reference
    assert runs.verify_run(run.path) == []


def test_compare_runs_names_what_is_missing(tmp_path: Path) -> None:
    p = experiment.QualityParams(compare_runs={"reference": "quality_float32", "local": "quality_bfloat16"})
    run = runs.new_run(tmp_path / "data", "embedded-fixture", "quality", p.model_dump(mode="json"))
    with pytest.raises(InputError, match="no ok run of experiment quality_float32"):
        experiment.run_experiment(run, None, p, log=lambda m: None)
    with pytest.raises(ValueError, match="compare_runs names the experiment of each role"):
        experiment.QualityParams(compare_runs={"reference": "a"})
    with pytest.raises(ValueError, match="cannot answer a side itself"):
        experiment.QualityParams(compare_runs={"reference": "a", "local": "b"}, side="local")
