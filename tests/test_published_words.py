"""Attribution exactly as published (issue 33): every figure's "published words" are the source's words, quoted
from the source text the project ships (offload_lab/resources/published, with its sha256), never the transcriber's
notes; every figure says who published it; the paper's table of published figures prints only such quotes under
"Published words" and only published figures under "Published". No test here reads ../shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from offload_lab.core import runs
from offload_lab.published import transcription as published

ROOT = Path(__file__).resolve().parents[1]
FILES = ("study.yaml", "derived.yaml", "community-memory-math.yaml", "addenda.yaml")


def _norm(text: str) -> str:
    # The sources print a true minus and wrap their lines; a quote may span two. Markdown escapes are not words.
    return " ".join(text.replace("\u2212", "-").replace("\\|", "|").split()).lower()


def _load(name: str) -> tuple[published.Transcription, str]:
    t = published.load_transcription(ROOT / "configs" / "published" / name)
    return t, _norm(published.source_words(published.source_text(t.source)))


@pytest.mark.parametrize("name", FILES)
def test_the_source_each_transcription_names_ships_with_the_package_unchanged(name: str) -> None:
    t = published.load_transcription(ROOT / "configs" / "published" / name)
    shipped = published.shipped_source(t.source)
    assert shipped is not None and runs.sha256_file(shipped) == t.source_sha256
    assert "../shared" not in t.source and published.check_source(t, ROOT) is True


@pytest.mark.parametrize("name", FILES)
def test_every_published_words_cell_is_the_sources_words(name: str) -> None:
    t, words = _load(name)
    for f in t.figures:
        if f.words != "source":
            continue
        for part in f.published.split(" | "):
            assert _norm(part).strip('"') in words, f"{f.key}: {part!r} is not the words of {t.source}"


def test_the_transcribers_notes_are_not_the_sources_words() -> None:
    t, words = _load("study.yaml")
    assert "on one rented pod" not in words
    assert not any("at one byte each" in f.published for f in t.figures)
    _, derived = _load("derived.yaml")
    assert "1,526.4" not in derived  # the transcriber's arithmetic
    notes = [f.key for name in FILES for f in published.load_transcription(ROOT / "configs/published" / name).figures
             if f.words == "transcription"]
    assert "model_name" in notes and "pod_gpus" in notes


def test_each_figure_is_attributed_as_published() -> None:
    figs = {f.key: f for name in FILES for f in published.load_transcription(ROOT / "configs/published" / name).figures}
    assert figs["params_total_b"].by == "an outside estimate the blog quotes"
    assert figs["bf16_gb"].by == "an outside estimate the blog quotes"
    assert figs["params_study_b"].by == "the study" and figs["params_study_b"].value == 763
    assert figs["params_active_b"].by == "the community page"
    assert figs["params_community_b"].by == "the community page"
    # The transcriber's arithmetic is not a published figure at all: the project computes it.
    assert "bf16_gb_from_parts" not in figs and "four_agents_median_sum" not in figs
    assert figs["api_cost_usd"].published == "plus 12 cents of API calls"
    assert figs["quality_ci_level"].value == 0.95
