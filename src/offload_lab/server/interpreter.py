"""The stack's interpreter, run once by `stack check`: it runs, it is a Python, and it has the server's module."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from offload_lab.core.errors import InputError
from offload_lab.server.stack import Stack, server_env

# Run by the stack's interpreter: it proves that the interpreter runs and is a Python, and finds the module without
# importing it (importing vLLM takes seconds): the top package by importlib, the rest by file in its folders.
_PROBE = r"""
import importlib.util, json, os, sys
parts = sys.argv[1].split(".")
found = importlib.util.find_spec(parts[0]) is not None
spec = importlib.util.find_spec(parts[0]) if found else None
where = list(spec.submodule_search_locations or []) if spec else []
for part in parts[1:]:
    hits = [d for d in where if os.path.isfile(os.path.join(d, part + ".py"))
            or os.path.isfile(os.path.join(d, part, "__init__.py")) or os.path.isdir(os.path.join(d, part))]
    found = found and bool(hits)
    where = [os.path.join(d, part) for d in hits]
print(json.dumps({"python": sys.version.split()[0], "module": found}))
"""


def check_interpreter(stack: Stack, timeout_s: float = 60.0) -> dict[str, Any] | None:
    """Run the stack's interpreter once: None when it is not installed here (a pod's stack is checked before its
    install); else its version and whether ``server.module`` is there. InputError when it does not run or is not a
    Python, or when the module is missing."""
    python, module = stack.python, stack.spec.server.module
    if not python.exists():
        return None
    try:
        # The server's own environment (its PYTHONPATH may be where the module is).
        env = {**os.environ, **{k: v for k, v in server_env(stack).items() if v is not None}}
        for k in [k for k, v in server_env(stack).items() if v is None]:
            env.pop(k, None)
        p = subprocess.run([str(python), "-c", _PROBE, module], capture_output=True, text=True,
                           timeout=timeout_s, stdin=subprocess.DEVNULL, env=env)
        info = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 and p.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        raise InputError(f"stack file {stack.file}: python {stack.spec.python} ({python}) cannot be run ({e}); "
                         "give the server environment's Python") from e
    if not isinstance(info, dict) or "module" not in info:
        said = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}, no output"]
        raise InputError(f"stack file {stack.file}: python {stack.spec.python} ({python}) is not a Python "
                         f"interpreter that runs ({said[0][:200]}); give the server environment's Python")
    if not info["module"]:
        raise InputError(f"stack file {stack.file}: server.module {module} is not installed in {python}; install the "
                         "stack (`offload-lab stack install`) or fix the module name")
    return info
