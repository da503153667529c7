"""`offload-lab compare`'s logic without a server: mirrored rounds, the server's checks of a window, verdicts, the
prompt collision check and what it reads from each peer's own output (issue 25)."""

from __future__ import annotations

import pytest

from offload_lab.bench import compare, peers
from offload_lab.bench.compare_spec import AGREE_WITHIN, CompareParams
from offload_lab.core.errors import InputError


class _FakeTokenizer:
    """Token ids: one per character, so two texts share a first block when their first characters do."""

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) for c in text]


def test_rounds_mirror_so_every_tool_meets_every_position():
    tools = ["ours", "vllm", "aiperf", "guidellm"]
    orders = [compare.round_order(tools, r) for r in range(4)]
    assert orders[0] == tools and orders[1] == tools[::-1] and orders[2] == tools
    mean_position = {t: sum(o.index(t) for o in orders) / 4 for t in tools}
    assert len(set(mean_position.values())) == 1


def test_prompts_may_not_share_a_first_block_across_windows():
    tok = _FakeTokenizer()
    clean = {(0, "ours"): ["abcd-1", "efgh-2"], (0, "vllm"): ["ijkl-3", "mnop-4"]}
    assert compare.first_block_collisions(tok, clean, 4) == []
    clash = {(0, "ours"): ["abcd-1"], (0, "vllm"): ["abcd-9"]}
    assert compare.first_block_collisions(tok, clash, 4) == [("0/ours/0", "0/vllm/0")]
    # The shared mode: one window's prompts share their prefix on purpose; two windows may not.
    shared = {(0, "ours"): ["abcd-1", "abcd-2"], (0, "vllm"): ["wxyz-1", "wxyz-2"]}
    assert compare.first_block_collisions(tok, shared, 4, within_set=False) == []
    assert compare.first_block_collisions(tok, shared, 4) == [("0/ours/0", "0/ours/1"), ("0/vllm/0", "0/vllm/1")]


def test_bad_tools_and_a_prefix_longer_than_the_prompt_are_refused():
    with pytest.raises(InputError, match="unknown tool"):
        compare.check_params(CompareParams(tools=["vllm", "locust"]), 128)
    with pytest.raises(InputError, match="not longer than the shared prefix"):
        compare.check_params(CompareParams(cache="shared", shared_blocks=3, prompt_tokens=320), 128)
    # longer than a CPU KV block: a hit is possible, so the cache check means something
    assert CompareParams().prompt_tokens > 128
    # the old names (and the comparison's JSON keys) still load, and a record keeps its keys
    old = CompareParams.model_validate({"input_len": 400, "output_len": 8})
    assert (old.prompt_tokens, old.output_tokens) == (400, 8)
    assert old.model_dump(by_alias=True)["input_len"] == 400


def _server(**over):
    base = {"server_ttft_mean_ms": 50.0, "server_tpot_mean_ms": 5.0, "server_requests": 4.0,
            "server_generation_tokens": 256.0, "server_prompt_tokens": 1280.0, "server_cached_tokens": 0.0}
    return {**base, **over}


def _row(tool, r, ttft, tpot, server=None, cache="cold"):
    got = peers.ToolResult.of(4, 4, [ttft] * 4, [tpot] * 4)
    return compare.window_row(tool, r, 0, got, server or _server(), CompareParams(output_len=64, cache=cache), 128)


def test_each_window_is_divided_by_the_servers_own_figures():
    row = _row("ours", 0, 52.0, 5.1)
    assert row["ttft_ratio"] == pytest.approx(52.0 / 50.0) and row["tpot_ratio"] == pytest.approx(5.1 / 5.0)
    assert row["ttft_added_ms"] == pytest.approx(2.0) and row["checks"] == ""
    # The server's TPOT moved by half between two windows; the ratios did not.
    slow = _row("vllm", 0, 78.0, 7.65, _server(server_ttft_mean_ms=75.0, server_tpot_mean_ms=7.5))
    assert slow["tpot_ratio"] == pytest.approx(row["tpot_ratio"])


def test_the_server_checks_each_window():
    assert "server finished 3 request(s)" in _row("ours", 0, 1, 1, _server(server_requests=3.0))["checks"]
    assert "generated 250 tokens" in _row("ours", 0, 1, 1, _server(server_generation_tokens=250.0))["checks"]
    assert "served from cache, not 0" in _row("ours", 0, 1, 1, _server(server_cached_tokens=512.0))["checks"]
    # shared: every request must hit the primed prefix (one block each here)
    assert _row("ours", 0, 1, 1, _server(server_cached_tokens=512.0), cache="shared")["checks"] == ""
    assert "not 512" in _row("ours", 0, 1, 1, _server(server_cached_tokens=0.0), cache="shared")["checks"]


def test_a_verdict_per_peer_and_figure():
    rows = [_row("ours", r, 52.0, 5.10) for r in range(4)] + [_row("vllm", r, 52.5, 5.12) for r in range(4)]
    rows += [_row("aiperf", r, 60.0, 5.11) for r in range(4)]
    rows += [_row("guidellm", r, 52.0, 5.1, _server(server_requests=5.0)) for r in range(4)]
    out = compare.summarize(rows, ["vllm", "aiperf", "guidellm"])
    v = {(x["peer"], x["figure"]): x for x in out["verdicts"]}
    assert v[("vllm", "ttft_ratio")]["verdict"] == "agree" and v[("vllm", "tpot_ratio")]["verdict"] == "agree"
    assert v[("aiperf", "ttft_ratio")]["verdict"] == "differ"
    assert abs(v[("aiperf", "ttft_ratio")]["difference"]) > AGREE_WITHIN
    refused = v[("guidellm", "tpot_ratio")]
    assert refused["verdict"] == "refused" and "server finished" in refused["reason"]
    assert "aiperf inter_chunk_latency" in out["not_comparable"]
    assert "\nnot compared:" in compare.table({**CompareParams().model_dump(by_alias=True), **out})


def test_what_is_read_from_aiperf_and_guidellm_records():
    rec = {"metrics": {"time_to_first_token": {"value": 0.05, "unit": "s"},
                       "inter_token_latency": {"value": 5000.0, "unit": "us"},
                       "inter_chunk_latency": {"value": [5.0] * 12, "unit": "ms"},
                       "output_sequence_length": {"value": 16, "unit": "tokens"}}}
    got = peers.aiperf_result([rec, {"error": {"code": 500}, "metrics": {}}], 2, 16)
    assert (got.completed, got.ttft_mean_ms, got.tpot_mean_ms) == (1, pytest.approx(50.0), pytest.approx(5.0))
    assert got.extra == {"inter_chunk_gaps": 12, "token_gaps": 15}  # fewer chunk gaps than token gaps
    report = {"benchmarks": [{"requests": {"successful": [{"time_to_first_token_ms": 40.0,
                                                           "inter_token_latency_ms": 4.0}] * 3}}]}
    g = peers.guidellm_result(report, 4)
    assert (g.sent, g.completed, g.ttft_median_ms, g.tpot_mean_ms) == (4, 3, 40.0, 4.0)


def test_a_missing_peer_environment_says_how_to_build_it(tmp_path):
    ctx = peers.PeerContext(base_url="http://h", model="m", tokenizer="t", output_len=8, concurrency=1,
                            server_python=tmp_path / "python", run_dir=tmp_path, log_path=tmp_path / "log",
                            root=tmp_path)
    with pytest.raises(InputError, match="make peers-env"):
        peers.PEERS["aiperf"].check_available(ctx)
    with pytest.raises(InputError, match="make server-env"):
        peers.PEERS["vllm"].check_available(ctx)
