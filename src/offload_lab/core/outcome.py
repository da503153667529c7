"""What a command's library call returns: the JSON document ``--json`` prints, the lines the text display prints,
and the exit status. One type for every layer, so the command line renders every result the same way
(cli/model_options.py's ``Command``: a handler that returns an Outcome is printed by the bridge)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    payload: Any
    lines: list[str] = field(default_factory=list)
    code: int = 0  # the exit status: 0 ok, 1 a negative answer (does not fit, invalid side), 2 bad input
