"""A load run written as `vllm bench serve --save-result --save-detailed` saves it, read back by the field names of
the installed vLLM's own benchmark code (vllm/benchmarks/serve.py in .venvs/server), not by a list this project
wrote."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from offload_lab.cli.main import main
from offload_lab.core import stats
from paper_fixtures import REPO_ROOT

SERVE_PY = next(iter(sorted(REPO_ROOT.glob(".venvs/server/lib/python3*/site-packages/vllm/benchmarks/serve.py"))),
                None)
MEASURED = REPO_ROOT / "data" / "embedded" / "concurrency"
RUN = next(iter(sorted(MEASURED.glob("*/manifest.json"), reverse=True)), None)
# vLLM fields this project cannot fill: texts it does not keep, vLLM's own client queue, audio, ramp-up settings.
NOT_OURS = {"generated_texts", "queue_times", "rtfx", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"}

pytestmark = [pytest.mark.skipif(SERVE_PY is None, reason="no vLLM in .venvs/server (make envs builds it)"),
              pytest.mark.skipif(RUN is None, reason="the checkout has no measured concurrency run")]


def vllm_fields() -> set[str]:
    """The keys vLLM's serve.py saves: its generation ``result = {...}`` and every ``result_json["..."] =``."""
    tree = ast.parse(SERVE_PY.read_text(encoding="utf-8"))
    keys: set[str] = set()
    dicts = [n.value for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Dict)
             and any(getattr(t, "id", None) == "result" for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
    generation = next(d for d in dicts if any(getattr(k, "value", None) == "output_throughput" for k in d.keys))
    keys |= {k.value for k in generation.keys if isinstance(k, ast.Constant)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript) and getattr(t.value, "id", None) == "result_json" and \
                        isinstance(t.slice, ast.Constant):
                    keys.add(t.slice.value)
    return keys - NOT_OURS


def test_load_levels_read_back_by_vllms_field_names(tmp_path: Path) -> None:
    out = tmp_path / "vllm"
    assert main(["report", "--campaign", "embedded", "--data-dir", str(REPO_ROOT / "data"), "--experiment", "concurrency",
                 "--out", str(tmp_path / "r.html"), "--vllm-json", str(out)]) == 0
    files = sorted(out.glob(f"{RUN.parent.name}-*-c*.json"))
    assert files
    fields = vllm_fields()
    assert {"duration", "completed", "output_throughput", "total_token_throughput", "ttfts", "itls"} <= fields
    for path in files:
        result = json.loads(path.read_text())
        assert fields <= set(result), fields - set(result)
        # The metric names process_one_metric builds: mean/median/std/pNN of ttft, tpot, itl, e2el in ms.
        for metric in ("ttft", "tpot", "itl", "e2el"):
            for stat in ("mean", "median", "std", "p99"):
                assert f"{stat}_{metric}_ms" in result
        n = result["completed"]
        assert len(result["ttfts"]) == len(result["itls"]) == result["num_prompts"] == n + result["failed"]
        # vLLM's arithmetic: throughput over the duration, TTFT in s in the detail and ms in the summary.
        assert result["output_throughput"] == pytest.approx(result["total_output_tokens"] / result["duration"])
        assert result["request_throughput"] == pytest.approx(n / result["duration"])
        good = [t for t, e in zip(result["ttfts"], result["errors"]) if not e]
        assert result["mean_ttft_ms"] == pytest.approx(1000 * sum(good) / len(good))
        assert 1 <= result["max_concurrent_requests"] <= result["max_concurrency"]
        # No percentile above what its n supports.
        if n < stats.P99_MIN_SAMPLES:
            assert result["p99_ttft_ms"] is None and result["p99_e2el_ms"] is None
        gaps = sum(len(g) for g in result["itls"])
        assert (result["p99_itl_ms"] is None) == (gaps < stats.P99_MIN_SAMPLES)
