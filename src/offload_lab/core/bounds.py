"""The ranges quantities allow, in one place: the CLI's flag types (cli/common.py) and the parameter models of the
experiments and stack files use these, so that a typo (1e26 output tokens, 1e9 streams, a timeout of 1e308 s) is
refused where it is read, with the range in the message, and never reaches a server, an allocator or a clock.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# No model reads or writes more than ten million tokens in one request (the longest context windows are ~10M).
MAX_TOKENS = 10_000_000
# One client machine cannot hold more open streams than this.
MAX_STREAMS = 10_000
# A wait longer than a week is a typo (1e308 s overflows the clocks that wait on it).
MAX_SECONDS = 7 * 24 * 3600.0
# No server streams or prefills a billion tokens a second; a price of a trillion (EUR) an hour is a typo.
MAX_TOKEN_RATE = 1e9
MAX_PRICE = 1e12

# A token count of a request, 1 to MAX_TOKENS (campaign files are validated strictly, so `true` is no count).
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
