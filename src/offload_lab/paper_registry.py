"""Every section's claims and figures, gathered in one place: importing this module gives the whole paper's
registry (the paper build imports it). Sections declare theirs in their own modules; this is the one list.

| module | sections |
|---|---|
| ``claims`` (and ``figures``) | boots (model facts, start-up), context length |
| ``claims_study`` (and ``figures``) | the model and its fit, the plan, boots, prefill, streams and the bar, agent turns, quality verdicts, topology, published variants |
| ``claims_capacity``, ``figures_capacity`` | seats and cost |
| ``quality.paper_claims`` | quality |
"""

from __future__ import annotations

from . import claims, claims_capacity, claims_study, figures, figures_capacity
from .quality import paper_claims as _quality  # noqa: F401  (registers on import)

SECTIONS = (claims_capacity.SECTION, claims_study.SECTION)

for _section in SECTIONS:
    claims.REGISTRY.update(_section)
figures.FIGURES.update(figures_capacity.SECTION)
