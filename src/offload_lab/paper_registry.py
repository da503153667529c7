"""Every section's claims and figures, gathered in one place: importing this module gives the whole paper's
registry (the paper build imports it). Sections declare theirs in their own modules; this is the one list."""

from __future__ import annotations

from . import claims, claims_capacity, figures, figures_capacity
from .quality import paper_claims as _quality  # noqa: F401  (registers on import)

claims.REGISTRY.update(claims_capacity.SECTION)
figures.FIGURES.update(figures_capacity.SECTION)
