"""Where the libraries meet, in one place: named arrays to the kernels' positional arrays, the token
store's batches to named arrays, and one seed to both kinds of key.

The model speaks haliax-lite (named axes); ``meltemi.kernels`` takes plain ``[batch, seq, heads, dim]`` and
``[tokens, embed]`` arrays; ``meltemi.datastore`` gives numpy batches and takes 64-bit integer keys. Every
conversion between them is here, so the model and the loop never reshape for a library.
"""

from __future__ import annotations

import zlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import haliax_lite as hax
from meltemi import kernels
from meltemi.datastore import derive_key
from meltemi.trainer.errors import ConfigError

BATCH, POSITION = "batch", "position"


class NamedBatch(eqx.Module):
    """One batch as named arrays: ids, targets, segment ids, positions and loss mask over ``(batch,
    position)``, and each row's mixture ``source`` over ``(batch,)``. ``positions`` are what the rotary
    encoding rotates by (they restart at each packed conversation); ``loss_mask`` is True where a target
    is trained (within its input's document and, in a chat row, the assistant's)."""

    input_ids: hax.NamedArray
    targets: hax.NamedArray
    segment_ids: hax.NamedArray
    positions: hax.NamedArray
    loss_mask: hax.NamedArray
    source: hax.NamedArray


def named_batch(arrays: dict[str, jax.Array | np.ndarray]) -> NamedBatch:
    """Name the token store's batch (``BatchLoader.batch``'s arrays, or global ``jax.Array``s made of them);
    without ``positions`` each row counts its positions from 0.

    >>> b = named_batch({"input_ids": np.zeros((2, 4), np.uint16), "targets": np.zeros((2, 4), np.uint16),
    ...                  "segment_ids": np.zeros((2, 4), np.int32), "positions": np.zeros((2, 4), np.int32),
    ...                  "loss_mask": np.ones((2, 4), bool), "source": np.zeros(2, np.int32)})
    >>> b.input_ids.axes, b.input_ids.dtype
    ((Axis(name='batch', size=2), Axis(name='position', size=4)), dtype('int32'))
    """
    rows, length = arrays["input_ids"].shape
    Batch, Pos = hax.Axis(BATCH, rows), hax.Axis(POSITION, length)
    if "positions" not in arrays:  # a batch made by hand: each row one document, counted from its start
        arrays = {**arrays, "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length))}

    def name(key, axes, dtype):
        return hax.named(jnp.asarray(arrays[key], dtype), axes)

    return NamedBatch(
        input_ids=name("input_ids", (Batch, Pos), jnp.int32),
        targets=name("targets", (Batch, Pos), jnp.int32),
        segment_ids=name("segment_ids", (Batch, Pos), jnp.int32),
        positions=name("positions", (Batch, Pos), jnp.int32),
        loss_mask=name("loss_mask", (Batch, Pos), jnp.bool_),
        source=name("source", (Batch,), jnp.int32),
    )


def batch_host_arrays(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The loader's numpy batch in the dtypes the step takes (tokens as int32), before it goes to devices."""
    return {
        "input_ids": batch["input_ids"].astype(np.int32),
        "targets": batch["targets"].astype(np.int32),
        "segment_ids": batch["segment_ids"].astype(np.int32),
        "positions": batch["positions"].astype(np.int32),
        "loss_mask": batch["loss_mask"].astype(bool),
        "source": batch["source"].astype(np.int32),
    }


def attention(
    q: hax.NamedArray,
    k: hax.NamedArray,
    v: hax.NamedArray,
    segment_ids: hax.NamedArray,
    *,
    implementation: str,
) -> hax.NamedArray:
    """Causal grouped-query attention kept within documents, by ``meltemi.kernels.attention``.

    ``q`` has axes ``(batch, position, kv_heads, q_heads_per_group, head_size)`` (any order), ``k`` and ``v``
    ``(batch, position, kv_heads, head_size)``; the output has ``q``'s axes in that order. Query head
    ``kv * group + g`` uses key/value head ``kv``, as in the kernels and in Hugging Face's Llama.
    """
    q = q.rearrange((BATCH, POSITION, "kv_heads", "q_heads_per_group", "head_size"))
    k = k.rearrange((BATCH, POSITION, "kv_heads", "head_size"))
    v = v.rearrange((BATCH, POSITION, "kv_heads", "head_size"))
    b, s, kv, g, d = q.array.shape
    queries, segments = q.array.reshape(b, s, kv * g, d), segment_ids.rearrange((BATCH, POSITION)).array
    try:
        out = kernels.attention(
            queries,
            k.array,
            v.array,
            causal=True,
            segment_ids=segments,
            implementation=implementation,
            check_finite=False,
        )
    except kernels.UnsupportedError as refusal:  # a config the machine refuses, said in the config's words
        raise ConfigError(
            f"model.attention {implementation} cannot run here: {refusal.reason}; "
            "model.attention auto picks one that can"
        ) from None
    return hax.named(out.reshape(b, s, kv, g, d), q.axes)


def token_losses(
    hidden: hax.NamedArray,
    unembedding: hax.NamedArray,
    targets: hax.NamedArray,
    loss_mask: hax.NamedArray,
    *,
    z_loss_weight: float,
    implementation: str,
    block_size: int,
) -> tuple[jax.Array, jax.Array]:
    """``(mean loss over the masked-in tokens, per-token log-normalizers)`` by the fused kernel.

    ``hidden`` is ``(batch, position, embed)``, ``unembedding`` ``(embed, vocab)``; the logits are never
    materialised. The log-normalizers come back as ``(batch, position)`` in float32.
    """
    hidden = hidden.rearrange((BATCH, POSITION, "embed"))
    b, s, e = hidden.array.shape
    loss, lse = kernels.cross_entropy(
        hidden.array.reshape(b * s, e),
        unembedding.rearrange(("embed", "vocab")).array.astype(hidden.dtype),
        targets.rearrange((BATCH, POSITION)).array.reshape(b * s),
        mask=loss_mask.rearrange((BATCH, POSITION)).array.reshape(b * s),
        z_loss_weight=z_loss_weight,
        block_size=block_size,
        implementation=implementation,
        check_finite=False,
        check_labels=False,  # data.py checks every store's vocabulary against model.vocab_size
    )
    return loss, lse.reshape(b, s)


def label_logits(hidden: hax.NamedArray, unembedding: hax.NamedArray, targets: hax.NamedArray) -> jax.Array:
    """Each position's logit for its target, ``(batch, position)`` in float32, without the full logits."""
    columns = hax.take(unembedding.astype(hidden.dtype), "vocab", targets)
    return (
        hax.dot(hidden, columns, axis="embed", preferred_element_type=jnp.float32)
        .rearrange((BATCH, POSITION))
        .array
    )


def purpose_id(purpose: str) -> int:
    """A stable 31-bit number for a purpose name, to ``fold_in`` (same on every host and run).

    >>> purpose_id("init") == purpose_id("init") != purpose_id("dropout")
    True
    """
    return zlib.crc32(purpose.encode()) & 0x7FFFFFFF


def seed_key(seed: int) -> jax.Array:
    """The Threefry key of a 64-bit seed, every bit of it: ``[high 32 bits, low 32 bits]``, as
    ``jax.random.key`` makes it with 64-bit integers on (without them it drops the high bits, so seeds
    ``2**32`` apart would start from the same parameters). Below ``2**32`` it is ``jax.random.key(seed)``.

    >>> import numpy as np
    >>> np.asarray(jax.random.key_data(seed_key(2**32 + 11))).tolist()
    [1, 11]
    """
    if not 0 <= seed < 2**64:
        raise ValueError(f"a seed is a 64-bit unsigned integer (0 .. 2**64 - 1), got {seed}")
    words = np.array([seed >> 32, seed & 0xFFFFFFFF], np.uint32)
    return jax.random.wrap_key_data(words, impl="threefry2x32")


def jax_key(seed: int, purpose: str, step: int | None = None) -> jax.Array:
    """The JAX key for ``purpose`` (then ``step``) from the run seed: ``fold_in`` by purpose, then step."""
    key = jax.random.fold_in(seed_key(seed), purpose_id(purpose))
    return key if step is None else jax.random.fold_in(key, step)


def data_key(seed: int, purpose: str) -> int:
    """The datastore's 64-bit integer key for ``purpose`` (shuffles, mixtures) from the run seed."""
    return derive_key(seed, purpose)
