"""A new phase's config made to fit its base, and its step-0 state made from the base's parameters.

``resolve_base`` runs before the data is built: it checks the config's model shape against the base's and
gives the run the base's tokenizer when it names none, so that the chat stores are tokenized as the base
was trained. ``initialize_from_base`` runs when the run has no checkpoint of its own: it restores the
base's parameters onto the run's mesh (from a checkpoint each process reads only what its devices hold; a
Hugging Face base is read into each process's host memory a leaf at a time, every layer of a stacked leaf
together, and each device is given only its slice), grows the
vocabulary by the rows a chat template's new tokens need (each the mean of the base's rows), and starts
the optimizer afresh at step 0, as ``trainer.initialize_from`` asks by default. A base run that kept a
moving average of its weights (``optimizer.ema``) gives the average as the parameters, unless
``trainer.initialize_from.weights`` is ``raw``; a run that keeps one itself starts it from its parameters.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from meltemi.datastore.storage import Directory, Location
from meltemi.trainer.checkpoint.checkpointer import find_checkpoints, inspect_checkpoint
from meltemi.trainer.checkpoint.format import EMA_PREFIX, MODEL_PREFIX, Manifest
from meltemi.trainer.checkpoint.restore import restore
from meltemi.trainer.checkpoint.resume import RunToStart, Start, continued_config, restore_state
from meltemi.trainer.checkpoint.trained_model import checkpoint_tokenizer
from meltemi.trainer.config import RunConfig
from meltemi.trainer.data.chat import concrete_template
from meltemi.trainer.data.run_tokenizer import tokenizer_at, tokenizer_file
from meltemi.trainer.data.sources import STDLIB, resolve_data, stdlib_tokenizer
from meltemi.trainer.errors import CheckpointError, ConfigError
from meltemi.trainer.hf.load import import_hf
from meltemi.trainer.model.llama import Llama, cast_floating
from meltemi.trainer.phase.base import (
    FIELD,
    Base,
    base_template,
    check_resumed_base,
    check_shape,
    check_tokenizer,
    locate_base,
    recorded_template,
)
from meltemi.trainer.phase.vocabulary import grow_vocabulary


def resolve_base(
    config: RunConfig, say: Callable[[str], object] | None = None, run_dir: str | Location | None = None
) -> RunConfig:
    """``config`` checked against its base (``trainer.initialize_from``), with the base's tokenizer as
    ``data.tokenizer`` when it names none and the base's own chat template as ``data.chat.template`` when it
    is ``auto`` and the base has one; unchanged when the run has no base. A run that has checkpoints of its
    own (in ``run_dir``) resumes from them: its base is not read, and its tokenizer is its own copy, its
    ``auto`` template the one it recorded."""
    source = config.trainer.initialize_from
    if source is None:
        return config
    say = say or (lambda line: print(line, file=sys.stderr))
    own = None if run_dir is None else own_checkpoint(run_dir)
    if own is not None:
        tokenizer, manifest, step = own
        check_resumed_base(step, manifest, source.path)
        template = concrete_template(config.data.chat.template, recorded_template(step, manifest))
        return _with_data(config, tokenizer=config.data.tokenizer or str(tokenizer), template=template)
    base = locate_base(source.path)
    check_shape(base, config)
    tokenizer = config.data.tokenizer
    if tokenizer is None:
        if base.tokenizer is None:
            raise ConfigError(
                f"data.tokenizer: the base {base.where} has no tokenizer (tokenizer.json); name the "
                "one it was "
                "trained with"
            )
        tokenizer = str(base.tokenizer)
    elif tokenizer == STDLIB:
        tokenizer = stdlib_tokenizer(config, say)
    check_tokenizer(base, tokenizer, config)
    own_template = base_template(base)
    template = concrete_template(config.data.chat.template, own_template)
    if template != config.data.chat.template and template == own_template:
        say(f"chat template: the base's own ({base.where}; data.chat.template auto)")
    return _with_data(config, tokenizer=tokenizer, template=template)


def _with_data(config: RunConfig, *, tokenizer: str, template: str) -> RunConfig:
    chat = config.data.chat.model_copy(update={"template": template})
    return config.model_copy(
        update={"data": config.data.model_copy(update={"tokenizer": tokenizer, "chat": chat})}
    )


def resolve_run(
    config: RunConfig, run_dir: str | Location | None = None, say: Callable[[str], object] | None = None
) -> RunConfig:
    """A run's config made concrete: checked against its base (its tokenizer the base's when it names
    none; a run resuming in ``run_dir`` needs only its own checkpoints) and against its own latest
    checkpoint (its schedule carried on, or extended as ``optimizer.extension`` says), then its data
    resolved (corpora built, the tokenizer given a chat template's tokens). ``say`` tells the user what is
    being built and how a schedule was extended."""
    kwargs = {} if say is None else {"say": say}
    if config.data.tokenizer is not None:  # a model's directory or Hub name: its tokenizer.json
        data = config.data.model_copy(update={"tokenizer": tokenizer_file(config.data.tokenizer)})
        config = config.model_copy(update={"data": data})
    config = resolve_base(config, run_dir=run_dir, **kwargs)
    if run_dir is not None:
        config = continued_config(config, run_dir, **kwargs)
    return resolve_data(config, **kwargs)


def own_checkpoint(run_dir: str | Location) -> tuple[str, Manifest, Directory] | None:
    """The tokenizer copy, the manifest and the directory of the latest readable checkpoint of the run in
    ``run_dir``, or None when it has none."""
    for step in find_checkpoints(run_dir):
        try:
            manifest = inspect_checkpoint(step)
        except CheckpointError:
            continue
        return checkpoint_tokenizer(step, manifest)[0], manifest, step
    return None


def initialize_from_base(run: RunToStart, warn: Callable[[str], object]) -> Start:
    """The step-0 state of a run that starts from its base: the base's parameters (its optimizer state too
    when ``parameters_only`` is off), the vocabulary grown to the config's, the step reset as asked."""
    config, program = run.config, run.program
    source = config.trainer.initialize_from
    base = locate_base(source.path, warn)
    grows = config.model.vocab_size != base.model.vocab_size
    if not source.parameters_only:
        if base.kind != "checkpoint":
            raise ConfigError(
                f"{FIELD}.parameters_only: the Hugging Face base {base.where} has no optimizer state to keep"
            )
        if grows:
            raise ConfigError(
                f"{FIELD}.parameters_only: the vocabulary grows from {base.model.vocab_size} to "
                f"{config.model.vocab_size} (a chat template's tokens), so the base's optimizer state does "
                "not fit; start it afresh (parameters_only true)"
            )
        state = restore_state(base.step, base.manifest, program, warn)
    else:
        model = _base_model(base, run, warn)
        shardings = program.state_shardings().model
        with jax.set_mesh(program.plan.mesh):
            grown = jax.jit(lambda m: grow_vocabulary(m, config.model), out_shardings=shardings)(model)
        state = eqx.tree_at(lambda s: s.model, program.initial_state(), grown)
        if state.ema is not None:  # the run's own average starts from the parameters it starts with
            state = program.with_average_started(state)
    if source.reset_step:
        zeros = tuple(jax.device_put(np.int32(0), program.plan.replicated()) for _ in range(2))  # 2 buffers
        state = eqx.tree_at(lambda s: (s.step, s.skipped_steps), state, zeros)
    added = _added_tokens(run, base) if grows else ()
    return Start(state, None, base.where, added)


def _base_model(base: Base, run: RunToStart, say: Callable[[str], object]) -> Llama:
    """The base's parameters in the run's parameter dtype, laid out on the run's mesh as the base's
    vocabulary is (the rows it grows come after): a base run's average of its weights when it kept one
    (said), unless ``trainer.initialize_from.weights`` is ``raw``."""
    config, program = run.config, run.program
    shape = config.model.model_copy(update={"vocab_size": base.model.vocab_size})
    if base.kind == "huggingface":  # read onto the mesh tensor by tensor, never whole on one device
        return import_hf(base.hf_dir, shape, dtype=config.trainer.param_dtype, plan=program.plan)[1]
    dtype = jnp.dtype(config.trainer.param_dtype)
    abstract = eqx.filter_eval_shape(
        lambda k: cast_floating(Llama.init(shape, key=k), dtype), jax.random.key(0)
    )
    shardings = program.plan.parameter_shardings(abstract)
    prefix = MODEL_PREFIX
    if base.manifest.has_ema and config.trainer.initialize_from.weights == "ema":
        prefix = EMA_PREFIX
        say(
            f"the parameters are the average of {base.where}'s weights (optimizer.ema; "
            "trainer.initialize_from.weights raw: its weights as trained)"
        )
    return restore(base.step, base.manifest, abstract, shardings, prefix=prefix)


def _added_tokens(run: RunToStart, base: Base) -> tuple[str, ...]:
    """The tokens whose rows the vocabulary grew by: the run tokenizer's ids from the base's size on."""
    tokenizer = tokenizer_at(run.config.data.tokenizer)
    return tuple(
        tokenizer.id_to_token(i) or f"<id {i}>"
        for i in range(base.model.vocab_size, run.config.model.vocab_size)
    )
