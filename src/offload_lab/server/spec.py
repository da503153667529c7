"""Stack files: the schema of ``configs/stacks/*.yaml``, how far each part is pinned, and variants of a stack.

A stack file says everything needed to rebuild and start one server:

- ``parts``: the software, each from PyPI at an exact version or from a git repository at a commit, with the patches
  applied to it (each with the patch file's sha256 and *receipts*: the sha256 of every patched file after patching)
  and the commands that build it;
- ``install``: where the server's virtual environment goes;
- ``model``: the model directory and the Hugging Face repositories (at pinned revisions) it is downloaded from;
- ``plans``: the plan files (which experts live in pinned host RAM), how each is made, the format the stack's
  offload part reads (``format``, ``read_by``: the install writes the plan in it) and the environment variable that
  gives the server the plan's path;
- ``server``: vLLM's flags (typed: tensor parallelism, KV block size, maximum model length, speculative decoding,
  GPU memory utilization, ...) and any further arguments, environment variables, and the probe request sent after
  ready;
- ``price``: what the machine costs an hour, for the campaign ledger.

Anything not known exactly is declared, never guessed: ``pinned: false`` with a ``todo`` saying what is missing. A
short commit, a version range, a patch without its sha256 or receipts, or a model without a 40-hex revision counts as
unpinned even when not declared so; ``offload-lab stack install`` refuses to run while anything is unpinned unless
given ``--allow-unpinned``.

Every field added here is optional, so the embedded stack file of the skeleton still loads unchanged.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator, model_validator

from offload_lab.core.bounds import MAX_SECONDS, MAX_TOKENS
from offload_lab.core.errors import InputError
from offload_lab.server.multinode import PodField
from offload_lab.server.declared import FULL_SHA1, SHA256, check_declared  # noqa: F401
from offload_lab.server.envargs import ENV_NAME, check_env_and_args
from offload_lab.server.plan_spec import (PLAN_FORMATS, PlanFileSpec, PlanFormat, PlanReader, PlanSet,  # noqa: F401
                                           check_plan_reader)

# An exact version: digits and dots, optionally a pre/post/local tail; no operators, no wildcards.
EXACT_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*([a-zA-Z0-9.+_-]*)$")
# Linux's largest CONFIG_NR_CPUS is 8192: a higher id is a typo on any machine. Ids this machine lacks are checked
# when the server starts (and reported by `stack check`), since a stack file is often written for another machine.
MAX_CPU_ID = 8191
MODULE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- parts -------------------------------------------------------------------------------------------------------

class PypiSource(_Strict):
    kind: Literal["pypi"]
    package: str
    version: str | None = Field(None, description="exact version; None installs the newest (unpinned)")
    index_url: str | None = Field(None, description="package index, e.g. a PyTorch wheel index")
    extra_index_url: str | None = None

    def complete(self) -> bool:
        return bool(self.version and EXACT_VERSION.match(self.version))

    def requirement(self) -> str:
        return f"{self.package}=={self.version}" if self.version else self.package


class GitSource(_Strict):
    kind: Literal["git"]
    repo: str = Field(description="clone URL, e.g. https://github.com/owner/name")
    commit: str | None = Field(None, description="full 40-hex commit; a short one is resolved on the pod, unpinned")
    ref: str | None = Field(None, description="tag or branch the commit was taken from (informational)")

    def complete(self) -> bool:
        return bool(self.commit and FULL_SHA1.match(self.commit))


Source = Annotated[Union[PypiSource, GitSource], Field(discriminator="kind")]


class Patch(_Strict):
    """A patch applied to a git part's source tree with ``git apply``."""

    file: str | None = Field(None, description="patch file in this repository (relative to the root)")
    from_part: str | None = Field(None, description="take the patch from this (fetched) part's tree ...")
    path: str | None = Field(None, description="... at this path inside it")
    sha256: str | None = Field(None, description="sha256 of the patch file itself")
    strip: int = Field(1, ge=0, description="leading path components to strip (git apply -p)")
    receipts: dict[str, str] = Field(
        default_factory=dict,
        description="file (relative to the part's tree) -> sha256 after patching; a mismatch stops the install",
    )
    pinned: bool | None = None
    todo: str | None = None
    provenance: str | None = None

    @model_validator(mode="after")
    def _where(self) -> "Patch":
        if bool(self.file) == bool(self.from_part):
            raise ValueError("a patch names either file (in this repository) or from_part with path")
        if self.from_part and not self.path:
            raise ValueError(f"patch from part {self.from_part!r} needs path (where the patch is inside that part)")
        for p, h in self.receipts.items():
            if not SHA256.match(h):
                raise ValueError(f"receipt for {p} is not a 64-hex sha256: {h!r}")
        if self.sha256 is not None and not SHA256.match(self.sha256):
            raise ValueError(f"patch sha256 is not 64 hex digits: {self.sha256!r}")
        check_declared(self.pinned, self.todo, self.complete(), f"patch {self.label}")
        return self

    @property
    def label(self) -> str:
        return self.file or f"{self.from_part}:{self.path}"

    def complete(self) -> bool:
        return bool(self.sha256) and bool(self.receipts)


class Part(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    source: Source
    install: bool = Field(True, description="false: only fetched (e.g. a repository that holds a patch)")
    patches: list[Patch] = Field(default_factory=list)
    build: list[str] = Field(
        default_factory=list,
        description="shell commands run in the part's tree with the stack's environment active; for a PyPI part, "
                    "empty means `pip install package==version`",
    )
    env: dict[str, str] = Field(default_factory=dict, description="environment for the build commands")
    pinned: bool | None = None
    todo: str | None = None
    provenance: str | None = Field(None, description="where the pin was taken from")

    @model_validator(mode="after")
    def _consistent(self) -> "Part":
        if self.patches and not isinstance(self.source, GitSource):
            raise ValueError(f"part {self.name}: patches apply to a git source tree; install it from git")
        check_declared(self.pinned, self.todo, self.source.complete(), f"part {self.name}")
        return self


class InstallSpec(_Strict):
    venv: str = Field(description="virtual environment to create, relative to the repository root")
    base_python: str = Field("python3", description="interpreter that creates the environment")
    venv_args: list[str] = Field(default_factory=list, description="extra arguments to `python -m venv`")
    src_dir: str = Field(".stack-src", description="where git parts are cloned (a folder per stack)")
    env: dict[str, str] = Field(default_factory=dict,
                                description="environment for every build command (e.g. TORCH_CUDA_ARCH_LIST)")
    requirements: list[str] = Field(default_factory=list,
                                    description="requirements files (pinned) installed before the parts")
    preflight: list[str] = Field(default_factory=list,
                                 description="commands that must succeed first (e.g. nvidia-smi); skipped by "
                                             "--skip-preflight")


# --- model -------------------------------------------------------------------------------------------------------

class Download(_Strict):
    repo: str = Field(description="Hugging Face repository, owner/name")
    revision: str | None = Field(None, description="full 40-hex commit of the repository")
    include: list[str] | None = Field(None, description="only files matching these patterns")
    subdir: str | None = Field(None, description="download into this folder under the model path (default: it)")
    pinned: bool | None = None
    todo: str | None = None
    provenance: str | None = None

    @model_validator(mode="after")
    def _declared(self) -> "Download":
        check_declared(self.pinned, self.todo, self.complete(), f"download {self.repo}")
        return self

    def complete(self) -> bool:
        return bool(self.revision and FULL_SHA1.match(self.revision))


class ModelSpec(_Strict):
    path: str = Field(min_length=1, description="model directory, relative to the repository root or absolute")
    build: str | None = Field(default=None, description="'tiny' builds the embedded model when the path is missing")
    config: str | None = Field(default=None, description="builder config (for build: tiny)")
    served_name: str | None = Field(default=None, description="name the server reports in /v1/models (no spaces)")
    downloads: list[Download] = Field(default_factory=list, description="where the files come from, pinned")
    @field_validator("served_name")
    @classmethod
    def _served_name(cls, v: str | None) -> str | None:
        if v is not None and (not v or any(c.isspace() or c == "\x00" for c in v)):
            raise ValueError(f"{v!r} is not a model name a client can send: give a name without spaces, or leave "
                             "served_name out to use the model path")
        return v

    hash_limit_bytes: int = Field(
        256 * 2**20, ge=0,
        description="boot records sha256 of model files up to this size; larger shards are pinned by the "
                    "download revision and recorded by size (hashing 300 GB at every boot would cost minutes)",
    )


# --- plans: the plan files and the format the offload part reads (server/plan_spec.py) ----------------------

# --- server ------------------------------------------------------------------------------------------------------

class ServerFlags(_Strict):
    """vLLM's flags that a study varies, typed. Rendered in this order as ``--kebab-case`` arguments; None: not
    passed (vLLM's default). Anything else goes to ``server.args``."""

    tensor_parallel_size: int | None = Field(None, ge=1)
    block_size: int | None = Field(None, ge=1, description="KV-cache block size in tokens")
    max_model_len: int | None = Field(None, ge=1, le=MAX_TOKENS)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    kv_cache_memory_bytes: int | None = Field(None, ge=0)
    kv_cache_dtype: str | None = None
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    dtype: str | None = None
    quantization: str | None = None
    speculative_config: dict[str, Any] | None = Field(None, description="e.g. {method: mtp, num_speculative_tokens: 1}")
    enforce_eager: bool | None = Field(None, description="true: no CUDA graphs")
    max_cudagraph_capture_size: int | None = Field(None, ge=1, description="largest batch captured in a CUDA graph")
    enable_prefix_caching: bool | None = None
    offload_backend: str | None = Field(None, description="upstream offload: auto, uva or prefetch")
    cpu_offload_gb: float | None = Field(None, ge=0, description="upstream UVA offload: GiB per GPU in host RAM")
    cpu_offload_params: list[str] | None = Field(None, description="upstream UVA offload: parameter name segments")
    trust_remote_code: bool | None = None

    def to_args(self) -> list[str]:
        out: list[str] = []
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is None:
                continue
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                # vLLM's boolean flags accept --no-X (argparse BooleanOptionalAction); false enforce_eager is the
                # default, so nothing is passed for it.
                if value:
                    out.append(flag)
                elif name != "enforce_eager":
                    out.append("--no-" + name.replace("_", "-"))
            elif isinstance(value, dict):
                out += [flag, json.dumps(value, sort_keys=True, separators=(",", ":"))]
            elif isinstance(value, list):
                out += [flag, *[str(v) for v in value]]
            else:
                out += [flag, str(value)]
        return out

    def flag_names(self) -> set[str]:
        return {"--" + n.replace("_", "-") for n in type(self).model_fields}


class ProbeSpec(_Strict):
    """The request sent once the server says it is ready: a boot only counts as ready if the engine also survives
    its first request (the study's upstream-offload boot with KV block 128 was ready and died on it)."""

    enabled: bool = True
    prompt: str = "The capital of France is"
    max_tokens: int = Field(4, ge=1, le=MAX_TOKENS)
    timeout_s: float = Field(300.0, gt=0, le=MAX_SECONDS, allow_inf_nan=False,
                             description="first requests can be slow (kernels compiled lazily)")
    grace_s: float = Field(15.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False,
                           description="after a failed probe, how long to watch the process die")


class ServerSpec(_Strict):
    module: str = Field("vllm.entrypoints.openai.api_server", description="module run with `python -m` (a dotted name)")
    flags: ServerFlags = Field(default_factory=ServerFlags)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    env_from: list[str] = Field(
        default_factory=list,
        description="names of environment variables passed through to the server from the environment of the "
                    "command that starts it (API keys, tokens); only the names are recorded, never the values",
    )
    cpus: list[StrictInt] | None = Field(
        default=None, min_length=1,
        description="CPU ids the server (and every process it starts) may run on; None: all. On a small CPU-only "
                    "machine, keeping vLLM's processes on one core leaves the others to the load client.",
    )
    ready_timeout_s: float = Field(600.0, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    stop_timeout_s: float = Field(30.0, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    probe: ProbeSpec = Field(default_factory=ProbeSpec)

    @field_validator("module")
    @classmethod
    def _module_name(cls, v: str) -> str:
        if not re.match(MODULE_NAME, v):
            raise ValueError(f"{v!r} is not a module name (dotted Python names, e.g. vllm.entrypoints.openai."
                             "api_server)")
        return v

    @field_validator("cpus")
    @classmethod
    def _cpu_ids(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        bad = [c for c in v if not 0 <= c <= MAX_CPU_ID]
        if bad:
            raise ValueError(f"CPU id(s) {bad} are impossible: CPU ids are 0 to {MAX_CPU_ID}")
        dup = sorted({c for c in v if v.count(c) > 1})
        if dup:
            raise ValueError(f"CPU id(s) {dup} listed twice")
        return v

    @model_validator(mode="after")
    def _no_secrets(self) -> "ServerSpec":
        check_env_and_args(self.env, self.args, "server")
        if [n for n in self.env_from if not ENV_NAME.match(n)]:
            raise ValueError(f"server.env_from {self.env_from}: give environment variable names")
        both = sorted(set(self.env) & set(self.env_from))
        if both:
            raise ValueError(f"{both} are both set in server.env and passed through by server.env_from; keep one")
        return self

    @model_validator(mode="after")
    def _no_flag_twice(self) -> "ServerSpec":
        typed = self.flags.flag_names()
        given = {a.split("=", 1)[0] for a in self.args if a.startswith("--")}
        both = sorted(typed & given & set(_set_flags(self.flags)))
        if both:
            raise ValueError(f"flag(s) {both} set both in server.flags and server.args; keep one")
        return self


def _set_flags(flags: ServerFlags) -> list[str]:
    return ["--" + n.replace("_", "-") for n in type(flags).model_fields if getattr(flags, n) is not None]


class Price(_Strict):
    per_hour: float = Field(ge=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    what: str = Field("", description="what is rented at that price")
    source: str = Field(description="where the price comes from (a published figure, a provider's page and date)")


class StackFile(_Strict):
    """A stack file (``configs/stacks/*.yaml``)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                      description="letters, digits, '_', '.' and '-' (it names directories)")
    description: str = ""
    extends: str | None = Field(None, description="stack file this one is written against (root-relative): its "
                                                  "fields, deep-merged with this file's (lists and scalars replace)")
    python: str = Field(description="interpreter of the server's environment, relative to the repository root")
    model: ModelSpec
    server: ServerSpec = Field(default_factory=ServerSpec)
    parts: list[Part] = Field(default_factory=list)
    install: InstallSpec | None = None
    plans: PlanSet | None = None
    price: Price | None = None
    pod: PodField = Field(None, description="the machine to rent, and a server across nodes (server/multinode.py)")
    pinned: bool | None = Field(None, description="the file's own claim; checked against its parts")
    todo: str | None = None
    provenance: str | None = None

    @model_validator(mode="after")
    def _parts(self) -> "StackFile":
        # Build environments are recorded too: no secret values there either (the install reads $HF_TOKEN itself).
        for part in self.parts:
            check_env_and_args(part.env, [], f"part {part.name}")
        if self.install is not None:
            check_env_and_args(self.install.env, [], "install")
        names = [p.name for p in self.parts]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"part name(s) {dup} given twice")
        for i, part in enumerate(self.parts):
            for patch in part.patches:
                if patch.from_part and patch.from_part not in names[:i]:
                    raise ValueError(f"part {part.name}: patch from_part {patch.from_part!r} is not a part listed "
                                     "before it (parts are fetched in order)")
        if self.plans is not None:
            check_plan_reader(self.plans, self.parts, self.server)
        if self.pinned is True and unpinned_items(self, check_declared=False):
            raise ValueError("the stack says pinned: true but has unpinned items: "
                             + "; ".join(unpinned_items(self, check_declared=False)))
        if self.pinned is False and not (self.todo or "").strip():
            raise ValueError("the stack says pinned: false; add a todo saying what is missing")
        return self


def unpinned_items(spec: StackFile, check_declared: bool = True) -> list[str]:
    """Everything in a stack file that is not pinned exactly, one line each, with its todo where given."""
    out: list[str] = []

    def add(what: str, why: str, todo: str | None) -> None:
        out.append(f"{what}: {why}" + (f" (todo: {todo.strip()})" if todo else ""))

    for part in spec.parts:
        src = part.source
        if not src.complete():
            why = (f"version {src.version!r} is not exact" if isinstance(src, PypiSource) and src.version
                   else "no version" if isinstance(src, PypiSource)
                   else f"commit {src.commit!r} is not a full 40-hex sha" if src.commit else "no commit")
            add(f"part {part.name}", why, part.todo)
        elif part.pinned is False:
            add(f"part {part.name}", "declared pinned: false", part.todo)
        for patch in part.patches:
            missing = [w for w, ok in (("sha256", patch.sha256), ("receipts", patch.receipts)) if not ok]
            if missing:
                add(f"patch {patch.label} (part {part.name})", "no " + " and no ".join(missing), patch.todo)
            elif patch.pinned is False:
                add(f"patch {patch.label} (part {part.name})", "declared pinned: false", patch.todo)
    for d in spec.model.downloads:
        if not d.complete():
            add(f"model download {d.repo}", f"revision {d.revision!r} is not a full 40-hex commit" if d.revision
                else "no revision", d.todo)
        elif d.pinned is False:
            add(f"model download {d.repo}", "declared pinned: false", d.todo)
    if spec.plans:
        for name, plan in spec.plans.files.items():
            if not plan.complete():
                add(f"plan {name}", "neither made by a command nor pinned by sha256", plan.todo)
            elif plan.pinned is False:
                add(f"plan {name}", "declared pinned: false", plan.todo)
    if check_declared and spec.pinned is False and not out:
        add("stack", "declared pinned: false", spec.todo)
    return out


def deep_merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """``child`` over ``base``: mappings merge key by key; anything else (lists, scalars, null) replaces."""
    out = dict(base)
    for k, v in child.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# --- variants ----------------------------------------------------------------------------------------------------

class StackOverride(_Strict):
    """A variant of a stack for one boot or one group of experiments: flags merged over the stack's (a null value
    removes a flag), arguments appended, environment merged, another plan (or ``none``)."""

    flags: dict[str, Any] = Field(default_factory=dict)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    plan: str | None = Field(None, description="plan name from the stack's plans.files, or 'none'; null: unchanged")

    @field_validator("flags")
    @classmethod
    def _known_flags(cls, v: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(v) - set(ServerFlags.model_fields))
        if unknown:
            raise ValueError(f"unknown server flag(s) {unknown}; known: {sorted(ServerFlags.model_fields)}")
        return v

    @model_validator(mode="after")
    def _no_secrets(self) -> "StackOverride":
        check_env_and_args(self.env, self.args, "variant")
        return self

    def is_empty(self) -> bool:
        return not (self.flags or self.args or self.env or self.plan)

    def key(self) -> str:
        return json.dumps(self.model_dump(), sort_keys=True)


def apply_override(spec: StackFile, override: StackOverride | None) -> StackFile:
    """The stack file as the variant describes it; raises InputError naming what does not fit."""
    if override is None or override.is_empty():
        return spec
    data = spec.model_dump()
    flags = {**data["server"]["flags"], **override.flags}
    data["server"]["flags"] = flags
    data["server"]["args"] = list(data["server"]["args"]) + list(override.args)
    data["server"]["env"] = {**data["server"]["env"], **override.env}
    if override.plan is not None:
        if data.get("plans") is None:
            raise InputError(f"stack {spec.name} has no plans; a variant cannot choose plan {override.plan!r}")
        data["plans"]["use"] = None if override.plan == "none" else override.plan
    try:
        return StackFile.model_validate(data)
    except ValidationError as e:
        details = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise InputError(f"variant of stack {spec.name} is not valid: {details}") from e
