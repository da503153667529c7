"""The install record an environment keeps beside its interpreter (written by ``stack install``, read at each boot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORD_NAME = "offload-lab-install.json"


def read_record(python: Path) -> dict[str, Any] | None:
    """The install record next to an environment's interpreter (``<venv>/bin/python``), if there is one."""
    path = Path(python).parent.parent / RECORD_NAME
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None
