"""The libraries compose as the trainer will compose them: the token store's batches feed a named-tensor
model, and the kernels agree with haliax-lite's own layers on the store's real document layout.

Each library is tested alone in its package; what is checked here is the contract between them: the
store's segment ids mean what the attention kernels take them to mean, and the fused loss equals the
named-array loss on the store's real targets.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import haliax_lite as hax
from meltemi import kernels
from meltemi.datastore import BatchLoader, SequenceDataset, ShuffledDataset, TokenStore, build_store, corpora

SEQ_LEN = 64
BATCH = 4
VOCAB = 384


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("stack")
    # Small modules only, so that each row of SEQ_LEN tokens holds several documents.
    files = sorted(corpora.python_stdlib(), key=lambda p: (os.path.getsize(p), p))[:40]
    tokenizer = corpora.train_tokenizer(files, vocab_size=VOCAB, out=root / "tokenizer.json")
    build_store(files, tokenizer, root / "store", progress=False)
    return TokenStore.open(root / "store", tokenizer=tokenizer)


@pytest.fixture(scope="module")
def batch(store):
    dataset = ShuffledDataset(SequenceDataset(store, seq_len=SEQ_LEN), key=7)
    return BatchLoader(dataset, batch_size=BATCH, process_index=0, process_count=1).batch(step=3)


def test_batches_hold_several_documents_per_row(batch):
    assert batch["input_ids"].shape == (BATCH, SEQ_LEN)
    assert max(len(np.unique(row)) for row in batch["segment_ids"]) > 1


def test_a_fresh_reader_gives_the_same_bits(store, batch):
    reopened = TokenStore.open(store.path)
    dataset = ShuffledDataset(SequenceDataset(reopened, seq_len=SEQ_LEN), key=7)
    again = BatchLoader(dataset, batch_size=BATCH, process_index=1, process_count=2).batch(step=3)
    for name in ("input_ids", "targets", "segment_ids"):
        np.testing.assert_array_equal(again[name], batch[name][2:])


def _named_attention(q, k, v, segment_ids):
    """haliax-lite's attention with a causal, same-document mask built from the store's segment ids."""
    Batch, Pos, Heads, HeadDim = hax.make_axes(
        batch=q.shape[0], position=q.shape[1], heads=q.shape[2], head=q.shape[3]
    )
    KPos = Pos.alias("key_position")
    query = hax.named(q, (Batch, Pos, Heads, HeadDim))
    key = hax.named(k, (Batch, KPos, Heads, HeadDim))
    value = hax.named(v, (Batch, KPos, Heads, HeadDim))
    segments = hax.named(segment_ids, (Batch, Pos))
    same_document = segments.broadcast_axis(KPos) == segments.rename({"position": "key_position"})
    mask = hax.nn.attention.causal_mask(Pos, KPos) & same_document
    out = hax.nn.attention.dot_product_attention(KPos, HeadDim, query, key, value, mask=mask)
    return out.rearrange((Batch, Pos, Heads, HeadDim)).array


@pytest.mark.parametrize("implementation", ["reference", "xla"])
def test_kernel_attention_reads_segment_ids_as_the_store_writes_them(batch, implementation):
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(key, (BATCH, SEQ_LEN, 2, 16)) for key in keys)
    segment_ids = jnp.asarray(batch["segment_ids"], dtype=jnp.int32)
    fused = kernels.attention(q, k, v, causal=True, segment_ids=segment_ids, implementation=implementation)
    np.testing.assert_allclose(fused, _named_attention(q, k, v, segment_ids), rtol=1e-5, atol=1e-5)


def test_fused_loss_equals_the_named_loss_on_store_targets(batch):
    Embed, Vocab, Tokens = (
        hax.Axis("embed", 32),
        hax.Axis("vocab", VOCAB),
        hax.Axis("tokens", BATCH * SEQ_LEN),
    )
    embedding = hax.nn.Embedding.init(Vocab, Embed, key=jax.random.key(1))
    tokens = hax.named(jnp.asarray(batch["input_ids"].reshape(-1), jnp.int32), (Tokens,))
    targets = hax.named(jnp.asarray(batch["targets"].reshape(-1), jnp.int32), (Tokens,))
    hidden = embedding.embed(tokens)

    def named_loss(weight):
        logits = hax.dot(hidden, weight, axis=Embed)
        return hax.nn.cross_entropy_loss(logits, Vocab, hax.nn.one_hot(targets, Vocab)).scalar()

    def fused_loss(weight):
        loss, _ = kernels.cross_entropy(
            hidden.array,
            weight.rearrange((Embed, Vocab)).array,
            targets.array,
            implementation="xla",
            block_size=128,
        )
        return loss

    weight = embedding.weight
    np.testing.assert_allclose(fused_loss(weight), named_loss(weight), rtol=1e-5)
    named_grad = jax.grad(named_loss)(weight).rearrange((Vocab, Embed)).array
    fused_grad = jax.grad(fused_loss)(weight).rearrange((Vocab, Embed)).array
    np.testing.assert_allclose(fused_grad, named_grad, rtol=1e-4, atol=1e-6)
