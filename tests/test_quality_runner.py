"""Requests, retries, canaries, invalid runs and comparisons, against scriptable fake endpoints (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from quality_fixtures import FakeEndpoint, chat_response, datasets_dir

from offload_lab.core import runs
from offload_lab.core.errors import InputError, ProducerError
from offload_lab.quality import benchmarks, canaries, data, endpoints, runner, subsets
from offload_lab.experiments.quality import runner as experiment

SECRET = "sk-test-secret-value-0123456789"


def _spec(url: str, **kw) -> endpoints.EndpointSpec:
    return endpoints.EndpointSpec(**({"url": url, "model": "fake-model", "backoff_s": 0.0, "retries": 2} | kw))


# --- payloads -----------------------------------------------------------------------------------------------------

MSGS = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "```python\ndef f():\n"}]


def test_vllm_continuation_sets_both_flags_and_thinking_off():
    body = endpoints.chat_payload(_spec("http://x"), "m", MSGS, 64, ["```"], continuation=True)
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["chat_template_kwargs"] == {"enable_thinking": False, "thinking": False}
    assert (body["temperature"], body["top_p"], body["seed"], body["max_tokens"]) == (0.0, 1.0, 0, 64)
    assert body["stop"] == ["```"] and body["stream"] is False
    plain = endpoints.chat_payload(_spec("http://x"), "m", MSGS[:1], 64)
    assert plain["continue_final_message"] is False and plain["add_generation_prompt"] is True


def test_deepseek_continuation_uses_the_prefix_flag_on_the_beta_path():
    spec = _spec("https://api.example", kind="deepseek")
    body = endpoints.chat_payload(spec, "deepseek-chat", MSGS, 64, ["```"], continuation=True)
    assert body["messages"][-1]["prefix"] is True and "prefix" not in MSGS[-1]
    assert body["thinking"] == {"type": "disabled"}
    assert "continue_final_message" not in body and "chat_template_kwargs" not in body
    assert spec.chat_path(True) == "/beta/chat/completions" and spec.chat_path(False) == "/chat/completions"


def test_continuation_needs_a_final_assistant_message():
    with pytest.raises(ValueError):
        endpoints.chat_payload(_spec("http://x"), "m", MSGS[:1], 8, continuation=True)


def test_humaneval_request_continues_the_fenced_prompt():
    item = data.humaneval_items()[0]
    req = benchmarks.build_request(item)
    assert req.continuation and req.stop == ["```"] and req.max_tokens == 1024
    assert req.messages[-1] == {"role": "assistant", "content": "```python\n" + item.fields["prompt"]}


def test_api_key_only_from_the_environment(monkeypatch):
    monkeypatch.delenv("MY_KEY", raising=False)
    spec = _spec("https://api.example", kind="deepseek", api_key_env="MY_KEY")
    with pytest.raises(InputError, match="MY_KEY"):
        spec.headers()
    monkeypatch.setenv("MY_KEY", SECRET)
    assert spec.headers() == {"Authorization": f"Bearer {SECRET}"}
    assert SECRET not in json.dumps(spec.record())
    assert endpoints.redact_headers(spec.headers()) == {"Authorization": endpoints.REDACTED}


# --- retries ------------------------------------------------------------------------------------------------------

def _gsm_item() -> data.Item:
    return data.Item("gsm8k", "0", {"question": "1+1?", "answer": "#### 2", "gold": "2"})


def test_retryable_failures_are_retried_and_recorded(tmp_path):
    calls = {"n": 0}

    def handler(path, body, headers):
        calls["n"] += 1
        return (503, {"error": "busy"}) if calls["n"] < 3 else (200, chat_response("The answer is 2."))

    with FakeEndpoint(handler) as fake, runs.EventLog(tmp_path / "items.jsonl") as log:
        (rec,) = runner.run_items(_spec(fake.url), "fake-model", [_gsm_item()], 1, {}, log)
    assert rec["status"] == "ok" and rec["retries"] == 2
    assert [a.get("http_status") for a in rec["attempts"]] == [503, 503, 200]


def test_client_errors_are_not_retried_and_an_unreachable_endpoint_is_an_api_error(tmp_path):
    with FakeEndpoint(lambda p, b, h: (400, {"error": "bad"})) as fake, \
            runs.EventLog(tmp_path / "items.jsonl") as log:
        (rec,) = runner.run_items(_spec(fake.url), "fake-model", [_gsm_item()], 1, {}, log)
    assert rec["status"] == "api_error" and rec["retries"] == 0 and "HTTP 400" in rec["error"]
    with runs.EventLog(tmp_path / "items2.jsonl") as log:
        (rec,) = runner.run_items(_spec("http://127.0.0.1:9"), "m", [_gsm_item()], 1, {}, log)
    assert rec["status"] == "api_error" and len(rec["attempts"]) == 3


def test_statuses_from_the_response(tmp_path):
    answers = iter([chat_response(""), chat_response("abc", finish="length"), chat_response("The answer is 2.")])
    with FakeEndpoint(lambda p, b, h: (200, next(answers))) as fake, \
            runs.EventLog(tmp_path / "items.jsonl") as log:
        spec = _spec(fake.url, concurrency=1)
        recs = runner.run_items(spec, "fake-model", [_gsm_item()], 3, {}, log)
    assert sorted(r["status"] for r in recs) == ["empty", "ok", "truncated"]
    assert len(runs.read_events(tmp_path / "items.jsonl")) == 3


# --- canaries -----------------------------------------------------------------------------------------------------

def _api(honours_prefix: bool = True, thinks: bool = False):
    """A DeepSeek-like API: the prefix flag continues the message (fewer prompt tokens) unless told to ignore it."""

    def handler(path, body, headers):
        msgs = body["messages"]
        continued = honours_prefix and path.startswith("/beta") and msgs[-1].get("prefix")
        tokens = 50 if continued else 56
        if msgs[-1]["role"] == "assistant":
            text = "    return x + 1\n" if continued else "```python\ndef add_one(x):\n    return x + 1\n```"
        else:
            text = "42"
        return 200, chat_response(text, prompt_tokens=tokens, reasoning="let me think" if thinks else None)

    return handler


@pytest.mark.parametrize("honours,thinks,valid,failing", [
    (True, False, True, None),
    (False, False, False, "continuation.prompt_tokens"),
    (True, True, False, "thinking.off"),
])
def test_canaries_catch_an_ignored_prefix_and_thinking(monkeypatch, honours, thinks, valid, failing):
    monkeypatch.setenv("OFFLOAD_LAB_REFERENCE_API_KEY", SECRET)
    with FakeEndpoint(_api(honours, thinks)) as fake:
        report = canaries.run_canaries(_spec(fake.url, kind="deepseek"), "fake-model")
        sent = fake.requests
    assert report.valid is valid
    if failing:
        assert any(r.startswith(failing) for r in report.reasons)
    if not honours:
        assert any(c.name == "continuation.no_restart" and c.passed is False for c in report.checks)
    assert all(h.get("Authorization") == f"Bearer {SECRET}" for _, _, h in sent)
    assert SECRET not in json.dumps(report.to_json())


def test_a_plain_chat_endpoint_cannot_pass_the_continuation_canary():
    with FakeEndpoint(_api(honours_prefix=False)) as fake:
        report = canaries.run_canaries(_spec(fake.url, kind="openai"), "fake-model")
    assert not report.valid


# --- sides, invalid runs and comparisons --------------------------------------------------------------------------

def _gsm_server(right: set[str], gold_by_question: dict[str, str], wrong_on_replicate_1: set[str] = frozenset()):
    seen: dict[str, int] = {}

    def handler(path, body, headers):
        msgs = body["messages"]
        if msgs[-1]["role"] == "assistant" or "17 + 25" in msgs[-1]["content"]:
            return _api()(path, body, headers)  # canaries
        question = msgs[0]["content"].split("\n\nSolve the problem")[0]
        item_id, gold = gold_by_question[question]
        seen[item_id] = seen.get(item_id, 0) + 1
        ok = item_id in right and not (seen[item_id] == 2 and item_id in wrong_on_replicate_1)
        return 200, chat_response(f"The answer is {gold if ok else '-99999'}.")

    return handler


def test_two_sides_compare_item_by_item_with_known_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("OFFLOAD_LAB_REFERENCE_API_KEY", SECRET)
    items = subsets.subset_items("gsm8k", datasets_dir(), limit=10)
    ids = [it.item_id for it in items]
    gold = {it.fields["question"]: (it.item_id, it.fields["gold"]) for it in items}
    ref_right = set(ids[:8])                 # reference: 8 of 10
    loc_right = set(ids[:6]) | {ids[9]}      # local: 7 of 10; b = 2 (ids 6, 7), c = 1 (id 9)
    params = experiment.QualityParams(benchmarks=["gsm8k"], limit=10, replicates=2, datasets=str(datasets_dir()),
                                      resamples=2000)
    run = runs.new_run(tmp_path / "data", "t", "quality", params.model_dump())
    with FakeEndpoint(_gsm_server(ref_right, gold)) as ref_api, \
            FakeEndpoint(_gsm_server(loc_right, gold, wrong_on_replicate_1={ids[0]})) as loc_api:
        ref = experiment.run_side(run.path, _spec(ref_api.url, label="reference", kind="deepseek"), params,
                                  log=lambda m: None)
        loc = experiment.run_side(run.path, _spec(loc_api.url, label="local"), params, log=lambda m: None)
    assert ref.valid and loc.valid
    table = experiment.write_comparison(run.path, ref.path, loc.path, 2000, 0)
    run.finish("ok")
    row = table.set_index("benchmark").loc["gsm8k"]
    assert (row["n"], row["a"], row["b"], row["c"], row["d"]) == (10, 6, 2, 1, 1)
    assert row["delta"] == pytest.approx(-0.1) and row["flip_fraction"] == pytest.approx(0.3)
    assert row["reference_accuracy"] == pytest.approx(0.8) and row["local_accuracy"] == pytest.approx(0.7)
    assert row["noise_flip_reference"] == 0 and row["noise_flip_local"] == pytest.approx(0.1)
    doc = json.loads((run.path / experiment.COMPARISON_JSON).read_text())
    g = doc["benchmarks"]["gsm8k"]
    assert g["noise_floor"]["local"]["flipped_items"] == [ids[0]]
    assert sorted(g["consistent_flips"]) == sorted([ids[6], ids[7], ids[9]])
    paired_items = pd.read_csv(run.path / experiment.PAIRED_ITEMS, dtype={"item_id": str})
    assert int(paired_items["flip"].sum()) == 3
    assert runs.verify_run(run.path) == []
    # No key anywhere in the run, while every request carried it.
    for p in run.path.rglob("*"):
        if p.is_file():
            assert SECRET not in p.read_text(errors="replace"), p
    stored = runs.read_events(ref.path / "items.jsonl")[0]["request"]
    assert stored["headers"] == {"Authorization": endpoints.REDACTED}
    assert stored["url"].endswith("/chat/completions")


@pytest.mark.parametrize("policy", ["stop", "continue"])
def test_an_invalid_side_is_kept_never_scored_and_refused_by_compare(tmp_path, policy):
    params = experiment.QualityParams(benchmarks=["humaneval"], limit=2, replicates=1, on_canary_failure=policy)
    run = runs.new_run(tmp_path / "data", "t", "quality-side", params.model_dump())
    with FakeEndpoint(_api(honours_prefix=False)) as fake:
        side = experiment.run_side(run.path, _spec(fake.url, label="local", kind="openai"), params,
                                   log=lambda m: None)
    run.finish("ok")
    assert not side.valid and side.summary is None
    info = json.loads((side.path / "side.json").read_text())
    assert info["valid"] is False and info["invalid_reasons"]
    assert json.loads((side.path / "scoring.json").read_text())["scored"] is False
    assert not (side.path / "scores.csv").exists()
    assert (side.path / "items.jsonl").exists() == (policy == "continue")
    assert (side.path / "canaries.json").exists()
    with pytest.raises(InputError, match="invalid side cannot be compared"):
        experiment.copy_side(run.path, tmp_path / "other", "local")


def test_the_experiment_refuses_to_compare_when_a_side_is_invalid(tmp_path):
    params = experiment.QualityParams(benchmarks=["humaneval"], limit=1, replicates=1,
                                      local={"kind": "openai", "backoff_s": 0.0})
    run = runs.new_run(tmp_path / "data", "t", "quality", params.model_dump())
    with FakeEndpoint(_api(honours_prefix=False)) as fake:
        with pytest.raises(ProducerError, match="marked invalid"):
            experiment.run_experiment(run, fake.url, params, log=lambda m: None)
    m = runs.load_manifest(run.path)
    meta = json.loads((run.path / experiment.QUALITY_JSON).read_text())
    assert m["quality"]["valid"] is False and meta["valid"] is False and meta["invalid"]["local"]
    assert not (run.path / experiment.COMPARISON_JSON).exists()


def test_side_labels_must_be_directory_names(tmp_path):
    with pytest.raises(InputError):
        experiment.side_dir(Path(tmp_path), "../escape")
