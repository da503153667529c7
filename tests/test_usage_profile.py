"""Usage profiles: the published one loads and times as the study says; bad ones are refused, naming the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from offload_lab.cli import main as cli
from offload_lab.core.errors import InputError
from offload_lab.seats.profile import load_profile, parse_profile, profile_timing

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "configs" / "profiles" / "published-week.yaml"


def _good() -> dict:
    return {
        "name": "t", "provenance": {"kind": "assumed", "source": "a test"}, "period_days": 7, "active_days": 5,
        "sessions": 10, "window_hours": 8,
        "tokens": {"output": 360_000, "new_input": 720_000, "cached_read": 10_000_000},
    }


def test_published_profile_times_to_the_published_figures():
    prof = load_profile(PUBLISHED)
    assert prof.provenance.kind == "published" and prof.provenance.section
    t = profile_timing(prof, stream_tok_s=prof.published.stream_tok_s, prefill_tok_s=260_000 / 45.07)
    assert not t.split_known  # a total and a ratio: the split is inferred from the published hours
    # The published figures are rounded; this project's must round to them.
    assert round(t.hours_generating, 1) == prof.published.hours_generating
    assert round(t.fraction_of_period, 3) == prof.published.fraction_of_period
    assert abs(t.q - prof.published.q) < 0.0015
    assert t.output_tokens + t.new_input_tokens + t.cached_read_tokens == pytest.approx(prof.tokens.total)
    assert t.cached_read_tokens / t.output_tokens == pytest.approx(prof.tokens.cached_reads_per_output_token)


def test_published_profile_figures_are_in_the_published_summary():
    src = ROOT / load_profile(PUBLISHED).provenance.source
    if not src.is_file():
        pytest.skip(f"the published summary {src} is not on this machine")
    text = src.read_text(encoding="utf-8")
    section = text[text.index("## E11"): text.index("## E12")]
    prof = load_profile(PUBLISHED)
    pub = prof.published
    for words in (f"{prof.tokens.total / 1e6:g} million", f"{prof.sessions} sessions",
                  f"{prof.active_days:g} active days", f"| {prof.tokens.cached_reads_per_output_token:g} |",
                  f"{prof.window_hours:g} hours on each", f"{pub.hours_generating:g} hours a week",
                  f"{100 * pub.fraction_of_period:g}% of", f"{100 * pub.q:g}%", f"{pub.stream_tok_s:g} tok/s"):
        assert words in section, words


def test_split_profile_times_output_and_prefill():
    t = profile_timing(parse_profile(_good()), stream_tok_s=40, prefill_tok_s=4000)
    assert t.split_known
    assert t.hours_generating == pytest.approx((360_000 / 40 + 720_000 / 4000) / 3600)
    assert t.q == pytest.approx(t.hours_generating / 40)
    assert t.fraction_of_period == pytest.approx(t.hours_generating / 168)


@pytest.mark.parametrize("change,field,words", [
    ({"tokens": {"output": -5, "new_input": 0, "cached_read": 0}}, "tokens.output", "greater than or equal to 0"),
    ({"tokens": {"total": -1, "cached_reads_per_output_token": 3}}, "tokens.total", "greater than or equal to 0"),
    ({"window_hours": 25}, "(profile)", "longer than a day"),
    ({"active_days": 8}, "(profile)", "more than the period has days"),
    ({"period_days": 0}, "period_days", "greater than 0"),
    ({"sessions": -2}, "sessions", "greater than or equal to 0"),
    ({"tokens": {"output": 1, "new_input": 2}}, "tokens", "either output, new_input and cached_read"),
    ({"tokens": {"output": 1, "new_input": 2, "cached_read": 3, "total": 7}}, "tokens", "does not equal total"),
    ({"tokens": {"total": 9, "cached_reads_per_output_token": 2, "output": 1}}, "tokens", "not a mix"),
    ({"surprise": 1}, "surprise", "Extra inputs are not permitted"),
    ({"provenance": {"kind": "rumour", "source": "x"}}, "provenance.kind", "published"),
])
def test_bad_profiles_rejected_naming_the_field(change, field, words):
    with pytest.raises(InputError) as e:
        parse_profile({**_good(), **change}, where="usage profile bad.yaml")
    msg = str(e.value)
    assert "usage profile bad.yaml" in msg and words in msg
    if field != "(profile)":
        assert re.search(rf"^\s+{re.escape(field)}:", msg, re.M), msg


def test_timing_rejects_what_cannot_be_timed():
    prof = parse_profile(_good())
    with pytest.raises(InputError, match="prefill rate"):
        profile_timing(prof, stream_tok_s=40)
    with pytest.raises(InputError, match="positive"):
        profile_timing(prof, stream_tok_s=0, prefill_tok_s=1000)
    with pytest.raises(InputError, match="do not fit in its window"):
        profile_timing(prof, stream_tok_s=1, prefill_tok_s=1)


def test_cli_profile_exit_codes(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**_good(), "window_hours": 30}))
    assert cli.main(["profile", str(bad), "--stream-tok-s", "40"]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "longer than a day" in err
    assert cli.main(["profile", str(tmp_path / "missing.yaml"), "--stream-tok-s", "40"]) == 2
    assert cli.main(["profile", str(PUBLISHED), "--stream-tok-s", "40", "--prefill-tok-s", "5769", "--json"]) == 0
    assert '"q":' in capsys.readouterr().out
