"""Run in SkyPilot's environment (not offload-lab's): print, as JSON, every accelerator name SkyPilot's installed
package knows offline, with where each list came from (module, file, sha256). Its answer is stored as
``src/offload_lab/resources/skypilot_accelerators.json`` (remake it with ``.venvs/sky/bin/python THIS > FILE``;
tests/test_pods_skypilot.py checks it is current), which ``pod:`` in a stack file is checked against (the lab
environment never imports SkyPilot). Imports nothing of offload-lab.

Sources (SkyPilot 0.14.1): ``sky.utils.gpu_names.CANONICAL_GPU_NAMES`` (the canonical names its backends use),
``sky.catalog.get_common_gpus()``, RunPod's name table (``sky.provision.runpod.utils.GPU_NAME_MAP``) and the RunPod
catalog fetcher's GPU table (``DEFAULT_GPU_INFO``). The clouds' full catalogs are downloaded by SkyPilot at launch and
are not read here: a name only a cloud's catalog has is refused by offload-lab until the snapshot is remade.
"""
import ast
import hashlib
import importlib
import importlib.util
import inspect
import json
import sys

try:
    import sky
except ImportError as e:
    print(f"cannot import sky: {e}", file=sys.stderr)
    sys.exit(3)



def _constant(module, name):
    """A module's literal list or dict, read from its source (importing RunPod's fetcher needs RunPod's SDK)."""
    path = importlib.util.find_spec(module).origin
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:
            return list(ast.literal_eval(node.value)), path
    raise LookupError(f"{module}.{name} not found")


def _common(module, name):
    mod = importlib.import_module(module)
    return list(getattr(mod, name)()), inspect.getsourcefile(mod)


SOURCES = [
    ("sky.utils.gpu_names", "CANONICAL_GPU_NAMES", _constant),
    ("sky.catalog", "get_common_gpus", _common),
    ("sky.provision.runpod.utils", "GPU_NAME_MAP", _constant),
    ("sky.catalog.data_fetchers.fetch_runpod", "DEFAULT_GPU_INFO", _constant),
]
names = {}
sources = []
for module, attr, read in SOURCES:
    found, path = read(module, attr)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    sources.append({"name": f"{module}.{attr}", "file": path.split("site-packages/", 1)[-1], "sha256": digest,
                    "count": len(found)})
    for n in found:
        names.setdefault(n, []).append(f"{module}.{attr}")
print(json.dumps({"skypilot": sky.__version__, "sources": sources,
                  "accelerators": {n: names[n] for n in sorted(names, key=str.lower)}}, indent=1))
