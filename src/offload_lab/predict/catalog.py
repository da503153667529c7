"""The hardware catalog: GPUs, host links and host memory, each figure with its source (``resources/hardware.yaml``),
extended or overridden by a user file of the same shape."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from offload_lab.core import inputs
from offload_lab.core.errors import InputError

CATALOG_FILE = "hardware.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Figure(_Strict):
    value: float | None
    source: str = Field(min_length=3, description="the vendor datasheet by its title, or who measured it")
    seen: str | None = None
    derived: str | None = None
    checked: bool = Field(True, description="false: the source's words were not read when the figure was entered")


class Gpu(_Strict):
    name: str
    memory_gb: Figure
    usable_gib: Figure | None = None
    hbm_gbps: Figure
    bf16_tflops: Figure
    fp8_tflops: Figure
    fp4_tflops: Figure
    host_link: str


class Link(_Strict):
    gbps: Figure
    measured_gbps: Figure | None = None
    unified: bool = False


class HostMemory(_Strict):
    gbps_per_channel: Figure


class Catalog(_Strict):
    gpus: dict[str, Gpu] = Field(default_factory=dict)
    links: dict[str, Link] = Field(default_factory=dict)
    host_memory: dict[str, HostMemory] = Field(default_factory=dict)

    def gpu(self, name: str) -> tuple[str, Gpu]:
        key = _norm(name)
        for k, g in self.gpus.items():
            if key in (_norm(k), _norm(g.name)) or _norm(k).replace("-", "") == key.replace("-", ""):
                return k, g
        close = [k for k in self.gpus if key.replace("-", "") in k.replace("-", "")]
        if len(close) == 1:
            return close[0], self.gpus[close[0]]
        if close:
            raise InputError(f"GPU {name!r} is ambiguous in the hardware catalog: {', '.join(sorted(close))}; name one")
        raise InputError(f"GPU {name!r} is not in the hardware catalog ({', '.join(sorted(self.gpus))}); add it to a "
                         "file given with --hardware (same shape as the shipped hardware.yaml)")

    def link(self, name: str) -> Link:
        key = _norm(name)
        if key not in self.links:
            raise InputError(f"host link {name!r} is not in the hardware catalog ({', '.join(sorted(self.links))}); "
                             "add it with --hardware")
        return self.links[key]

    def host(self, name: str) -> HostMemory:
        key = _norm(name)
        if key not in self.host_memory:
            raise InputError(f"host memory {name!r} is not in the hardware catalog "
                             f"({', '.join(sorted(self.host_memory))}); add it with --hardware")
        return self.host_memory[key]

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for k, g in self.gpus.items():
            out.append({"gpu": k, "name": g.name, "memory_gb": g.memory_gb.value, "hbm_gbps": g.hbm_gbps.value,
                        "bf16_tflops": g.bf16_tflops.value, "fp8_tflops": g.fp8_tflops.value,
                        "fp4_tflops": g.fp4_tflops.value, "host_link": g.host_link})
        return out


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _read(data: Any, where: str) -> Catalog:
    try:
        return Catalog.model_validate(data or {})
    except ValidationError as e:
        raise inputs.pydantic_input_error(e, where) from e


def load_catalog(user_file: Path | str | None = None) -> Catalog:
    """The shipped catalog, with a user file's entries added (an entry of the same name replaces the shipped one)."""
    text = (resources.files("offload_lab") / "resources" / CATALOG_FILE).read_text(encoding="utf-8")
    import yaml
    cat = _read(yaml.safe_load(text), f"shipped {CATALOG_FILE}")
    if user_file is None:
        return cat
    p = Path(user_file)
    if not p.is_file():
        raise InputError(f"--hardware {user_file}: no such file; give a YAML file shaped like the shipped "
                         f"{CATALOG_FILE} (gpus:, links:, host_memory:)")
    extra = _read(inputs.read_yaml(p, "hardware file"), f"hardware file {p}")
    return Catalog(gpus={**cat.gpus, **{_norm(k): v for k, v in extra.gpus.items()}},
                   links={**cat.links, **{_norm(k): v for k, v in extra.links.items()}},
                   host_memory={**cat.host_memory, **{_norm(k): v for k, v in extra.host_memory.items()}})
