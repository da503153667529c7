"""The ``plans:`` section of a stack file: the plan files, the format the stack's offload part reads, and which part
reads it.

offload-lab's own plans (docs/plan-files.md) are always made; a stack whose offload part reads another format
declares it (``plans.format``) and the install writes the plan in that format too, to the file the server is given
(``served_path``; by default ``<path>`` with ``.<format>.json`` for ``.json``). ``plans.read_by`` names the part (and
the patch of that part) whose code reads the file; for the readers offload-lab knows (:data:`KNOWN_READERS`) the
format and the environment variable are checked against what that code reads, so a stack cannot hand a patch a plan
it would not find its layers in.

The writers and the strict readers of each format are the plan layer's (:mod:`offload_lab.fit.plan_formats`); this
module only names the formats, so that the server layer, which does not import the plan layer, can validate stack
files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from offload_lab.server.declared import SHA256, check_declared
from offload_lab.server.envargs import ENV_NAME

if TYPE_CHECKING:  # pragma: no cover
    from offload_lab.server.spec import Part, ServerSpec

PlanFormat = Literal["offload-lab", "dsv41-host-plan"]
PLAN_FORMATS: tuple[str, ...] = get_args(PlanFormat)
SHA256_LEN = 64


@dataclass(frozen=True)
class KnownReader:
    """Code that reads a plan file, as offload-lab knows it: the formats it reads, the variable it reads the file's
    path from, and where that was read."""

    formats: tuple[str, ...]
    env: str
    provenance: str
    weight_formats: tuple[str, ...] = ()  # the weight formats (vLLM --quantization) whose layers read the plan


# Keyed by the patch's path (a from_part patch's ``path``, or a ``file``'s name): a label ending with it is that
# patch. Only what was read from the code goes here.
KNOWN_READERS: dict[str, KnownReader] = {
    "patches/vllm-exl3-host-dma.patch": KnownReader(
        formats=("dsv41-host-plan",), env="EXL3_HOST_EXPERTS",
        provenance="0xSero/dsv41-flash-offload patches/vllm-exl3-host-dma.patch, as republished at "
                   "HamidYaraliOfficial/dsv41-flash-offload@cb98d7bd: _host_plan_for reads "
                   "json.load(open($EXL3_HOST_EXPERTS)) and looks each MoE layer up by its vLLM layer_name; "
                   "pack/prepare_pack.py writes {\"model.layers.<N>.ffn.experts\": [ids]}; the host DMA lives in "
                   "vllm-exl3's EXL3 MoE method and moves EXL3 trellis tensors only",
        weight_formats=("exl3",)),
}


def known_reader(patch_label: str | None) -> KnownReader | None:
    if not patch_label:
        return None
    for path, reader in KNOWN_READERS.items():
        if patch_label == path or patch_label.endswith(":" + path) or patch_label.endswith("/" + path):
            return reader
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlanFileSpec(_Strict):
    path: str = Field(description="plan file (offload-lab format, docs/plan-files.md), relative to the root")
    served_path: str | None = Field(
        None, description="the file the server is given, in plans.format (default: path, or for another format "
                          "path with .json replaced by .<format>.json)")
    description: str = ""
    make: list[str] | None = Field(
        None, description="arguments to `offload-lab plan make` that write it; {model} is the model path, "
                          "{out} the plan path")
    sha256: str | None = Field(None, description="sha256 of the plan file when it is committed rather than made")
    pinned: bool | None = None
    todo: str | None = None

    @model_validator(mode="after")
    def _declared(self) -> "PlanFileSpec":
        if self.sha256 is not None and not SHA256.match(self.sha256):
            raise ValueError(f"plan {self.path}: sha256 is not 64 hex digits")
        check_declared(self.pinned, self.todo, self.complete(), f"plan {self.path}")
        return self

    def complete(self) -> bool:
        return bool(self.make or self.sha256)


class PlanReader(_Strict):
    """The code that reads the plan file the server is given."""

    part: str = Field(description="the stack part whose code reads it (e.g. vllm-exl3)")
    patch: str | None = Field(None, description="the patch of that part that adds the reading, by its label "
                                                "(file, or from_part:path)")
    provenance: str | None = Field(None, description="where what it reads was read")


class PlanSet(_Strict):
    env: str = Field(description="environment variable the server reads the plan file's path from")
    format: PlanFormat = Field("offload-lab", description="the format the stack's offload part reads")
    read_by: PlanReader | None = Field(None, description="which part (and patch) reads the plan")
    format_provenance: str | None = Field(None, description="where the format the offload part reads was read")
    use: str | None = Field(None, description="the plan the server boots with (a key of files; null: none)")
    files: dict[str, PlanFileSpec] = Field(default_factory=dict)
    dry_run_checkpoint: str | None = Field(
        None, description="checkpoint the dry run makes the plans from without the model: a synthetic checkpoint "
                          "spec (configs/checkpoints/*.yaml) or a checkpoint directory, root-relative")

    @model_validator(mode="after")
    def _known(self) -> "PlanSet":
        if self.use is not None and self.use not in self.files:
            raise ValueError(f"plans.use {self.use!r} is not one of plans.files {sorted(self.files)}")
        if not ENV_NAME.match(self.env):
            raise ValueError(f"plans.env {self.env!r} is not an environment variable name")
        for name, f in self.files.items():
            if self.format != "offload-lab" and self.served_path(name) == f.path:
                raise ValueError(f"plan {name}: served_path is the offload-lab plan's own path; the server gets the "
                                 f"plan as {self.format}, in a file of its own")
        return self

    def served_path(self, name: str) -> str:
        """The file (root-relative or absolute, as written) the server gets for plan ``name``, in ``format``."""
        f = self.files[name]
        if f.served_path:
            return f.served_path
        if self.format == "offload-lab":
            return f.path
        stem = f.path[:-len(".json")] if f.path.endswith(".json") else f.path
        return f"{stem}.{self.format}.json"

    def reader(self) -> KnownReader | None:
        return known_reader(self.read_by.patch) if self.read_by else None


def check_plan_reader(plans: PlanSet, parts: list["Part"], server: "ServerSpec") -> None:
    """The plan reaches the code that reads it: the reader is a part (and patch) of the stack, the format and the
    variable are the ones that code reads, and nothing else sets that variable. Raises ValueError naming the fix."""
    if plans.env in server.env:
        raise ValueError(f"server.env sets {plans.env}, the variable plans.env gives the plan's path in; "
                         "remove it from server.env (the stack sets it from plans.use)")
    if plans.env in server.env_from:
        raise ValueError(f"server.env_from passes {plans.env} through from the shell; remove it (the stack sets it "
                         "from plans.use, and a plan from the shell would not be the one recorded)")
    rb = plans.read_by
    if rb is None:
        return
    by_name = {p.name: p for p in parts}
    if rb.part not in by_name:
        raise ValueError(f"plans.read_by.part {rb.part!r} is not a part of the stack ({sorted(by_name)})")
    labels = [p.label for p in by_name[rb.part].patches]
    if rb.patch is not None and rb.patch not in labels:
        raise ValueError(f"plans.read_by.patch {rb.patch!r} is not a patch of part {rb.part} ({labels})")
    reader = known_reader(rb.patch)
    if reader is None:
        return
    if plans.format not in reader.formats:
        raise ValueError(f"plans.format is {plans.format!r}, but {rb.patch} reads {' or '.join(reader.formats)} "
                         f"({reader.provenance}); set plans.format: {reader.formats[0]} so that `stack install` "
                         "writes the plan in the format the patch reads")
    if plans.env != reader.env:
        raise ValueError(f"plans.env is {plans.env}, but {rb.patch} reads the plan's path from {reader.env}; set "
                         f"plans.env: {reader.env}")
