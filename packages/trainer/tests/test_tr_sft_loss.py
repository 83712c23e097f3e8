"""The fine-tuning loss: only trained targets count (changing any other leaves the loss and gradients bitwise
as they were), a conversation packed beside others scores as it does alone (masking and positions), and
the loss over the global batch does not depend on microbatching or on how conversations were packed."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import haliax_lite as hax
from meltemi.trainer import adapters
from meltemi.trainer.config import RunConfig
from meltemi.trainer.model.llama import Llama
from meltemi.trainer.step.train_step import make_gradients

VOCAB, WIDTH = 64, 96


def config(**trainer) -> RunConfig:
    return RunConfig(
        model={"vocab_size": VOCAB, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 2, "num_heads": 4,
               "num_kv_heads": 2, "max_seq_len": 4096, "attention": "xla", "cross_entropy": "xla",
               "cross_entropy_block_size": 32, "remat": "none"},
        trainer={"compute_dtype": "float32", **trainer},
        data={"seq_len": WIDTH},
    )  # fmt: skip


def scaled_model(scale: float, seed: int = 0) -> Llama:
    """A model whose weights are ``scale`` times their initial draw: its attention is sharp, so where a token
    may look (another conversation) and the angle it is rotated by (its position) show in its outputs."""
    model = Llama.init(config().model, key=jax.random.key(seed))
    return jax.tree_util.tree_map(lambda x: x * scale if eqx.is_inexact_array(x) else x, model)


def batch(ids, segments, positions, weights) -> adapters.NamedBatch:
    """A batch of rows of ``width + 1`` tokens as the loader makes it: a target is trained where it weighs
    and lies in its input's conversation."""
    ids, segments = np.asarray(ids, np.int32), np.asarray(segments)
    trained = np.asarray(weights, bool)[:, 1:] & (segments[:, 1:] == segments[:, :-1])
    return adapters.named_batch({
        "input_ids": ids[:, :-1], "targets": ids[:, 1:], "segment_ids": segments[:, :-1],
        "positions": np.asarray(positions)[:, :-1], "loss_mask": trained,
        "source": np.zeros(len(ids), np.int32),
    })  # fmt: skip


def packed(conversations: list[np.ndarray], width: int, *, reset=True, masked=True):
    """One row of whole ``conversations`` then padding: segment ids, positions (restarted at each one
    unless ``reset`` is off) and the ids, as ``PackedDataset`` lays a row out."""
    ids = np.zeros(width, np.int32)
    segments = np.full(width, len(conversations), np.int32)
    positions = np.arange(width, dtype=np.int32)
    at = 0
    for j, conversation in enumerate(conversations):
        ids[at : at + len(conversation)] = conversation
        segments[at : at + len(conversation)] = j if masked else 0
        if reset:
            positions[at : at + len(conversation)] = np.arange(len(conversation))
        at += len(conversation)
    return ids[None], segments[None], positions[None]


@eqx.filter_jit  # one program per row width; eagerly, each operation of the forward pass compiled on its own
def _token_logprobs(model: Llama, ids: jax.Array, segments: jax.Array, positions: jax.Array) -> jax.Array:
    named = lambda a: hax.named(a, ("batch", "position"))  # noqa: E731
    logits = model.logits(named(ids[:, :-1]), named(segments[:, :-1]), named(positions[:, :-1]))
    logits = logits.rearrange(("batch", "position", "vocab")).array
    chosen = jnp.take_along_axis(logits, ids[:, 1:, None], axis=-1)[..., 0]
    return chosen - jax.nn.logsumexp(logits, axis=-1)


def token_logprobs(model: Llama, ids, segments, positions) -> np.ndarray:
    arrays = (jnp.asarray(a, jnp.int32) for a in (ids, segments, positions))
    return np.asarray(_token_logprobs(model, *arrays))


@pytest.fixture(scope="module")
def conversations() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.integers(1, VOCAB, size=n).astype(np.int32) for n in (17, 9, 23)]


def alone_and_packed(model, conversations, width, **layout):
    ids, segments, positions = packed(conversations, width, **layout)
    together = token_logprobs(model, ids, segments, positions)[0]
    gaps, at = [], 0
    for conversation in conversations:
        alone = token_logprobs(model, *packed([conversation], width))[0][: len(conversation) - 1]
        gaps.append(np.abs(together[at : at + len(conversation) - 1] - alone).max())
        at += len(conversation)
    return max(gaps)


def test_each_packed_conversation_scores_as_it_does_alone(conversations):
    model = scaled_model(5.0)
    # offset far into the row, where a position counted across documents would be large
    far = [np.ones(1500, np.int32), *conversations]
    assert alone_and_packed(model, conversations, 128) < 1e-5
    assert alone_and_packed(model, far, 1600) < 1e-5


def test_packing_without_document_masking_or_position_reset_would_change_the_scores(conversations):
    """What the test above catches: a conversation that sees the one before it, or counts its positions on
    from it (the difference is in float rounding of far rotations, amplified by the sharp attention)."""
    model = scaled_model(5.0)
    far = [np.ones(1500, np.int32), *conversations]
    assert alone_and_packed(model, conversations, 128, masked=False) > 1e-3
    assert alone_and_packed(model, far, 1600, reset=False) > 5e-5


def random_chat_batch(rows: int, seed: int):
    """Packed rows of random conversations: ids, segment ids, positions, and a mask that trains about half
    of each conversation's targets (its "assistant" tokens)."""
    rng = np.random.default_rng(seed)
    all_ids, all_segments, all_positions, all_masks = [], [], [], []
    for _ in range(rows):
        lengths, room = [], WIDTH + 1
        while room > 8:
            n = int(rng.integers(4, min(40, room) + 1))
            lengths.append(n)
            room -= n
        ids, segments, positions = packed([rng.integers(1, VOCAB, n) for n in lengths], WIDTH + 1)
        all_ids.append(ids[0]), all_segments.append(segments[0]), all_positions.append(positions[0])
        all_masks.append((rng.random(WIDTH + 1) < 0.5) & (segments[0] < len(lengths)))
    return np.stack(all_ids), np.stack(all_segments), np.stack(all_positions), np.stack(all_masks)


@pytest.mark.parametrize("implementation", ["reference", "xla"])
def test_changing_an_untrained_target_changes_neither_the_loss_nor_the_gradients(implementation):
    ids, segments, positions, mask = random_chat_batch(4, seed=2)
    run = config(global_batch_size=4)
    run = run.model_copy(update={"model": run.model.model_copy(update={"cross_entropy": implementation})})
    gradients = jax.jit(make_gradients(run))
    model = scaled_model(1.0)
    before = batch(ids, segments, positions, mask)
    untrained = ~before.loss_mask.array
    assert bool(untrained.any()) and bool((~untrained).any())
    other_targets = jnp.where(untrained, (before.targets.array + 7) % VOCAB, before.targets.array)
    after = eqx.tree_at(lambda b: b.targets, before, hax.named(other_targets, before.targets.axes))
    assert not np.array_equal(np.asarray(after.targets.array), np.asarray(before.targets.array))
    (loss_a, _, grads_a), (loss_b, _, grads_b) = gradients(model, before), gradients(model, after)
    assert np.asarray(loss_a).tobytes() == np.asarray(loss_b).tobytes()
    for a, b in zip(jax.tree_util.tree_leaves(grads_a), jax.tree_util.tree_leaves(grads_b), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    # and a trained target does change them
    trained = jnp.where(untrained, before.targets.array, (before.targets.array + 7) % VOCAB)
    changed = eqx.tree_at(lambda b: b.targets, before, hax.named(trained, before.targets.axes))
    assert float(gradients(model, changed)[0]) != float(loss_a)


def test_microbatches_give_the_full_batchs_loss_and_gradients():
    ids, segments, positions, mask = random_chat_batch(8, seed=3)
    mask[:4, :] &= np.arange(WIDTH + 1) < 20  # microbatches with very different counts of trained targets
    model, whole = scaled_model(1.0), batch(ids, segments, positions, mask)
    full = jax.jit(make_gradients(config(global_batch_size=8)))(model, whole)
    for size in (1, 2, 4):
        split = jax.jit(make_gradients(config(global_batch_size=8, microbatch_size=size)))(model, whole)
        np.testing.assert_allclose(float(split[0]), float(full[0]), rtol=1e-6)
        for a, b in zip(jax.tree_util.tree_leaves(split[2]), jax.tree_util.tree_leaves(full[2]), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6 * np.abs(b).max())


def test_the_loss_does_not_depend_on_how_the_conversations_were_packed():
    """The same conversations in other rows and another order within rows: the same mean over the batch's
    trained targets (not a mean of per-row means, which would weigh a short row's targets more)."""
    rng = np.random.default_rng(4)
    conversations = [rng.integers(1, VOCAB, int(n)).astype(np.int32) for n in rng.integers(4, 30, size=12)]
    trained = [rng.random(len(c)) < 0.6 for c in conversations]
    model = scaled_model(1.0)
    gradients = jax.jit(make_gradients(config(global_batch_size=4)))

    def loss(order):
        rows, row, used = [], [], 0
        for i in order:
            if used + len(conversations[i]) > WIDTH + 1:
                rows.append(row)
                row, used = [], 0
            row.append(i)
            used += len(conversations[i])
        rows.append(row)
        assert len(rows) <= 4
        rows += [[]] * (4 - len(rows))
        laid = [packed([conversations[i] for i in r], WIDTH + 1) for r in rows]
        masks = []
        for r in rows:
            m = np.zeros(WIDTH + 1, bool)
            m[: sum(len(conversations[i]) for i in r)] = np.concatenate([trained[i] for i in r] or [[]])
            masks.append(m)
        stacked = [np.concatenate([laid_row[k] for laid_row in laid]) for k in range(3)]
        return float(gradients(model, batch(*stacked, np.stack(masks)))[0])

    first = loss(range(12))
    assert loss(rng.permutation(12)) == pytest.approx(first, rel=1e-6)
    assert loss(list(reversed(range(12)))) == pytest.approx(first, rel=1e-6)
