"""What each "will it fit" command is asked, typed once: audit, plan make|check|show|export|import, memory-math,
checkpoint synth and routing collect. The command line's flags are these fields (cli/model_options.py makes them;
a field's description is its help), and :mod:`offload_lab.fit.commands` does the work from them, so every check
here is tested without the command line. Fields shared by several commands live in the base models; the flag
reference, with the options ``--help`` leaves out, is docs/fit-commands.md."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from offload_lab.fit.classify import DEFAULT_ENGRAM_PATTERN, RULESETS
from offload_lab.fit.engine_plans import ENGINE_FORMATS
from offload_lab.fit.generators import GENERATORS
from offload_lab.fit.host_ram import GRANULARITIES
from offload_lab.fit.hostplan import FORMAT_NAME
from offload_lab.fit.kvbudget import DEFAULT_RESERVE_GIB, DEFAULT_STREAMS
from offload_lab.server.plan_spec import PLAN_FORMATS

# Memory in GiB up to a pebibyte (no GPU or host holds more; 1e308 GiB would overflow the byte counts), bandwidths up
# to a petabyte a second, GPUs up to 4,096 in one tensor-parallel group.
MAX_GIB = float(2**20)
MAX_GBPS = 1e6
MAX_GPUS = 4096

Architecture = Literal[tuple(sorted(RULESETS))]  # type: ignore[valid-type]
Generator = Literal[GENERATORS]  # type: ignore[valid-type]
EngineFormat = Literal[ENGINE_FORMATS]  # type: ignore[valid-type]
CheckFormat = Literal[tuple(dict.fromkeys((*PLAN_FORMATS, *ENGINE_FORMATS)))]  # type: ignore[valid-type]
Granularity = Literal[GRANULARITIES]  # type: ignore[valid-type]


class SourceOptions(BaseModel):
    """How a checkpoint (or a config.json) is read and classified."""

    model_config = ConfigDict(extra="forbid")

    architecture: Optional[Architecture] = Field(  # type: ignore[valid-type]
        None, description="tensor naming rules to classify with (default: from config.json, else from the names)")
    from_config: bool = Field(False, description="size the model from the source's config.json alone (transformers "
                                                 "on the meta device), whatever its weights")
    weights: Optional[str] = Field(None, description="from a config.json: the format the linear weights are served in "
                                                     "(default: the config's dtype)")
    format_for: list[str] = Field(default_factory=list, description="from a config.json: CATEGORY=FORMAT over "
                                                                    "--weights, e.g. routed_expert=gguf:Q4_K")
    engram_pattern: str = Field(DEFAULT_ENGRAM_PATTERN, description="regular expression naming Engram lookup tables")
    concurrency: int = Field(16, ge=1, description="shards read at once over HTTP")
    retries: int = Field(4, ge=0, description="retries per remote file on connection errors, 429 and 5xx")
    hf_endpoint: Optional[str] = Field(None, description="Hugging Face endpoint for hf:// sources (default: "
                                                         "$HF_ENDPOINT or https://huggingface.co)")


class FitOptions(SourceOptions):
    """The GPUs a model is sized for: parallelism, the memory each GPU has and keeps free, its bandwidths, and the
    host RAM the pinned buffers of a plan take."""

    tp: int = Field(1, ge=1, le=MAX_GPUS, description="tensor-parallel GPUs")
    ep: bool = Field(False, description="expert parallelism over the --tp GPUs: whole experts per GPU")
    placement: Literal["linear", "round_robin"] = Field("linear", description="expert placement under --ep (vLLM "
                                                                              "--expert-placement-strategy)")
    tp_mode: list[str] = Field(default_factory=list, description="CATEGORY=shard|replicate: how a category splits "
                                                                 "under TP")
    usable_gib: Optional[float] = Field(None, gt=0, le=MAX_GIB, description="usable memory per GPU, GiB (the "
                                                                            "driver's, times gpu_memory_utilization)")
    reserve_gib: float = Field(DEFAULT_RESERVE_GIB, ge=0, le=MAX_GIB,
                               description="GiB kept free per GPU for activations and graphs")
    context: Optional[int] = Field(None, ge=0, description="KV-cache tokens per stream (default: 32768 or the "
                                                           "model's max; 0: none)")
    streams: int = Field(DEFAULT_STREAMS, ge=1, description="concurrent sequences, each with --context tokens of KV")
    hbm_gbps: Optional[float] = Field(None, gt=0, le=MAX_GBPS, description="GPU memory bandwidth, GB/s (TPOT bound)")
    link_gbps: Optional[float] = Field(None, gt=0, le=MAX_GBPS, description="host-to-GPU read bandwidth, GB/s "
                                                                            "(TPOT bound)")
    host_ram_gib: Optional[float] = Field(None, gt=0, le=MAX_GIB, description="the host's RAM, GiB: the pinned "
                                                                              "buffers of the plan must fit in it")
    host_reserve_gib: float = Field(0.0, ge=0, le=MAX_GIB, description="host RAM to keep free for everything else")
    pinned: Literal["pow2", "exact"] = Field("pow2", description="pow2: PyTorch's caching host allocator rounds "
                                                                 "every block up; exact: cudaHostRegister")
    pinned_granularity: Granularity = Field(  # type: ignore[valid-type]
        "layer-tensor", description="one pinned block per layer per stacked tensor (vLLM) or per expert")
    pinned_max_round_mib: Optional[float] = Field(None, ge=0, le=MAX_GIB * 1024,
                                                  description="blocks above this many MiB are not rounded")


class OutFile(BaseModel):
    out: str = Field(description="file to write (refused if it exists, unless --force)")
    force: bool = Field(False, description="replace --out if it exists")


SOURCE = ("checkpoint (directory, .safetensors, http(s) URL, hf://owner/name@revision) or a config.json "
          "(docs/fit-commands.md)")


class Audit(FitOptions):
    source: str = Field(description=SOURCE)
    with_plan: Optional[str] = Field(None, description="plan file: also the bytes per GPU with it applied")
    pp: int = Field(1, ge=1, le=MAX_GPUS, description="pipeline-parallel stages (vLLM --pipeline-parallel-size)")
    pp_partition: Optional[str] = Field(None, description="layers per stage, as VLLM_PP_LAYER_PARTITION "
                                                          "(default: vLLM's even split)")


class PlanMake(FitOptions, OutFile):
    source: str = Field(description=SOURCE)
    generator: Generator = Field(description="how to choose the host experts")  # type: ignore[valid-type]
    fraction: Optional[float] = Field(None, ge=0, le=1, description="share of routed experts to move")
    count: Optional[int] = Field(None, ge=0, description="number of routed experts to move (instead of --fraction)")
    counts: Optional[str] = Field(None, description="routing counts file (offload-lab routing collect)")
    within: Literal["index", "coldest"] = Field("index", description="uniform: which experts of a layer go first")
    host_category: list[str] = Field(default_factory=list, description="move every tensor of these categories to "
                                                                       "host too (e.g. embedding)")
    host_tensor: list[str] = Field(default_factory=list, description="move these tensors to host too")
    max_layer_fraction: Optional[float] = Field(None, gt=0, le=1, description="cap on the share of one layer's "
                                                                              "experts on host")
    model: Optional[str] = Field(None, description="model name to record in the plan (default: from the source)")
    no_host_limit: bool = Field(False, description="write the plan whatever host RAM its pinned buffers need")


class PlanCheck(SourceOptions):
    plan_file: str = Field(description="plan file")
    source: str = Field(description=SOURCE)
    format: CheckFormat = Field("offload-lab", description="read the file as the code that reads this "  # type: ignore
                                                           "format would")
    written_from: Optional[str] = Field(None, description="the offload-lab plan the file was written from: the "
                                                          "host experts must be exactly its")


class PlanShow(FitOptions):
    plan_file: str = Field(description="plan file")
    checkpoint: Optional[str] = Field(None, description="checkpoint the plan is for (as for audit): its memory")
    counts: Optional[str] = Field(None, description="routing counts file: the predicted cost (needs --checkpoint)")
    batch: int = Field(1, ge=1, description="tokens per decode step")


class PlanExport(FitOptions, OutFile):
    plan_file: str = Field(description="offload-lab plan file")
    format: EngineFormat = Field(description="the engine's format")  # type: ignore[valid-type]
    checkpoint: Optional[str] = Field(None, description="the model (config.json or checkpoint): layer names and "
                                                        "expert bytes (default: DeepSeek-V4's names)")


class PlanImport(SourceOptions, OutFile):
    file: str = Field(description=f"the file to read ({FORMAT_NAME}'s host-plan.json)")
    format: Literal[FORMAT_NAME] = Field(description="the format to read")  # type: ignore[valid-type]
    checkpoint: Optional[str] = Field(None, description="checkpoint the plan is for: its layers and expert ids "
                                                        "are checked")
    model: Optional[str] = Field(None, description="model name to record in the plan")


class MemoryMath(BaseModel):
    params: str = Field(description="parameter count, e.g. 763.2B, 35.4M or 7.632e11")
    format: Optional[list[str]] = Field(None, description="only these formats (default: all)")
    ladder: Optional[str] = Field(None, description="memory sizes: offload-lab (GiB) or community-page (the page's "
                                                    "powers of two of GB, its printed rows beside)")


class CheckpointSynth(BaseModel):
    spec: str = Field(description="synthetic checkpoint spec (YAML) or a Hugging Face config.json")
    shards: Optional[int] = Field(None, ge=1, description="shards to write (default: the spec's; for a config.json, "
                                                          "one per 5 GiB)")
    out: str = Field(description="new, empty directory to write into")


class RoutingCollect(OutFile):
    # --model is plan make's model *name*; here the model is a directory (old spelling --model, a hidden alias)
    model_dir: str = Field(validation_alias=AliasChoices("model_dir", "model"),
                           description="model directory (a Hugging Face model saved locally)")
    texts: Optional[str] = Field(None, description="text file, texts separated by blank lines (default: the "
                                                   "package's English corpus)")
    max_tokens: int = Field(512, ge=1, description="truncate each text to this many tokens")
    python: Optional[str] = Field(None, description="Python with torch and transformers")
    name: Optional[str] = Field(None, description="model name to record (default: the directory's name)")
