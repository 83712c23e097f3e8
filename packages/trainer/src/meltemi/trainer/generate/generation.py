"""Text generation: batched prompts, a KV cache, one compiled prefill and one compiled decode loop.

The prompts are left-padded to one length and run once through the model (prefill), filling the cache;
then a jitted ``while_loop`` adds one token per step to every row, ``chunk`` steps per call, so nothing is
compiled per token. Between chunks the host checks stop strings and stops when every row has ended (EOS, a
stop string, or ``max_new_tokens``). ``use_cache=False`` recomputes the full forward pass of the training
model for every token instead: the reference the cache is tested and benchmarked against.

With a ``MeshPlan`` the model runs as trained: parameters as they are laid out, activations and the cache
by the compute axis mapping (rows are padded to a multiple of the data-parallel devices).

>>> import jax
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.model.llama import Llama
>>> config = ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
...                      attention="reference")
>>> model = Llama.init(config, key=jax.random.key(0))
>>> out = generate(model, [[1, 2, 3], [4, 5]], SamplingConfig(max_new_tokens=4))
>>> [len(c.tokens) for c in out.completions], out.completions[0].stop_reason
([4, 4], 'length')
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from tokenizers import Tokenizer

import haliax_lite as hax
from meltemi.trainer.data.run_tokenizer import tokenizer_at
from meltemi.trainer.generate.healing import TokenTexts, after_prefix, heal_prompt
from meltemi.trainer.generate.sampling import Drawing, GenerationError, SamplingConfig, next_tokens
from meltemi.trainer.generate.streaming import TextStream
from meltemi.trainer.model.kv_cache import KVCache, forward_cached
from meltemi.trainer.model.llama import Llama
from meltemi.trainer.step.mesh import MeshPlan, placed


@dataclasses.dataclass(frozen=True)
class Completion:
    """One prompt's new tokens (ending with EOS when it stopped there), their text when a tokenizer was
    given (without EOS, cut before a stop string), and why it stopped: ``eos``, ``stop_string``,
    ``length``."""

    tokens: tuple[int, ...]
    text: str | None
    stop_reason: str


@dataclasses.dataclass(frozen=True)
class Generation:
    """Every prompt's completion, and the wall time it took (compilation included on a first call)."""

    completions: tuple[Completion, ...]
    seconds: float

    @property
    def new_tokens(self) -> int:
        return sum(len(c.tokens) for c in self.completions)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else float("inf")


class _Loop(eqx.Module):
    """The decode loop's state: the token buffer, each row's first slot, the first new token's slot, the
    next slot, which rows ended, the next logits, and the cache."""

    tokens: jax.Array
    pad: jax.Array
    start: jax.Array
    t: jax.Array
    done: jax.Array
    logits: jax.Array
    cache: KVCache | None


def _named_ids(ids: jax.Array) -> hax.NamedArray:
    return hax.named(ids, ("batch", "position"))


def _full_logits(model: Llama, tokens: jax.Array, pad: jax.Array, index) -> jax.Array:
    """The training forward pass over the whole buffer; the logits at ``index`` (batch, vocab)."""
    slots = jnp.arange(tokens.shape[1])
    segments = (slots[None, :] >= pad[:, None]).astype(jnp.int32)
    positions = jnp.maximum(slots[None, :] - pad[:, None], 0)  # as the cache counts them: from the prompt
    named = model.logits(_named_ids(tokens), _named_ids(segments), _named_ids(positions))
    logits = named.rearrange(("batch", "position", "vocab"))
    return jax.lax.dynamic_index_in_dim(logits.array, index, axis=1, keepdims=False)


def prefill(
    model: Llama, tokens: jax.Array, pad: jax.Array, done: jax.Array, prompt_len: int, use_cache: bool
) -> _Loop:
    """The prompts (``tokens[:, :prompt_len]``, left-padded from ``pad``) through the model: the loop's
    first state, its cache filled (``use_cache``) and the next logits."""
    pad_named = hax.named(pad, ("batch",))
    if use_cache:
        Batch = hax.Axis("batch", tokens.shape[0])
        dtype = model.embed_tokens.weight.dtype
        cache = KVCache.init(model.config, Batch, slots=tokens.shape[1], dtype=dtype)
        prompt = _named_ids(tokens[:, :prompt_len])
        logits, cache = forward_cached(model, prompt, jnp.int32(0), pad_named, cache)
        logits = logits.rearrange(("batch", "vocab")).array
    else:
        cache, logits = None, _full_logits(model, tokens, pad, prompt_len - 1)
    return _Loop(tokens, pad, jnp.int32(prompt_len), jnp.int32(prompt_len), done, logits, cache)


CHUNK = 32  # tokens the decode loop adds between the host's checks
STREAMED_CHUNK = 8  # the same, when the text is written as it grows: about 4 pieces a second here


def decode_chunk(
    model: Llama, loop: _Loop, seed: jax.Array, drawing: Drawing, eos: tuple[int, ...], chunk: jax.Array
) -> _Loop:
    """Up to ``chunk`` more tokens for every row that has not ended (at ``eos`` or the buffer's end), drawn
    with ``seed`` as ``drawing`` says (arrays, all three: every chunk size, seed, temperature and top-p runs
    one compiled program). The n-th new token's draw depends on the seed and n, not on its slot: padding
    the prompts changes no draw."""
    end = loop.tokens.shape[1]
    filler = eos[0] if eos else 0
    pad = loop.pad
    pad_named = hax.named(pad, ("batch",))

    def running(carry):
        i, s = carry
        return (i < chunk) & (s.t < end) & ~jnp.all(s.done)

    def step(carry):
        i, s = carry
        chosen = next_tokens(s.logits, jax.random.fold_in(jax.random.key(seed), s.t - s.start), drawing)
        chosen = jnp.where(s.done, filler, chosen)
        tokens = jax.lax.dynamic_update_index_in_dim(s.tokens, chosen, s.t, axis=1)
        done = s.done | jnp.isin(chosen, jnp.asarray(eos, jnp.int32)) if eos else s.done
        if s.cache is not None:
            logits, cache = forward_cached(model, _named_ids(chosen[:, None]), s.t, pad_named, s.cache)
            logits = logits.rearrange(("batch", "vocab")).array
        else:
            cache, logits = None, _full_logits(model, tokens, pad, s.t)
        return i + 1, _Loop(tokens, pad, s.start, s.t + 1, done, logits, cache)

    return jax.lax.while_loop(running, step, (jnp.int32(0), loop))[1]


_prefill = eqx.filter_jit(prefill)
_decode_chunk = eqx.filter_jit(decode_chunk, donate="all-except-first")


def _tokenizer(tokenizer: Tokenizer | str | Path | None) -> Tokenizer | None:
    return None if tokenizer is None else tokenizer_at(tokenizer, GenerationError)


def _prompt_ids(prompts, tokenizer: Tokenizer | None, vocab: int) -> list[list[int]]:
    if isinstance(prompts, str) or not prompts:
        raise GenerationError("prompts must be a non-empty list of strings or of token-id lists")
    ids = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            if tokenizer is None:
                raise GenerationError(f"prompt {i} is text: pass tokenizer= to encode it")
            prompt = tokenizer.encode(prompt).ids
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise GenerationError(f"prompt {i} is empty: give it at least one token")
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise GenerationError(f"prompt {i}: token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
        ids.append(prompt)
    return ids


def _stop_index(tokens: list[int], tokenizer: Tokenizer, stops: Sequence[str], prefix: str) -> int | None:
    """The length of the shortest prefix of ``tokens`` whose text (after a healed row's ``prefix``) holds a
    stop string, or None."""
    if not any(s in after_prefix(tokenizer.decode(tokens), prefix) for s in stops):
        return None
    for n in range(1, len(tokens) + 1):
        if any(s in after_prefix(tokenizer.decode(tokens[:n]), prefix) for s in stops):
            return n
    return len(tokens)


def _completion(
    row: list[int], eos: tuple[int, ...], tokenizer: Tokenizer | None, stops: Sequence[str], prefix: str = ""
) -> Completion:
    reason = "length"
    ended = next((i for i, token in enumerate(row) if token in eos), None)
    if ended is not None:
        row, reason = row[: ended + 1], "eos"
    if tokenizer is None:
        return Completion(tuple(row), None, reason)
    body = row[:-1] if reason == "eos" else row
    cut = _stop_index(body, tokenizer, stops, prefix) if stops else None
    if cut is not None:
        row, body, reason = row[:cut], body[:cut], "stop_string"
    text = after_prefix(tokenizer.decode(body), prefix)
    if reason == "stop_string":
        text = text[: min(text.index(s) for s in stops if s in text)]
    return Completion(tuple(row), text, reason)


def generate(
    model: Llama,
    prompts: Sequence[str] | Sequence[Sequence[int]],
    settings: SamplingConfig | None = None,
    *,
    tokenizer: Tokenizer | str | Path | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    plan: MeshPlan | None = None,
    chunk: int | None = None,
    use_cache: bool = True,
    prompt_multiple: int = 1,
    min_rows: int = 1,
    write: Callable[[str], object] | None = None,
    heal: bool = False,
) -> Generation:
    """Continue each prompt (text, with ``tokenizer``; or token ids) by up to ``settings.max_new_tokens``.

    A row stops at ``eos_token_id`` (an id, or several: a chat model's end of turn and end of text; kept as
    its last token) or, with a tokenizer, once its text holds one of ``settings.stop_strings``. ``chunk`` is
    how many tokens the compiled loop adds between the host's checks (by default ``CHUNK``, or
    ``STREAMED_CHUNK`` with ``write``: a reply shown as it grows arrives in small pieces; any size runs the
    same program). Prompts are left-padded to a multiple of ``prompt_multiple`` tokens (as far as the model's
    context allows) and the batch to at least ``min_rows`` rows, so that calls with other prompts reuse the
    same compiled programs; padding changes no token a row draws. With ``write`` (and a tokenizer), the first
    prompt's text is written as it grows, after each chunk (``streaming.TextStream``): what was written is its
    completion's text. With ``heal`` (and a tokenizer), a prompt whose last token's text begins longer tokens
    has it taken back and its first new token made to begin with that text (``healing``: ``"def "`` ends in a
    lone space, which in training precedes table alignment rather than names); its completion's text and
    stop strings are what follows the prompt as given.
    """
    settings = settings or SamplingConfig()
    tokenizer = _tokenizer(tokenizer)
    config = model.config
    if settings.stop_strings and tokenizer is None:
        raise GenerationError("stop_strings need the tokenizer: pass tokenizer=")
    if write is not None and tokenizer is None:
        raise GenerationError("write needs the tokenizer to write text: pass tokenizer=")
    if chunk is None:
        chunk = CHUNK if write is None else STREAMED_CHUNK
    for name, value in (("chunk", chunk), ("prompt_multiple", prompt_multiple), ("min_rows", min_rows)):
        if value < 1:
            raise GenerationError(f"{name} must be a positive number, got {value}")
    ids = _prompt_ids(prompts, tokenizer, config.vocab_size)
    texts = TokenTexts(tokenizer, config.vocab_size) if heal and tokenizer is not None else None
    healed = [heal_prompt(p, texts) for p in ids] if texts is not None else []
    ids = [h.ids for h in healed] or ids
    prefixes = [h.prefix for h in healed] or [""] * len(ids)
    longest = max(len(p) for p in ids)
    room = config.max_seq_len - settings.max_new_tokens
    prompt_len = max(longest, min(-(-longest // prompt_multiple) * prompt_multiple, room))
    end = prompt_len + settings.max_new_tokens
    if end > config.max_seq_len:
        raise GenerationError(
            f"the longest prompt ({prompt_len} tokens) plus max_new_tokens ({settings.max_new_tokens}) "
            f"exceeds model.max_seq_len ({config.max_seq_len})"
        )
    rows = max(len(ids), min_rows)
    rows = rows if plan is None else plan.whole_rows(rows)
    tokens = np.zeros((rows, end), np.int32)
    pad = np.full(rows, prompt_len - 1, np.int32)
    for i, prompt in enumerate(ids):
        tokens[i, prompt_len - len(prompt) : prompt_len] = prompt
        pad[i] = prompt_len - len(prompt)
    done = np.arange(rows) >= len(ids)  # rows added to fill the data-parallel devices start finished

    eos = _stop_ids(eos_token_id)
    stream = None
    if write is not None:
        stream = TextStream(
            tokenizer, stop_ids=eos, stop_strings=settings.stop_strings, write=write, after=prefixes[0]
        )
    start = time.perf_counter()
    with placed(plan):
        arrays = (jnp.asarray(tokens), jnp.asarray(pad), jnp.asarray(done))
        loop = _prefill(model, *arrays, prompt_len, use_cache)
        if any(prefixes):  # a healed row's first token begins with the text taken back
            allowed = np.ones((rows, config.vocab_size), bool)
            for i, prefix in enumerate(prefixes):
                if prefix:
                    allowed[i] = texts.starting_with(prefix)
            loop = eqx.tree_at(lambda s: s.logits, loop, jnp.where(allowed, loop.logits, -jnp.inf))
        while True:
            seed = jnp.asarray(settings.seed, jnp.int32)  # new arrays each call: the call donates them
            loop = _decode_chunk(model, loop, seed, Drawing.of(settings), eos, jnp.int32(chunk))
            t, done = int(loop.t), np.asarray(loop.done)
            if settings.stop_strings or stream is not None:
                new = np.asarray(loop.tokens)[:, prompt_len:t]
            if settings.stop_strings:
                done = _mark_stops(new, done, tokenizer, settings.stop_strings, prefixes)
                loop = eqx.tree_at(lambda s: s.done, loop, jnp.asarray(done))
            if stream is not None:
                stream(new[: len(ids)].tolist())
            if t >= end or done.all():
                break
        new = np.asarray(loop.tokens)[: len(ids), prompt_len:t]
    seconds = time.perf_counter() - start
    stops = settings.stop_strings
    completions = tuple(
        _completion(row.tolist(), eos, tokenizer, stops, prefix)
        for row, prefix in zip(new, prefixes, strict=True)
    )
    if stream is not None:
        stream.finish(completions[0].text)
    return Generation(completions, seconds)


SHORTEST_PADDED = 64


def padded_length(tokens: int) -> int:
    """The length a prompt of ``tokens`` is left-padded to (as ``generate``'s ``prompt_multiple``; as far as
    the model's positions allow): the power of two at or above it, at least ``SHORTEST_PADDED``. A chat's
    conversation grows every turn; so padded, it compiles the prefill and the decode loop once per doubling
    of its length, not once per turn, and other prompts find their programs in the compilation cache
    (padding changes no token drawn).

    >>> padded_length(5), padded_length(64), padded_length(65), padded_length(300)
    (64, 64, 128, 512)
    """
    return max(SHORTEST_PADDED, 1 << (tokens - 1).bit_length())


def _stop_ids(eos_token_id: int | Sequence[int] | None) -> tuple[int, ...]:
    """The ids a row stops at, as the compiled loop takes them (a static, hashable tuple)."""
    if eos_token_id is None:
        return ()
    if isinstance(eos_token_id, int | np.integer):
        return (int(eos_token_id),)
    return tuple(dict.fromkeys(int(i) for i in eos_token_id))


def _mark_stops(
    new: np.ndarray, done: np.ndarray, tokenizer: Tokenizer, stops: Sequence[str], prefixes: Sequence[str]
) -> np.ndarray:
    done = done.copy()
    for i in np.flatnonzero(~done):
        prefix = prefixes[i] if i < len(prefixes) else ""
        text = after_prefix(tokenizer.decode(new[i].tolist()), prefix)
        done[i] = any(s in text for s in stops)
    return done


def no_tokenizer(where: object) -> GenerationError:
    """The error of a model without a tokenizer: a run that kept none, or a Hugging Face directory without
    ``tokenizer.json`` (one with only a SentencePiece ``tokenizer.model`` is not read)."""
    return GenerationError(
        f"{where}: no tokenizer to turn text into tokens (a run's copy of its own, or a Hugging Face "
        "directory's tokenizer.json)"
    )


def recorded_sample_prompt(location: str | Path) -> str:
    """The ``trainer.sample_prompt`` a run's latest readable checkpoint records (what its summary's sample
    continued), read from the manifest alone; a ``GenerationError`` when the run records none.

    >>> recorded_sample_prompt("/no/such/run")
    Traceback (most recent call last):
    ...
    meltemi.trainer.errors.CheckpointError: /no/such/run does not exist
    """
    from meltemi.datastore.storage import Directory
    from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint
    from meltemi.trainer.checkpoint.trained_model import locate_model
    from meltemi.trainer.errors import CheckpointError

    found = locate_model(location)
    if isinstance(found, Directory):
        raise GenerationError(f"{location}: a Hugging Face model records no sample prompt; give --prompt")
    for step in found:
        try:
            manifest = inspect_checkpoint(step)
        except CheckpointError:
            continue  # load_model says why it skips it
        prompt = manifest.config.get("trainer", {}).get("sample_prompt")
        if not prompt:
            raise GenerationError(f"{step.where()}: its run records no trainer.sample_prompt to continue")
        return prompt
    raise CheckpointError(f"{location}: no checkpoint there reads back whole")


def sample_checkpoint(
    location: str | Path,
    prompts: Sequence[str],
    settings: SamplingConfig | None = None,
    *,
    warn: Callable[[str], object] | None = None,
    write: Callable[[str], object] | None = None,
    dtype: str | None = None,
    heal: bool = True,
    weights: str | None = None,
) -> tuple[Generation, Path]:
    """Continue text prompts with a run directory's latest good checkpoint (or a ``step-N`` directory),
    sharded over every device, tokenized with the run's own tokenizer, stopping at the end-of-text token
    its checkpoint records; with ``write``, the first prompt's continuation is written as it grows. Text
    prompts' last tokens are healed unless ``heal`` is False (``generate``'s ``heal``: ``"def "`` continues
    as a name). Prompts are padded to ``padded_length``, so another prompt of about the same length reuses
    the compiled programs (from the compilation cache, in another process); ``dtype`` holds and computes the
    model in another dtype than its run's; ``weights`` picks the run's moving average of its weights
    (``ema``, the default when it kept one) or its weights as trained (``raw``)."""
    from meltemi.trainer.checkpoint.trained_model import load_model
    from meltemi.trainer.step import compile_cache

    trained = load_model(location, **({"warn": warn} if warn else {}), dtype=dtype, weights=weights)
    compile_cache.enable_for(trained.config.trainer)
    if trained.tokenizer is None:
        raise no_tokenizer(trained.checkpoint)
    tokenizer = _tokenizer(trained.tokenizer)
    text = heal and not isinstance(prompts, str) and all(isinstance(p, str) for p in prompts)
    if not isinstance(prompts, str):  # encoded once: the lengths pick the padding, generate takes the ids
        prompts = [tokenizer.encode(p).ids if isinstance(p, str) else p for p in prompts]
    result = generate(
        trained.model,
        prompts,
        settings,
        tokenizer=tokenizer,
        eos_token_id=trained.end_of_text.stop_ids,
        plan=trained.layout.plan,
        write=write,
        prompt_multiple=padded_length(max(map(len, prompts), default=1)),
        heal=text,
    )
    return result, trained.checkpoint
