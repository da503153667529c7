"""The week's split and the prefill rate inferred from every published figure at once (seats.joint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from offload_lab.core.errors import InputError
from offload_lab.seats import joint
from offload_lab.seats.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
VOLUMES = (("262", 1.0), ("131", 0.5))
RATES = (("128K prompt", 131072 / 18.33), ("260,000-token prompt", 260000 / 45.07))


@pytest.fixture(scope="module")
def week():
    return load_profile(ROOT / "configs" / "profiles" / "published-week.yaml")


def test_every_published_figure_is_reproduced_by_the_joint_values(week):
    j = joint.infer_jointly(week, 40.0, "168", VOLUMES, RATES)
    lo, hi = j.prefill_tok_s_range
    assert lo < j.prefill_tok_s < hi and j.output_range[0] < j.output < j.output_range[1]
    # The central split gives the published volume, and its hours the published q, as the counts print them.
    seats = 168 * 3600 * 168 / j.output
    assert joint.count_of(seats, "floor") == 262 and joint.count_of(seats / 2, "floor") == 131
    t = joint.joint_timing(week, j, 40.0)
    assert round(100 * t.q, 1) == 7.1 and round(t.hours_generating, 1) == 2.8
    assert t.output_tokens + t.new_input_tokens + t.cached_read_tokens == pytest.approx(94.6e6)
    # q sets the hours' lower end, the printed hours their upper end, 262 the output: those bind; 131 and the share
    # of the week do not.
    assert set(j.binding) == {"the hours (2.8)", "q (7.1%)", "262 developers by volume at full utilization"}


def test_each_measured_rate_is_checked_against_the_volume(week):
    j = joint.infer_jointly(week, 40.0, "168", VOLUMES, RATES)
    by = {c.name: c for c in j.rate_checks}
    slow = by["260,000-token prompt"].volumes["262 developers by volume at full utilization"]
    assert slow["recomputed"] == 258 and slow["difference"] == -4  # the rate alone, at the printed figures
    assert slow["low"] <= 262 <= slow["high"]  # but within what the roundings allow: no figure disagrees
    assert all(c.in_joint_range and not c.disagrees for c in j.rate_checks)


def test_a_volume_no_split_can_give_is_refused_naming_the_figures(week):
    with pytest.raises(InputError, match="262 developers by volume"):
        joint.infer_jointly(week, 40.0, "168", (("262", 1.0), ("100", 0.5)))
