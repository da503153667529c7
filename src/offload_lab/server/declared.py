"""What every pinned item of a stack file shares: the pin patterns and the rule for ``pinned:``/``todo:``.

Its own module so that :mod:`offload_lab.server.spec` and :mod:`offload_lab.server.plan_spec` both import it from
below, instead of one importing the other's private helper at run time.
"""

from __future__ import annotations

import re

FULL_SHA1 = re.compile(r"^[0-9a-f]{40}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def check_declared(pinned: bool | None, todo: str | None, complete: bool, what: str) -> None:
    # `pinned: false` must say what is missing; `pinned: true` must be true.
    if pinned is False and not (todo or "").strip():
        raise ValueError(f"{what} says pinned: false; add a todo saying what is missing and where to find it")
    if pinned is True and not complete:
        raise ValueError(f"{what} says pinned: true but its pin is incomplete (a full commit, an exact version, "
                         "a sha256); fix the pin or say pinned: false with a todo")
