"""How a rehearsal runs and prices this experiment (found by :mod:`offload_lab.campaigns.rehearse_cost`)."""

from __future__ import annotations

from typing import Any

# Replies on a real model have lengths no model here knows, so the rehearsal's own minutes stand.
BASIS = "measured here (reply lengths of the real model are not known)"
NOTE = ("both sides on the emulated pod: its replies are fixed words, the same on every side, so the comparison "
        "exercises the harness (canaries, scoring, pairing), not the model")


def rehearsal_parameters(params: dict[str, Any], overridden: dict[str, Any], campaign_stack: str | None) -> dict[str, Any]:
    """Both sides on the emulated pod: the vendor's API needs a key and the network (declared in the data)."""
    return params if "reference" in overridden else params | {"reference": None}
