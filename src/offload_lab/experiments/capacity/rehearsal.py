"""How a rehearsal runs this experiment (found by :mod:`offload_lab.campaigns.rehearse_cost`)."""

from __future__ import annotations

from typing import Any


def rehearsal_parameters(params: dict[str, Any], overridden: dict[str, Any], campaign_stack: str | None) -> dict[str, Any]:
    """Priced as the real pod: the pod campaign's stack file, not its emulated copy."""
    if params.get("source") == "measured" and not params.get("price_stack") and campaign_stack:
        return params | {"price_stack": campaign_stack}
    return params
