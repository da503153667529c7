"""What a stack file may say about the server's environment and arguments: names, never secret values.

A stack file is copied into every boot's manifest and printed by ``stack check``, so a token or API key written in it
would end up in data files. Secrets are passed through from the environment of the command that starts the server
(``server.env_from: [NAME]``), and only their names are recorded.
"""

from __future__ import annotations

import re

from offload_lab.core.redact import is_secret_flag, looks_secret

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The harness binds the server to 127.0.0.1 and the port it chose; these in server.args would override that.
BOUND_FLAGS = ("--host", "--port")


def check_env_and_args(env: dict[str, str], args: list[str], where: str) -> None:
    """No secret values in a stack file: a secret-looking variable's value, or a secret flag's value, is refused
    with the way to pass it instead (``env_from``); ``--host``/``--port`` are refused because the harness binds
    them."""
    for name, value in env.items():
        if "\x00" in str(value):
            raise ValueError(f"{where}.env: {name}'s value holds a NUL byte, which no environment variable can; "
                             "remove it")
        if not ENV_NAME.match(name):
            raise ValueError(f"{where}.env: {name!r} is not an environment variable name")
        if looks_secret(name):
            raise ValueError(f"{where}.env: {name} looks like a secret; a stack file must not hold its value (it "
                             f"is copied into every boot's manifest): list {name} in server.env_from so it is "
                             "passed through from your environment")
    for a in args:
        flag = a.split("=", 1)[0]
        if is_secret_flag(flag):
            raise ValueError(f"{where}.args: {flag} takes a secret; a stack file must not hold it: set it in an "
                             f"environment variable named in server.env_from (vLLM reads VLLM_API_KEY)")
        if flag in BOUND_FLAGS:
            raise ValueError(f"{where}.args: {flag} is set by offload-lab (the server binds 127.0.0.1 and the port "
                             "given to `serve --port`); remove it")
