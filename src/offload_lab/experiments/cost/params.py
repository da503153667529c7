"""The cost experiment's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from pydantic import Field

from offload_lab.published.study_inputs import StudyParams


class Params(StudyParams):
    hours_per_month: float | None = Field(None, gt=0, le=744,
                                          description="hours a pod is billed a month (None: 24 × 365 / 12)")
    max_team_plot: int = Field(300, ge=1, description="teams 1..this in teams.csv")
    q_factors: list[float] = Field([0.5, 0.75, 1.0, 1.5, 2.0], description="q × these, for the sensitivity")
    pod_price_factors: list[float] = Field([0.5, 0.75, 1.0, 1.5, 2.0], description="pod price × these")
    seat_price_factors: list[float] = Field([0.5, 0.75, 1.0, 1.5, 2.0], description="subscription × these")
    alphas: list[float] = Field([0.001, 0.01, 0.05, 0.1], description="α values for the sensitivity")
    rhos: list[float] = Field([0.0, 0.02, 0.05, 0.1], description="intra-team correlations for the sensitivity")
    rho_example: float = Field(0.05, gt=0, lt=1, description="the correlation the text quotes (added to rhos)")
