"""The run's configuration: four pydantic models (model, optimizer, trainer, data) under one ``RunConfig``.

Every field has a default and a description; unknown keys and wrong types are errors. YAML presets live in
``configs/``; :mod:`meltemi.trainer.config_io` loads them and applies command-line overrides.

>>> config = RunConfig(data={"sources": {"web": {"store": "stores/web"}}})
>>> config.trainer.mesh.data, config.model.remat, config.optimizer.schedule
(-1, 'full', 'cosine')
"""

from __future__ import annotations

import copy
import importlib.util
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from meltemi.datastore.errors import StorageError
from meltemi.datastore.storage import Location, local_path_of, url_scheme
from meltemi.trainer.chips import CHIPS, FP8_CHIPS, HOPPER_CHIPS, unknown_chip

Remat = Literal["none", "full", "save_dots", "offload"]
AttentionKernel = Literal["auto", "reference", "xla", "pallas", "mosaic", "splash", "cudnn"]
# The kernels that compile only for an NVIDIA GPU, and compute only in 16-bit floats.
GPU_ONLY_ATTENTION = ("mosaic", "cudnn")
LossKernel = Literal["auto", "reference", "xla", "pallas"]
MatmulDtype = Literal["compute", "fp8"]
FloatDtype = Literal["float32", "bfloat16", "float16"]
InvalidUtf8 = Literal["error", "skip", "replace"]  # meltemi.datastore's policy for text that is not UTF-8
PhysicalAxes = str | list[str] | None


def local_directory(value: str, why_local: str) -> str:
    """``value`` when it names a local directory (a ``file://`` URL, or a path from ``~``, becomes the path it
    names), else a ``ValueError`` that says ``why_local``: for the fields whose directory only this machine's
    disk can hold.

    >>> local_directory("file:///tmp/cache", "why"), local_directory(".cache/meltemi", "why")
    ('/tmp/cache', '.cache/meltemi')
    >>> local_directory("gs://bucket/cache", "because")
    Traceback (most recent call last):
    ValueError: must be a local directory (a path or a file:// URL): because
    """
    try:
        local = local_path_of(value)  # a mistyped URL (gs:/bucket) says so, not a directory named gs:
    except StorageError as error:
        raise ValueError(str(error)) from None
    if local is None:
        raise ValueError(f"must be a local directory (a path or a file:// URL): {why_local}")
    return value if url_scheme(value) is None and not value.startswith("~") else str(local)


class Section(BaseModel):
    """A config section: unknown keys are errors; immutable (a changed config is a new one, `model_copy`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class RopeScaling(Section):
    """Llama 3's rotary frequency scaling (``rope_type: llama3`` in Hugging Face's config)."""

    factor: float = Field(8.0, gt=0, description="how much longer the target context is than the original")
    low_freq_factor: float = Field(1.0, gt=0, description="wavelengths above original/low are scaled fully")
    high_freq_factor: float = Field(4.0, gt=0, description="wavelengths below original/high are kept")
    original_max_position_embeddings: int = Field(
        8192, gt=0, description="the context the model was made for"
    )


class ModelConfig(Section):
    """A Llama decoder: shapes, positional encoding, and the kernels and remat policy it runs with."""

    vocab_size: int = Field(32000, gt=0, description="rows of the embedding; must equal the tokenizer's")
    hidden_dim: int = Field(256, gt=0, description="width of the residual stream (embed axis)")
    intermediate_dim: int = Field(768, gt=0, description="width of the SwiGLU MLP (mlp axis)")
    num_layers: int = Field(4, gt=0, description="decoder blocks (layers axis, run by a scan)")
    num_heads: int = Field(8, gt=0, description="query heads")
    num_kv_heads: int = Field(
        4, gt=0, description="key/value heads (grouped-query attention); divides num_heads"
    )
    head_dim: int | None = Field(None, gt=0, description="per-head width; default hidden_dim / num_heads")
    max_seq_len: int = Field(4096, gt=0, description="longest sequence the positional encoding is built for")
    rope_theta: float = Field(10000.0, gt=0, description="rotary base frequency")
    rope_scaling: RopeScaling | None = Field(None, description="Llama 3 frequency scaling, or null for none")
    norm_eps: float = Field(1e-5, gt=0, description="RMSNorm epsilon")
    tie_embeddings: bool = Field(False, description="unembed with the input embedding's table")
    init_std: float = Field(0.02, gt=0, description="standard deviation of the initial weights")
    remat: Remat = Field(
        "full",
        description="gradient checkpointing of each block: none (keep every activation), full (keep its "
        "input, recompute the rest), save_dots (keep the matmuls' outputs), offload (its input on the host)",
    )
    attention: AttentionKernel = Field("auto", description="meltemi.kernels attention implementation")
    cross_entropy: LossKernel = Field(
        "auto", description="meltemi.kernels fused cross-entropy implementation"
    )
    cross_entropy_block_size: int = Field(4096, gt=0, description="vocabulary block of the fused loss")
    matmul_dtype: MatmulDtype = Field(
        "compute",
        description="the decoder blocks' projections in the train and eval steps: compute "
        "(trainer.compute_dtype) or fp8 (e4m3 operands, e5m2 gradients, current scaling); attention, the "
        "loss, sampling and export stay in the compute dtype",
    )
    z_loss_weight: float | list[tuple[int, float]] = Field(
        0.0,
        description="weight of the z-loss (log-normalizer squared), or [[start_step, weight], ...] from step "
        "0 (Marin-8B's Starling phase turned it on at 1e-4); the step is compiled once per weight",
    )

    @field_validator("z_loss_weight")
    @classmethod
    def _z_loss_by_step(cls, weight: float | list[tuple[int, float]]) -> float | list[tuple[int, float]]:
        if isinstance(weight, int | float):
            if weight < 0:
                raise ValueError(f"model.z_loss_weight must be at least 0, got {weight}")
            return weight
        starts = [start for start, _ in weight]
        if not weight or starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:], strict=False)):
            raise ValueError(
                f"model.z_loss_weight by step must start at step 0 and its steps increase, got {starts}"
            )
        if any(value < 0 for _, value in weight):
            raise ValueError(f"model.z_loss_weight must be at least 0 at every step, got {weight}")
        return weight

    def z_loss_at(self, step: int) -> float:
        """The z-loss weight at ``step``.

        >>> ModelConfig(z_loss_weight=[[0, 0.0], [100, 1e-4]]).z_loss_at(100)
        0.0001
        """
        weight = self.z_loss_weight
        if isinstance(weight, int | float):
            return float(weight)
        return float([value for start, value in weight if start <= step][-1])

    @model_validator(mode="after")
    def _heads_fit(self) -> ModelConfig:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model.num_kv_heads ({self.num_kv_heads}) must divide model.num_heads ({self.num_heads})"
            )
        if self.head_dim is None and self.hidden_dim % self.num_heads:
            raise ValueError(
                f"model.hidden_dim ({self.hidden_dim}) is not a multiple of model.num_heads "
                f"({self.num_heads}); set model.head_dim"
            )
        return self

    @property
    def head_size(self) -> int:
        """The per-head width, ``head_dim`` or ``hidden_dim / num_heads``."""
        return self.head_dim or self.hidden_dim // self.num_heads


class SchedulePhase(Section):
    """Steps ``start`` to ``end - 1`` of the learning-rate schedule: its warmup (from the rate reached at
    ``start``), then its shape, reaching the floor at ``end - 1``; a run extended with a new decay phase
    gets one (``optimizer.extension: decay``)."""

    start: int = Field(ge=0, description="the phase's first step")
    end: int = Field(gt=0, description="the step after its last: the run's length when the phase began")

    @model_validator(mode="after")
    def _order(self) -> SchedulePhase:
        if self.end <= self.start:
            raise ValueError(
                f"a schedule phase must end after it starts, got start {self.start}, end {self.end}"
            )
        return self


class Segment(Section):
    """Steps ``start`` to ``end - 1`` of a learning rate made of segments (``optimizer.segments``); ``name``
    says which of the run's phases it belongs to (the dry run's phase table shows it)."""

    start: int = Field(ge=0, description="the segment's first step")
    end: int = Field(gt=0, description="the step after its last")
    name: str | None = Field(None, description="the phase it belongs to, e.g. Kestrel")

    @model_validator(mode="after")
    def _order(self) -> Segment:
        if self.end <= self.start:
            raise ValueError(f"a segment must end after it starts, got start {self.start}, end {self.end}")
        return self


class ConstantSegment(Segment):
    """One rate throughout (Levanter's ``constant``, and the stable part of its WSD)."""

    kind: Literal["constant"]
    lr: float = Field(ge=0, description="the learning rate")


class RampSegment(Segment):
    """From ``from_lr`` at ``start`` towards ``to_lr``, which it reaches at ``end``: ``linear`` (a warmup, a
    rewarm or a linear decay: optax's ``linear_schedule``, which Levanter's warmup, rewarmup and ``linear``
    use), ``cosine`` (``cosine_decay_schedule``: Levanter's ``cosine``) or ``inv`` (Levanter's ``inv``:
    ``from / ((from / to - 1) * max(t, 1) / length + 1)``, held at ``to``; it needs ``to_lr > 0``)."""

    kind: Literal["linear", "cosine", "inv"]
    from_lr: float = Field(ge=0, description="the rate at the segment's first step")
    to_lr: float = Field(ge=0, description="the rate reached at its end")

    @model_validator(mode="after")
    def _inv_floor(self) -> RampSegment:
        if self.kind == "inv" and (self.to_lr <= 0 or self.to_lr > self.from_lr):
            raise ValueError(
                f"an inv segment decays from from_lr to a floor above 0 (Levanter divides by it): got "
                f"from_lr {self.from_lr}, to_lr {self.to_lr}"
            )
        if self.kind == "cosine" and self.to_lr > self.from_lr:
            raise ValueError(
                f"a cosine segment decays: to_lr ({self.to_lr}) must not exceed from_lr ({self.from_lr}); a "
                "rise is a linear segment"
            )
        return self


class CyclesSegment(Segment):
    """WSD-S (Levanter's ``cycle_length``): cycles of ``cycle`` steps from ``start``, each a warmup to
    ``peak`` (the first from 0 over ``warmup`` steps; the others from the floor the last one reached over
    ``rewarmup``, or straight back at the peak when 0), a stable part at ``peak`` and a ``decay`` to
    ``floor`` shaped as ``shape`` says. Lengths are steps, or fractions of a cycle when below 1 (Levanter
    reads exactly 1 as the whole cycle; here it is one step). The
    segment's end may cut its last cycle short (as a new phase cut Marin's Kestrel); Levanter instead
    lengthens a run's last cycle by what a cycle does not divide."""

    kind: Literal["wsd_s"]
    peak: float = Field(gt=0, description="the stable rate of each cycle")
    floor: float = Field(ge=0, description="the rate each cycle's decay reaches")
    cycle: int = Field(gt=0, description="steps per cycle")
    warmup: float = Field(0, ge=0, description="the first cycle's warmup from 0: steps, or a fraction")
    rewarmup: float = Field(0, ge=0, description="the later cycles' warmup from the floor reached")
    decay: float = Field(gt=0, description="each cycle's decay: steps, or a fraction of the cycle if < 1")
    shape: Literal["linear", "cosine", "inv"] = Field("inv", description="the decay's shape")

    def lengths(self) -> tuple[int, int, int]:
        """The first cycle's warmup, the later cycles' rewarmup and every cycle's decay, in steps."""
        warmup, rewarmup, decay = (
            int(v * self.cycle) if v < 1 else int(v) for v in (self.warmup, self.rewarmup, self.decay)
        )
        return warmup, rewarmup, decay

    @model_validator(mode="after")
    def _fits(self) -> CyclesSegment:
        warmup, rewarmup, decay = self.lengths()
        if max(warmup, rewarmup) + decay > self.cycle:
            raise ValueError(
                f"a wsd_s cycle of {self.cycle} steps cannot hold a warmup of {max(warmup, rewarmup)} and a "
                f"decay of {decay} steps"
            )
        if self.shape == "inv" and not 0 < self.floor <= self.peak:
            raise ValueError(f"an inv decay needs a floor above 0 and at most the peak, got {self.floor}")
        return self


ScheduleSegment = Annotated[ConstantSegment | RampSegment | CyclesSegment, Field(discriminator="kind")]


class EmaConfig(Section):
    """An exponential moving average of the weights, kept in the train state beside them (sharded as they
    are, in ``trainer.param_dtype``, checkpointed with them) and used as the trained model: after every
    applied step from ``start_step`` on, ``ema = beta * ema + (1 - beta) * weights``; until then it is a copy
    of the weights, so the average starts at ``start_step`` as the weights of that step. A skipped step
    (non-finite loss or gradient) leaves it as it was.

    This is Levanter's ``EmaModelAveraging`` (``optax.incremental_update`` of the new weights with step size
    ``1 - beta`` after each step, no bias correction, started as a copy of the weights), with Marin-8B's
    start: its average began with its second phase (``beta`` 0.995, ``start_step`` 660,000), and its
    released model and evaluations are the average's weights. Held in device memory (no host offload)."""

    beta: float = Field(
        0.995, gt=0, lt=1, description="the average's decay per step (Marin-8B's 0.995; Levanter's 0.999)"
    )
    start_step: int = Field(
        0, ge=0, description="the step whose weights the average starts from (a copy of them until then)"
    )


Extension = Literal["tail", "decay", "restretch"]


class OptimizerConfig(Section):
    """AdamW with a learning-rate schedule, decoupled weight decay and global-norm gradient clipping."""

    learning_rate: float = Field(3e-4, gt=0, description="peak learning rate")
    schedule: Literal["constant", "cosine", "linear", "wsd"] = Field(
        "cosine", description="after warmup: constant, cosine or linear decay, or warmup-stable-decay"
    )
    warmup_steps: float = Field(
        0.01, ge=0, description="warmup length: steps, or a fraction of the run if < 1"
    )
    decay_steps: float = Field(0.2, ge=0, description="wsd only: the final decay's length, steps or fraction")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="the floor the decay reaches, times the peak")
    extension: Extension | None = Field(
        None,
        description="when a resumed run's num_train_steps changes: tail (the old schedule, then its floor), "
        "decay (a new phase over the added steps: warmup back to the peak, then the decay), restretch (the "
        "schedule recomputed over the new length); null: go on only where the rate would not jump",
    )
    phases: list[SchedulePhase] = Field(
        default_factory=list,
        description="the schedule's phases as extensions left them (recorded by the run; empty: one phase "
        "over trainer.num_train_steps)",
    )
    segments: list[ScheduleSegment] = Field(
        default_factory=list,
        description="the learning rate as segments that tile the run from step 0, each with its own rates: "
        "{kind: constant, lr}, {kind: linear|cosine|inv, from_lr, to_lr} or {kind: wsd_s, peak, floor, "
        "cycle, warmup, rewarmup, decay, shape}, with start, end and a phase name (replaces "
        "learning_rate, schedule, warmup_steps, decay_steps and min_lr_ratio)",
    )
    weight_decay: float = Field(0.1, ge=0, description="decoupled weight decay")
    decay_embeddings_and_norms: bool = Field(False, description="also decay embeddings and norm scales")
    beta1: float = Field(0.9, ge=0, lt=1, description="Adam's first-moment decay")
    beta2: float = Field(0.95, ge=0, lt=1, description="Adam's second-moment decay")
    epsilon: float = Field(1e-8, gt=0, description="Adam's epsilon")
    max_grad_norm: float | None = Field(1.0, gt=0, description="clip the global gradient norm; null: never")
    ema: EmaConfig | None = Field(
        None,
        description="an exponential moving average of the weights, evaluated beside them and used as the "
        "trained model (sampling, chat, export, evaluation, a new phase's base); null: none",
    )

    @model_validator(mode="after")
    def _segments_tile(self) -> OptimizerConfig:
        if not self.segments:
            return self
        replaced = ("learning_rate", "schedule", "warmup_steps", "decay_steps", "min_lr_ratio", "extension")
        defaults = type(self).model_fields
        given = [f"optimizer.{name}" for name in replaced if getattr(self, name) != defaults[name].default]
        if given or self.phases:
            ignored = ", ".join(given) or "optimizer.phases"
            raise ValueError(
                f"optimizer.segments gives the whole learning rate, so {ignored} would be ignored: give the "
                "rates in the segments, and leave those out"
            )
        ends = [0] + [segment.end for segment in self.segments]
        for index, (segment, end) in enumerate(zip(self.segments, ends, strict=False)):
            if segment.start != end:
                what = "overlaps" if segment.start < end else "leaves a gap after"
                raise ValueError(
                    f"optimizer.segments[{index}]{_named(segment.name)} starts at step {segment.start} and "
                    f"{what} the one before, which ends at step {end}: each segment starts where the last "
                    "one ends (the first at 0)"
                )
        return self

    @model_validator(mode="after")
    def _phases(self) -> OptimizerConfig:
        starts = [phase.start for phase in self.phases]
        if starts and starts[0] != 0:
            raise ValueError(f"optimizer.phases: the first phase must start at step 0, not {starts[0]}")
        if any(b <= a for a, b in zip(starts, starts[1:], strict=False)):
            raise ValueError(f"optimizer.phases: starts must increase, got {starts}")
        return self


def _named(name: str | None) -> str:
    return f" ({name})" if name else ""


class MeshConfig(Section):
    """Device mesh sizes; -1 on one axis means 'every device the others leave'."""

    replica: int = Field(1, description="data-parallel copies with replicated parameters (across slices)")
    data: int = Field(-1, description="data parallelism with parameters sharded over it (FSDP)")
    model: int = Field(1, description="tensor parallelism over heads and the MLP")

    @model_validator(mode="after")
    def _sizes(self) -> MeshConfig:
        sizes = {"replica": self.replica, "data": self.data, "model": self.model}
        bad = [f"trainer.mesh.{k}={v}" for k, v in sizes.items() if v == 0 or v < -1]
        if bad:
            raise ValueError(f"mesh sizes must be positive or -1: {', '.join(bad)}")
        if list(sizes.values()).count(-1) > 1:
            raise ValueError("at most one of trainer.mesh.replica/data/model may be -1")
        return self


class ProfilerConfig(Section):
    """A JAX profiler trace of a few steps, written under ``<run dir>/profile``."""

    start_step: int = Field(5, ge=0, description="first traced step (after compilation)")
    num_steps: int = Field(3, gt=0, description="how many steps to trace")


WatchTarget = Literal["params", "grads", "updates"]


class WatchConfig(Section):
    """The norm of each parameter, its gradient and its update, computed inside the train step every
    ``every`` steps and logged as ``params/norm/<name>``, ``grad/norm/<name>``, ``updates/norm/<name>``
    (Levanter's ``watch``: on by default, every 10 steps, per layer of the stacked blocks)."""

    every: int = Field(10, ge=0, description="steps between them, and the last step (0: off)")
    targets: list[WatchTarget] = Field(
        default_factory=lambda: ["params", "grads", "updates"],
        description="what to take the norms of: the parameters after the step, the gradient before "
        "clipping, the update applied",
    )
    per_layer: bool = Field(
        True, description="a norm for each decoder layer (layers.3.mlp.up_proj.weight); false: one per stack"
    )

    @property
    def on(self) -> bool:
        return self.every > 0 and bool(self.targets)


class WandbConfig(Section):
    """Weights & Biases: the key comes from WANDB_API_KEY; ``offline`` needs no network."""

    project: str = Field("meltemi", description="project name")
    entity: str | None = Field(None, description="team or user; default: the key's")
    mode: Literal["online", "offline"] = Field("offline", description="offline logs to disk for a later sync")


class TrackersConfig(Section):
    """Where metrics go besides ``metrics.jsonl`` (always written)."""

    tensorboard: bool = Field(False, description="write TensorBoard event files under <run dir>/tensorboard")
    wandb: WandbConfig | None = Field(None, description="log to Weights & Biases")

    @model_validator(mode="after")
    def _check_extras_installed(self) -> TrackersConfig:
        """A tracker whose library is missing is a config error naming the extra that installs it, given
        before the run directory changes (the trackers import their libraries only when a run opens them)."""
        wanted = {
            "tensorboard": ("tensorboardX", self.tensorboard),
            "wandb": ("wandb", self.wandb is not None),
        }
        for extra, (module, on) in wanted.items():
            if on and importlib.util.find_spec(module) is None:
                raise ValueError(
                    f"{extra} is on but {module} is not installed: pip install 'meltemi-trainer[{extra}]', "
                    f"or leave {extra} off"
                )
        return self


class InitializeFrom(Section):
    """Start a new run (a new phase, such as fine-tuning) from a base: another run's checkpoint or a Hugging
    Face directory. By default the base gives the parameters only, and the new phase starts at step 0
    with a fresh optimizer, as fine-tuning does; Marin's pretraining phases kept the optimizer state."""

    path: str = Field(
        description="the base: a run directory (its latest good checkpoint), a step-N directory or a Hugging "
        "Face directory (config.json, safetensors, tokenizer.json), local or in a bucket"
    )
    parameters_only: bool = Field(True, description="take the parameters only; the optimizer starts fresh")
    reset_step: bool = Field(True, description="start counting steps (and the schedule, and the data) at 0")
    weights: Literal["ema", "raw"] = Field(
        "ema",
        description="a base run that kept an average of its weights (optimizer.ema) gives the average (ema) "
        "or its weights as trained (raw) as the parameters; a base without one gives its weights; with "
        "parameters_only false its state goes on as it was: raw weights, optimizer state and average",
    )


class TrainerConfig(Section):
    """How long, how big and where the run trains, and how it reports."""

    num_train_steps: int = Field(1000, gt=0, description="optimizer steps")
    global_batch_size: int | list[tuple[int, int]] = Field(
        32, description="sequences per step, or [[start_step, size], ...] starting at step 0"
    )
    microbatch_size: int | None = Field(
        None, gt=0, description="sequences per forward/backward; the step accumulates gradients over them"
    )
    seed: int = Field(
        0,
        ge=0,
        le=2**64 - 1,
        description="the one seed every random number derives from (0 .. 2**64 - 1; every bit counts)",
    )
    param_dtype: FloatDtype = Field("float32", description="dtype parameters and optimizer state are kept in")
    compute_dtype: FloatDtype = Field("bfloat16", description="dtype of the forward and backward matmuls")
    mesh: MeshConfig = Field(default_factory=MeshConfig, description="device mesh")
    parameter_axis_mapping: dict[str, PhysicalAxes] = Field(
        default_factory=dict, description="overrides of the logical->mesh mapping parameters are stored by"
    )
    compute_axis_mapping: dict[str, PhysicalAxes] = Field(
        default_factory=dict, description="overrides of the logical->mesh mapping activations follow"
    )
    log_every: int = Field(10, gt=0, description="steps between metric logs")
    eval_every: int = Field(
        100,
        ge=0,
        description="steps between evaluations, besides those at step 0 and at the end (0: only those)",
    )
    eval_batches: int | Literal["all"] = Field(
        8,
        description="held-out batches per source and per eval set at each evaluation (fewer where one holds "
        "fewer whole batches), or all: every row of each, the last batch filled out with rows that count no "
        "target",
    )
    export_every: int | None = Field(
        None,
        gt=0,
        description="steps between Hugging Face exports of the weights (the moving average's with "
        "optimizer.ema) into <run dir>/hf/step-N, and one at the last step; null: none",
    )
    export_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="the dtype of those exports' weights"
    )
    checkpoint_every: int | None = Field(
        100, gt=0, description="steps between checkpoints (null: only at the end and when stopped)"
    )
    checkpoint_every_minutes: float | None = Field(
        None, gt=0, description="also checkpoint when this many minutes passed since the last one"
    )
    keep_every: int | None = Field(
        None,
        gt=0,
        description="keep checkpoints at multiples of this step for good (others: see keep_last)",
    )
    keep_last: int = Field(
        2,
        gt=0,
        description="the newest checkpoints kept (a newest one damaged later costs only the steps after the "
        "one before it)",
    )
    initialize_from: InitializeFrom | None = Field(
        None, description="begin from a base: another run's checkpoint or a Hugging Face directory"
    )
    nan_policy: Literal["skip", "stop"] = Field(
        "skip", description="a NaN/Inf loss or gradient: skip the update (counted) or stop naming the step"
    )
    profiler: ProfilerConfig | None = Field(None, description="trace some steps with the JAX profiler")
    watch: WatchConfig = Field(
        default_factory=WatchConfig, description="norms of parameters, gradients and updates, per parameter"
    )
    plots: bool = Field(
        True,
        description="draw loss.png (and norms.png, downstream.png) in the run directory as the run ends; "
        "false: none (matplotlib is not imported)",
    )
    log_batch_hashes: bool = Field(
        False, description="append each step's global batch hash to <run dir>/batches.jsonl (to compare runs)"
    )
    trackers: TrackersConfig = Field(default_factory=TrackersConfig, description="metric trackers")
    sample_prompt: str | None = Field(
        None, description="end the summary with a sampled continuation of this prompt (null: no sample)"
    )
    reply_to: Literal["sample_prompt", "held_out"] = Field(
        "sample_prompt",
        description="what a chat run's summary shows the replies to, before and after: sample_prompt as the "
        "user's message, or held_out: the first user message of the first held-out conversation (the user's "
        "own data: apps/sft.py's --data sets it); sample_prompt when no conversation is held out",
    )
    compile_cache: bool = Field(
        True, description="keep compiled programs on disk so a restart loads them (--no-compile-cache: off)"
    )
    compile_cache_dir: str | None = Field(
        None, description="its local directory; default $JAX_COMPILATION_CACHE_DIR, else ~/.cache/meltemi/jax"
    )
    compile_cache_mirror: str | bool | None = Field(
        None,
        description="a bucket folder the cache is copied to and from, so a new host starts warm; default "
        "meltemi-compile-cache/ in the run directory's bucket (none for a local run); false: off",
    )

    @field_validator("initialize_from", mode="before")
    @classmethod
    def _base_path(cls, base):
        return {"path": base} if isinstance(base, str) else base

    @field_validator("eval_batches")
    @classmethod
    def _some_batches(cls, batches: int | str) -> int | str:
        if isinstance(batches, int) and batches < 1:
            raise ValueError(f"must be a positive number of batches or all, got {batches}")
        return batches

    @field_validator("compile_cache_dir")
    @classmethod
    def _local_compile_cache(cls, directory: str | None) -> str | None:
        why = (
            "JAX reads and writes its compilation cache on this machine's disk; trainer.compile_cache_mirror "
            "copies it to and from a bucket folder"
        )
        return None if directory is None else local_directory(directory, why)

    @field_validator("compile_cache_mirror")
    @classmethod
    def _mirror_location(cls, mirror: str | bool | None) -> str | bool | None:
        if isinstance(mirror, str):
            try:  # a mistyped URL is said here, before a run builds its stores, not as the trainer starts
                Location.parse(mirror)
            except StorageError as error:
                raise ValueError(str(error)) from None
        return mirror

    @model_validator(mode="after")
    def _schedule(self) -> TrainerConfig:
        if isinstance(self.global_batch_size, int):
            if self.global_batch_size < 1:
                raise ValueError(f"trainer.global_batch_size must be positive, got {self.global_batch_size}")
            return self
        stages = self.global_batch_size
        if not stages or stages[0][0] != 0:
            raise ValueError("trainer.global_batch_size: a schedule must start at step 0")
        if any(b[0] <= a[0] for a, b in zip(stages, stages[1:], strict=False)):
            raise ValueError("trainer.global_batch_size: schedule steps must increase")
        if any(size < 1 for _, size in stages):
            raise ValueError("trainer.global_batch_size: sizes must be positive")
        return self

    def batch_sizes(self) -> list[int]:
        """Every global batch size the run uses."""
        gbs = self.global_batch_size
        return [gbs] if isinstance(gbs, int) else [size for _, size in gbs]


DataFormat = Literal["text", "chat"]


class StoreOrCorpus(Section):
    """Tokens a run reads: a token store (which may name the raw inputs it is built from), or a corpus built
    into one on first use (text documents, or chat conversations rendered by ``data.chat.template``). A source
    of the mixture (``SourceConfig``) is one, and so is an eval set (``EvalSetConfig``): both are built and
    opened the same way (``data.sources.build_source``, ``data.store_builds``)."""

    WHAT: ClassVar[str] = "a source"  # what the errors call it

    store: str | None = Field(
        None, description="path or URL of a meltemi.datastore token store (text or chat)"
    )
    corpus: str | None = Field(
        None,
        description="a file, directory or URL built into a store on first use: text, JSONL, Parquet or "
        "Arrow; for chat, JSON, JSONL, Parquet or Arrow whose messages field holds the conversation (or a "
        "prompt and a completion, ShareGPT's conversations, or Alpaca's instruction, input and output); "
        "stdlib: the standard library's source files (text), stdlib:PATTERN,...: those whose paths under its "
        "root match (stdlib:email/*,json/*), stdlib-chat: conversations about its functions",
    )
    build_from: list[str] | None = Field(
        None,
        description="the raw inputs the store is built from where it is missing (apps/build_stores.py, and "
        "apps/pretrain.py --launch ray before training): files, local globs, directories or bucket prefixes "
        "of text, JSONL (compressed too: .zst, .gz), Parquet or Arrow, read as format, text_field, subset, "
        "data.skip_bad_lines, data.invalid_utf8 and data.chat say; the store is built at store, local or in "
        "a bucket, with data.tokenizer",
    )
    format: DataFormat = Field(
        "text", description="what the corpus (or build_from) holds: text documents or chat conversations"
    )
    text_field: str | None = Field(
        None,
        description="the JSONL field or Parquet column of the text of this source's corpus or build_from "
        "(default: data.text_field), e.g. content for StarCoder data",
    )
    subset: str | None = Field(
        None,
        description="the subset of the corpus's data set to read, as the configs of its README.md name it "
        "(load_dataset's name; default: the one its card marks default)",
    )

    @field_validator("build_from", mode="before")
    @classmethod
    def _one_input(cls, inputs):
        return [inputs] if isinstance(inputs, str) else inputs

    @model_validator(mode="after")
    def _store_or_corpus(self) -> StoreOrCorpus:
        if self.build_from is not None:
            if self.corpus is not None:
                raise ValueError(
                    "build_from names the raw inputs of a store, and a corpus is built into data.cache_dir "
                    "by itself: give either a corpus, or a store and the inputs it is built from"
                )
            if self.store is None:
                raise ValueError(
                    "build_from names the raw inputs of a store: give the store's path or URL too (store), "
                    "where it is built"
                )
            if not self.build_from or not all(path.strip() for path in self.build_from):
                raise ValueError(
                    f"build_from {self.build_from}: name each input (a file, local glob, directory or "
                    "bucket prefix)"
                )
        if (self.store is None) == (self.corpus is None):
            raise ValueError(f"give {self.WHAT} either a store or a corpus (to build into one), not both")
        if self.subset is not None and self.corpus is None and self.build_from is None:
            raise ValueError(
                "subset names the part of a corpus's data set to read: give it with a corpus (or build_from)"
            )
        if self.text_field is not None and self.corpus is None and self.build_from is None:
            raise ValueError(
                "text_field names where a corpus's text is: give it with a corpus (or build_from)"
            )
        if self.text_field is not None and self.format == "chat":
            raise ValueError(
                "text_field names where a text corpus's text is, and a chat corpus is read for its "
                "messages: name their field with data.chat.messages_field"
            )
        return self


class SourceConfig(StoreOrCorpus):
    """One source of the mixture (a ``StoreOrCorpus``), its weight, and what it is evaluated on.

    >>> SourceConfig(store="gs://b/stores/web", build_from="gs://b/raw/web/").build_from
    ['gs://b/raw/web/']
    >>> SourceConfig(build_from=["raw/web/"])
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for SourceConfig
      Value error, build_from names the raw inputs of a store: give the store's path or URL too (store), ...
    """

    weight: float = Field(1.0, ge=0, description="mixture weight (normalised over the sources)")
    eval_store: str | None = Field(
        None,
        description="a store of the source's format evaluated whole, instead of the tail of the store "
        "(data.eval_fraction); a corpus's test split is built into one (data.held_out)",
    )


class EvalSetConfig(StoreOrCorpus):
    """A set the run evaluates and never trains on (Levanter's and Marin's validation sets: Paloma's subsets),
    a store or a corpus built into one as a source is, read whole; its ``tags`` group it with others."""

    WHAT: ClassVar[str] = "an eval set"

    tags: list[str] = Field(
        default_factory=list,
        description="groups it belongs to (e.g. paloma): each tag's loss and bits per byte are logged over "
        "its sets, token-weighted (eval/<tag>/micro_loss, /bpb) and as their mean (/macro_loss, /macro_bpb)",
    )

    @field_validator("tags")
    @classmethod
    def _named_tags(cls, tags: list[str]) -> list[str]:
        for tag in tags:
            if not tag.strip() or tag != tag.strip():
                raise ValueError(f"a tag is a name without spaces around it, got {tag!r}")
        return list(dict.fromkeys(tags))


class ChatConfig(Section):
    """How chat corpora become tokens (the choices a chat store is built with)."""

    template: str = Field(
        "auto",
        description="auto (the base's own: a Hugging Face base's chat template, or the one a chat base run "
        "was trained with; else llama3), llama3 (shipped: Llama 3's layout, generation blocks around each "
        "assistant turn), a .jinja file, a tokenizer directory or its tokenizer_config.json, or a chat "
        "store or a chat run's step-N checkpoint (the template its manifest records)",
    )
    loss_on: Literal["assistant", "all"] = Field(
        "assistant", description="train on the assistant's tokens (end of turn included) or on every token"
    )
    overlong: Literal["truncate", "drop"] = Field(
        "truncate", description="a conversation longer than data.seq_len + 1 tokens: cut to fit, or left out"
    )
    end_of_turn: str | None = Field(
        None,
        description="the token each assistant turn ends with, trained so the model learns to stop, and "
        "where generation stops (default: the template's eos_token, else <|eot_id|>)",
    )
    messages_field: str = Field(
        "messages",
        min_length=1,
        description="the JSONL field or Parquet column of a conversation's messages (Axolotl's "
        "field_messages, LLaMA-Factory's columns.messages); by default also read: a prompt and a completion, "
        "ShareGPT's conversations, Alpaca's instruction and output, and messages under conversation, dialog, "
        "dialogue, chat, turns or text",
    )


class StageConfig(Section):
    """Mixture weights from ``start_step`` on (each stage's first sequence must start a mixture block)."""

    start_step: int = Field(ge=0, description="first step of the stage")
    weights: dict[str, float] = Field(description="weight per source name; sources left out weigh 0")


class DataConfig(Section):
    """Token stores, their mixture, the sequence length and the held-out split; or a corpus built into a
    store on first use (``corpus``, read as ``text_field``, ``skip_bad_lines`` and ``invalid_utf8`` say).
    :func:`meltemi.trainer.data.sources.resolve_data` turns ``stores``, ``corpus`` and ``stdlib`` into
    ``sources`` and a tokenizer path before a run starts."""

    tokenizer: str | None = Field(
        None,
        description="tokenizer.json the stores must have been built with (or a model's directory or Hub name "
        "in the Hugging Face cache: its tokenizer.json), or stdlib: a BPE of model.vocab_size tokens trained "
        "on the standard library (on first use)",
    )
    stores: list[str] = Field(
        default_factory=list,
        description="token stores to train on, with equal weights (replaces data.corpus and data.sources)",
    )
    corpus: str | None = Field(
        None,
        description="a text, JSONL, Parquet or Arrow file or directory, or stdlib (the standard library's "
        "source), built into a store with data.tokenizer on first use (replaces data.sources)",
    )
    rebuild_corpus: bool = Field(False, description="rebuild data.corpus's store (the corpus changed)")
    cache_dir: str = Field(
        ".cache/meltemi",
        description="the local directory where corpora's stores and the stdlib tokenizer are built and kept",
    )
    sources: dict[str, SourceConfig] = Field(
        default_factory=dict, description="the mixture's sources by name: token stores, or corpora to build"
    )
    eval_sets: dict[str, EvalSetConfig] = Field(
        default_factory=dict,
        description="sets evaluated beside the sources' held-out parts and never trained on, by name (not a "
        "source's): stores, or corpora built into stores on first use, each with its tags; logged as "
        "eval/<name>/loss and /bpb, with eval/loss and eval/bpb over every set (token-weighted) and "
        "eval/macro_loss and eval/macro_bpb (the sets' mean)",
    )
    stages: list[StageConfig] = Field(default_factory=list, description="mixture weights that change by step")
    seq_len: int = Field(2048, gt=0, description="tokens per training sequence")
    eval_fraction: float = Field(0.005, gt=0, lt=1, description="tail of each store held out for evaluation")
    held_out: Literal["split", "tail", "none"] = Field(
        "split",
        description="what a corpus's source is evaluated on: its data set's test split (else its "
        "validation split) when it has one beside the split trained on, else the tail of its store "
        "(data.eval_fraction); or always the tail; or none: every source trained on whole, and only "
        "data.eval_sets evaluated (as Marin ran its base run and its SFT)",
    )
    mixture_block_size: int = Field(1024, gt=0, description="sequences per block of fixed mixture counts")
    text_field: str = Field("text", description="data.corpus: the JSONL field or Parquet column of the text")
    skip_bad_lines: bool = Field(
        False, description="data.corpus: skip JSONL lines without the text field (counted), not stop"
    )
    invalid_utf8: InvalidUtf8 = Field(
        "error",
        description="data.corpus: a document that is not UTF-8 text: error (stop, naming the file and "
        "byte), skip it or replace its bad bytes with U+FFFD (counted)",
    )
    chat: ChatConfig = Field(default_factory=ChatConfig, description="how chat corpora become tokens")
    reset_positions: bool = Field(
        False,
        description="text sources: restart positions at each document within a row (chat rows always do)",
    )

    @field_validator("stores", mode="before")
    @classmethod
    def _one_store(cls, stores):
        return [stores] if isinstance(stores, str) else stores

    @field_validator("cache_dir")
    @classmethod
    def _local_cache(cls, directory: str) -> str:
        why = (
            "corpora are built into stores on each machine's own disk (a bucket has no lock to keep two "
            "hosts' builds of one store apart); to train from a bucket, build the store there once (python "
            "-m meltemi.datastore build --input CORPUS --tokenizer TOKENIZER_JSON --out gs://BUCKET/STORE) "
            "and name it in data.stores"
        )
        return local_directory(directory, why)

    @model_validator(mode="after")
    def _stages(self) -> DataConfig:
        if self.stages and self.stages[0].start_step != 0:
            raise ValueError("data.stages: the first stage must start at step 0")
        for stage in self.stages:
            unknown = sorted(set(stage.weights) - set(self.sources))
            if unknown:
                raise ValueError(
                    f"data.stages (step {stage.start_step}) weighs unknown sources {unknown}; "
                    f"data.sources has {sorted(self.sources)}"
                )
        if (clash := eval_set_clash(self.sources, self.eval_sets)) is not None:
            raise ValueError(clash)
        if self.held_out == "none":
            given = sorted(name for name, source in self.sources.items() if source.eval_store is not None)
            if given:
                raise ValueError(
                    f"data.held_out none trains on every source whole, so the eval_store of {given} would "
                    "not be read: name those stores in data.eval_sets instead"
                )
            if not self.eval_sets:
                raise ValueError(
                    "data.held_out none holds nothing out of the sources: name what the run evaluates in "
                    "data.eval_sets (a store, or a corpus built into one), or hold out a tail (tail)"
                )
        return self


def eval_set_clash(sources: dict, eval_sets: dict[str, EvalSetConfig]) -> str | None:
    """What is wrong with the names of ``eval_sets`` beside the ``sources`` trained on: a set named as a
    source (its metrics would be the source's, and a set is never trained on), or a tag naming a set or a
    source (its metrics would share their names); None when nothing is.

    >>> eval_set_clash({"web": 1}, {"c4": EvalSetConfig(store="s", tags=["c4"])})
    'data.eval_sets.c4.tags: c4 names an eval set; give the tag another name'
    """
    for name, eval_set in eval_sets.items():
        if name in sources:
            return (
                f"data.eval_sets.{name}: a source of data.sources is named {name} too; name the eval set "
                "otherwise (it is never trained on)"
            )
        for tag in eval_set.tags:
            if tag in sources or tag in eval_sets:
                what = "a source" if tag in sources else "an eval set"
                return f"data.eval_sets.{name}.tags: {tag} names {what}; give the tag another name"
    return None


class HardwareConfig(Section):
    """The accelerators a run is meant for: what ``--dry-run`` plans against (memory, peak FLOP/s)."""

    chip: str | None = Field(
        None,
        description="one of meltemi.trainer.chips.CHIPS, e.g. 'TPU v4', 'TPU v5e', 'H100', 'A100-40GB'",
    )
    devices: int | None = Field(None, gt=0, description="how many devices (chips) the run spans")
    memory_gib: float | None = Field(
        None, gt=0, description="memory per device the plan must fit in; default: the chip's"
    )

    @field_validator("chip")
    @classmethod
    def _known_chip(cls, chip: str | None) -> str | None:
        if chip is not None and chip not in CHIPS:
            raise ValueError(unknown_chip(chip))
        return chip


class EvalTask(Section):
    """A harness task (a task, group or tag name, or a task YAML path) and how it is run. A plain name in
    ``eval.tasks`` is ``{name: NAME}``, and ``NAME:SHOTS`` is ``{name: NAME, num_fewshot: SHOTS}``.

    >>> EvalTask.of("hellaswag:10"), EvalTask.of("arc_easy").num_fewshot
    (EvalTask(name='hellaswag', num_fewshot=10, alias=None), None)
    """

    name: str = Field(description="the task, group or tag name, or the path of a task YAML")
    num_fewshot: int | None = Field(
        None,
        ge=0,
        description="examples shown before each question (every task of a group or tag); null: the task's "
        "own setting, else 0",
    )
    alias: str | None = Field(
        None,
        description="the name its metrics are logged under (eval/<alias>/<metric>), so that one task runs "
        "at two shot counts (Marin's hellaswag 0- and 10-shot); a single task only",
    )

    @property
    def logged_as(self) -> str:
        return self.alias or self.name

    @staticmethod
    def of(spec: str | EvalTask) -> EvalTask:
        """``spec`` as an ``EvalTask`` (``NAME:SHOTS`` read as a name and its shot count)."""
        if isinstance(spec, EvalTask):
            return spec
        name, colon, shots = spec.rpartition(":")
        if colon and name and shots.isdigit():
            return EvalTask(name=name, num_fewshot=int(shots))
        return EvalTask(name=spec)


class EvalConfig(Section):
    """Downstream tasks through lm-evaluation-harness, run at the first and last step and every ``every``
    steps (by default with every held-out evaluation, ``trainer.eval_every``) and logged as
    ``eval/<task>/<metric>``; needs ``meltemi-trainer[eval]``."""

    tasks: list[str | EvalTask] = Field(
        default_factory=list,
        description="harness task, group or tag names or task YAML paths (meltemi_stdlib: the shipped ones), "
        "each as a name, NAME:SHOTS, or {name, num_fewshot, alias}",
    )
    limit: int | None = Field(None, gt=0, description="documents per task at each evaluation (None: all)")
    batch_size: int = Field(8, gt=0, description="rows the model scores per compiled call")
    every: int | None = Field(
        None,
        ge=0,
        description="steps between task evaluations, besides those at the first and last step (0: only "
        "those); null: trainer.eval_every",
    )

    def task_list(self) -> list[EvalTask]:
        """``tasks``, each as an ``EvalTask``."""
        return [EvalTask.of(spec) for spec in self.tasks]

    @model_validator(mode="after")
    def _each_task_once(self) -> EvalConfig:
        seen: set[str] = set()
        for task in self.task_list():
            if task.logged_as in seen:
                raise ValueError(
                    f"eval.tasks: {task.logged_as} is named twice; give one an alias (its metrics' name), "
                    "e.g. {name: hellaswag, num_fewshot: 10, alias: hellaswag_10shot}"
                )
            seen.add(task.logged_as)
        return self


RENAMED: dict[str, tuple[str, str]] = {
    "data.chat.held_out": ("data.held_out", "it chooses what text sources hold out too"),
}
"""Fields a release moved, by their old dotted name: the new name and why. A run's records that say the
old name load (``moved_fields``); the old flag is refused naming the new (``config_io.check_field_name``)."""


def moved_fields(raw: dict) -> dict:
    """``raw`` (a config as a mapping) with each old name of ``RENAMED`` moved to its new place (a value
    already at the new place wins); the mapping given is not changed.

    >>> moved_fields({"data": {"chat": {"held_out": "tail", "loss_on": "all"}}})
    {'data': {'chat': {'loss_on': 'all'}, 'held_out': 'tail'}}
    """
    for old, (new, _) in RENAMED.items():
        *path, name = old.split(".")
        holder = _section(raw, path)
        if holder is None or name not in holder:
            continue
        raw = copy.deepcopy(raw)
        value = _section(raw, path).pop(name)
        *path, name = new.split(".")
        target = raw
        for key in path:
            target = target.setdefault(key, {})
        target.setdefault(name, value)
    return raw


def _section(raw: dict, path: list[str]) -> dict | None:
    """The mapping at ``path`` in ``raw``, or None when there is none."""
    for key in path:
        raw = raw.get(key) if isinstance(raw, dict) else None
    return raw if isinstance(raw, dict) else None


class RunConfig(Section):
    """Everything a run needs; its YAML form is saved in the run directory as ``config.yaml``."""

    model: ModelConfig = Field(default_factory=ModelConfig, description="the Llama model")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="AdamW and its schedule")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="the training loop")
    data: DataConfig = Field(default_factory=DataConfig, description="token stores and sequences")
    hardware: HardwareConfig = Field(default_factory=HardwareConfig, description="the target accelerators")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="downstream tasks (lm-eval-harness)")

    @model_validator(mode="before")
    @classmethod
    def _renamed_fields(cls, raw):
        """A run recorded before a field moved (``RENAMED``) loads with the value at its new place."""
        return moved_fields(raw) if isinstance(raw, dict) else raw

    @model_validator(mode="after")
    def _sequences_fit_the_model(self) -> RunConfig:
        if self.data.seq_len > self.model.max_seq_len:
            raise ValueError(
                f"data.seq_len ({self.data.seq_len}) is longer than model.max_seq_len "
                f"({self.model.max_seq_len}), the positions the model is built for: lower data.seq_len or "
                "raise model.max_seq_len"
            )
        return self

    @model_validator(mode="after")
    def _no_name_is_the_averages(self) -> RunConfig:
        """With ``optimizer.ema`` the average's metrics are ``eval/ema/...``: no source, eval set or tag may
        be called ``ema`` (its ``eval/ema/loss`` would be another thing)."""
        if self.optimizer.ema is None:
            return self
        tags = {tag for eval_set in self.data.eval_sets.values() for tag in eval_set.tags}
        for what, names in (("data.sources", self.data.sources), ("data.eval_sets", self.data.eval_sets),
                            ("a tag of data.eval_sets", tags)):  # fmt: skip
            if "ema" in names:
                raise ValueError(
                    f"{what}: ema names the average of the weights' metrics (eval/ema/..., optimizer.ema); "
                    "give it another name"
                )
        return self

    @model_validator(mode="after")
    def _segments_cover_the_run(self) -> RunConfig:
        segments, steps = self.optimizer.segments, self.trainer.num_train_steps
        if segments and segments[-1].end < steps:
            raise ValueError(
                f"optimizer.segments end at step {segments[-1].end}, before trainer.num_train_steps "
                f"({steps}): give the learning rate of every step (a last segment, or a later end)"
            )
        return self

    @model_validator(mode="after")
    def _attention_kernel_fits(self) -> RunConfig:
        kernel, dtype, chip = self.model.attention, self.trainer.compute_dtype, self.hardware.chip
        if kernel in GPU_ONLY_ATTENTION and dtype == "float32":
            raise ValueError(
                f"model.attention {kernel} needs trainer.compute_dtype bfloat16 or float16, got float32"
            )
        if kernel == "mosaic" and chip is not None and chip not in HOPPER_CHIPS:
            raise ValueError(
                f"model.attention mosaic is written for Hopper GPUs ({', '.join(sorted(HOPPER_CHIPS))}), not "
                f"hardware.chip {chip!r}; pallas runs on any NVIDIA GPU"
            )
        return self

    @model_validator(mode="after")
    def _fp8_on_a_chip_that_has_it(self) -> RunConfig:
        chip = self.hardware.chip
        if self.model.matmul_dtype == "fp8" and chip is not None and chip not in FP8_CHIPS:
            with_fp8 = ", ".join(sorted(FP8_CHIPS))
            raise ValueError(
                f"model.matmul_dtype fp8 needs fp8 matmul units, which hardware.chip {chip!r} lacks (it "
                f"would only emulate them, slower than compute); chips with them: {with_fp8}"
            )
        return self
