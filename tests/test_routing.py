"""Routing counts: the file format and its sanity checks, vLLM's routed-experts capture, and the tiny model's routers
run in transformers (in the server environment)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from fit_helpers import tiny_model  # noqa: F401

from offload_lab.fit import routing
from offload_lab.core.errors import InputError, ProducerError


def test_capture_arrays_are_counted_per_layer():
    a = np.array([[[0, 1], [2, 3]], [[0, 2], [2, 1]]], dtype=np.int16)  # [tokens=2, layers=2, top_k=2]
    b = np.array([[[3, 1], [0, 1]]], dtype=np.int16)
    c = routing.from_routed_experts([a, b], layers=[3, 4], num_experts=4)
    assert c.tokens == 3 and c.top_k == 2 and c.layers == [3, 4]
    assert c.counts.tolist() == [[2, 2, 1, 1], [1, 2, 2, 1]]
    assert np.allclose(c.probabilities().sum(axis=1), 2)
    with pytest.raises(InputError, match=r"outside 0..3"):
        routing.from_routed_experts([a + 4], layers=[3, 4], num_experts=4)
    with pytest.raises(InputError, match=r"expected \[tokens, 3, top_k\]"):
        routing.from_routed_experts([a], layers=[1, 2, 3], num_experts=4)


def test_counts_that_do_not_add_up_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"layer 0 has 5 routings, expected tokens x top_k = 4"):
        routing.RoutingCounts("m", [0], 3, 2, 2, np.array([[2, 2, 1]]))
    c = routing.RoutingCounts("m", [0, 1], 3, 1, 2, np.array([[1, 1, 0], [0, 0, 2]]), {"kind": "test"})
    back = routing.RoutingCounts.load(c.save(tmp_path / "c.json"))
    assert back.counts.tolist() == c.counts.tolist() and back.source == {"kind": "test"}
    (tmp_path / "other.json").write_text('{"format": "something-else"}')
    with pytest.raises(InputError, match=r"not an offload-lab routing counts file"):
        routing.RoutingCounts.load(tmp_path / "other.json")
    assert (c + c).tokens == 4


def test_synthetic_counts_are_skewed_and_valid():
    c = routing.synthetic_counts([0, 1], 16, 4, 500, skew=1.2, seed=1)
    assert c.counts.sum(axis=1).tolist() == [2000, 2000]
    assert c.counts.max() > 3 * c.counts.min()


def _torch_python() -> str | None:
    try:
        py = routing.torch_python()
    except InputError:
        return None
    return py if Path(py).exists() or os.environ.get(routing.TORCH_PYTHON_ENV) else None


@pytest.mark.slow
@pytest.mark.skipif(_torch_python() is None, reason="no Python with torch and transformers (make server-env)")
def test_tiny_model_routers_in_transformers(tiny_model):
    texts = routing.corpus_paragraphs()[:6] + routing.shifted_texts(2)
    got = routing.collect_hf(tiny_model, texts, max_tokens=64)
    assert got["layers"] == [0, 1, 2, 3] and got["num_experts"] == 32 and got["top_k"] == 4
    assert len(got["texts"]) == 8 and all(0 < t["tokens"] <= 64 for t in got["texts"])
    c = routing.counts_from_collected(got, range(6), model="tiny")
    assert c.tokens == sum(t["tokens"] for t in got["texts"][:6])
    assert c.counts.sum(axis=1).tolist() == [c.tokens * 4] * 4
    # Deterministic: the same weights and texts give the same counts.
    again = routing.collect_hf(tiny_model, texts[:2], max_tokens=64)
    assert again["texts"][0]["counts"] == got["texts"][0]["counts"]


def test_collect_reports_a_failing_script(tmp_path):
    bad = tmp_path / "python"
    bad.write_text("#!/bin/sh\necho 'no torch here' >&2\nexit 3\n")
    bad.chmod(0o755)
    with pytest.raises(ProducerError, match=r"exit code 3:\nno torch here"):
        routing.collect_hf(tmp_path, ["text"], python=str(bad))
