"""The capacity experiment's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from pydantic import Field, field_validator

from offload_lab.published.study_inputs import StudyParams


class Params(StudyParams):
    max_team: int = Field(10_000, ge=1, description="pods are computed for every team size up to this")
    utilizations: list[float] = Field([1.0, 0.5], min_length=1, description="pod utilizations for seats by volume")
    rhos: list[float] = Field([0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3], min_length=1,
                              description="intra-team correlations to tabulate")
    rho_example: float = Field(0.05, gt=0, lt=1, description="the correlation the text and the simulation use")
    schedule_shape: list[float] | None = Field(
        None, description="a shared daily schedule: relative q over equal parts of the window (an assumption)")
    session_hours: float = Field(2.0, gt=0, description="length of a session in the simulation (an assumption)")
    simulation_weeks: int = Field(52, ge=1, description="weeks simulated; days = weeks × the profile's active days")
    simulation_team: int | None = Field(None, ge=1, description="team simulated (default: largest published team)")
    step_seconds: float = Field(2.0, gt=0, description="time step of the simulation")
    seed: int = Field(20260101, description="seed of the simulation")

    @field_validator("rhos")
    @classmethod
    def _rhos(cls, v: list[float]) -> list[float]:
        if any(not (0 <= r < 1) for r in v):
            raise ValueError("every rho must be in [0, 1)")
        return sorted(set(v))

    @field_validator("utilizations")
    @classmethod
    def _utilizations(cls, v: list[float]) -> list[float]:
        if any(not (0 < u <= 1) for u in v):
            raise ValueError("every utilization must be in (0, 1]")
        return v
