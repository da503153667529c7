"""What every part of the command line shares."""

from __future__ import annotations

import json
from typing import Any


def print_json(obj: Any) -> None:
    """Print a JSON document for `--json`: indented, with anything JSON does not know written as text."""
    print(json.dumps(obj, indent=2, default=str))
