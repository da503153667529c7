"""The published week's split into output and new input: not published, inferred from the published hours, share of
the week and q at a chosen prefill rate, with the range their rounding allows (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from offload_lab.core.errors import InputError
from offload_lab.seats.profile import (load_profile, parse_profile, profile_timing, published_hours_interval,
                                       rounding_interval, split_for_hours)

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "configs" / "profiles" / "published-week.yaml"
PREFILL = 260_000 / 45.07  # the study's longest fresh prompt over its TTFT, the rate the split is inferred at


def _rounds_to(value: float, printed: str) -> bool:
    lo, hi = rounding_interval(printed)
    return lo - 1e-12 <= value < hi + 1e-12


def test_rounding_intervals():
    assert rounding_interval("2.8") == pytest.approx((2.75, 2.85))
    assert rounding_interval("7.1%") == pytest.approx((0.0705, 0.0715))
    assert rounding_interval("1.7%") == pytest.approx((0.0165, 0.0175))
    with pytest.raises(InputError, match="not a number as printed"):
        rounding_interval("about three")


def test_the_published_roundings_intersect_where_q_allows():
    prof = load_profile(PUBLISHED)
    lo, hi = published_hours_interval(prof)
    assert (lo, hi) == pytest.approx((2.82, 2.85))  # q's 7.1% of 40 h and the 2.8 h's upper end


@pytest.mark.parametrize("prefill", [PREFILL, 131_072 / 18.33, 4_822.0])
def test_inferred_split_reproduces_the_published_hours_and_q_within_their_rounding(prefill):
    prof = load_profile(PUBLISHED)
    pub = prof.published
    t = profile_timing(prof, stream_tok_s=pub.stream_tok_s, prefill_tok_s=prefill)
    assert t.split == "inferred" and not t.split_known and "not published" in t.split_basis
    r = prof.tokens.cached_reads_per_output_token
    # The central split and both ends of its range: each adds up to the total and times to the published figures.
    for out, new in [(t.output_tokens, t.new_input_tokens), (t.output_tokens_range[0], t.new_input_tokens_range[1]),
                     (t.output_tokens_range[1], t.new_input_tokens_range[0])]:
        assert (1 + r) * out + new == pytest.approx(prof.tokens.total)
        hours = (out / pub.stream_tok_s + new / prefill) / 3600
        assert _rounds_to(hours, pub.printed("hours_generating"))
        assert _rounds_to(hours / 168, pub.printed("fraction_of_period"))
        assert _rounds_to(hours / 40, pub.printed("q"))
    assert t.output_tokens_range[0] <= t.output_tokens <= t.output_tokens_range[1]
    assert t.new_input_tokens_range[0] <= t.new_input_tokens <= t.new_input_tokens_range[1]


def test_the_chosen_rate_gives_the_findings_split():
    t = profile_timing(load_profile(PUBLISHED), stream_tok_s=40, prefill_tok_s=PREFILL)
    assert t.output_tokens == pytest.approx(392_375, rel=1e-5)
    assert t.output_tokens_range == pytest.approx((390_087, 396_950), rel=1e-5)
    assert t.new_input_tokens == pytest.approx(2.392e6, rel=1e-3)
    assert t.q == pytest.approx(0.071)


def test_a_ratio_profile_needs_both_rates_and_agreeing_published_figures():
    prof = load_profile(PUBLISHED)
    with pytest.raises(InputError, match="prefill rate"):
        profile_timing(prof, stream_tok_s=40)
    data = prof.model_dump()
    data["published"]["as_published"] = {"hours_generating": "2.0", "q": "7.1%"}
    with pytest.raises(InputError, match="do not agree"):
        profile_timing(parse_profile(data), stream_tok_s=40, prefill_tok_s=PREFILL)
    with pytest.raises(InputError, match="no split"):
        split_for_hours(94.6e6, 234, 40, PREFILL, hours=100.0)


def test_the_old_field_name_is_refused_with_its_new_meaning():
    data = load_profile(PUBLISHED).model_dump()
    data["tokens"] = {"total": 94.6e6, "cached_reads_per_written_token": 234}
    with pytest.raises(InputError, match="cached_reads_per_output_token"):
        parse_profile(data)
