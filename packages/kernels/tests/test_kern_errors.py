"""Each mistake a caller can make raises its own subclass of ``KernelError`` (a ``ValueError``)."""

import pickle

import jax.numpy as jnp
import pytest

import meltemi.kernels as kernels
from meltemi.kernels import (
    BadArgumentsError,
    BadTilingError,
    KernelError,
    LabelOutOfRangeError,
    MaskSpec,
    NonFiniteError,
    PallasAttentionConfig,
    PallasCrossEntropyConfig,
    UnknownImplementationError,
    UnsupportedError,
    attention,
    attention_unsupported_reason,
    cross_entropy,
)
from meltemi.kernels.attention_mosaic import MosaicAttentionConfig, mosaic_attention

Q = jnp.ones((1, 8, 2, 16))
KV = jnp.ones((1, 8, 1, 16))
HIDDEN, UNEMBEDDING, LABELS = jnp.ones((4, 8)), jnp.ones((8, 30)), jnp.array([1, 2, 3, 4])


def test_every_error_class_is_a_kernel_error_and_a_value_error_and_exported():
    classes = [kernels.__dict__[name] for name in kernels.__all__ if name.endswith("Error")]
    assert {c.__name__ for c in classes} == {
        "KernelError", "BadArgumentsError", "UnknownImplementationError", "BadTilingError",
        "UnsupportedError", "LabelOutOfRangeError", "NonFiniteError",
    }  # fmt: skip
    assert all(issubclass(c, KernelError) and issubclass(c, ValueError) for c in classes)
    assert issubclass(NonFiniteError, FloatingPointError)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: attention(Q, KV, KV.astype(jnp.bfloat16)), BadArgumentsError, "q, k, v must share"),
        (lambda: attention(Q, KV[..., :8], KV), BadArgumentsError, "^attention: "),
        (lambda: MaskSpec(True, 0, 1.0), BadArgumentsError, "^MaskSpec: sliding_window must be"),
        (lambda: attention(Q, KV, KV, implementation="flash"), UnknownImplementationError, "must be one of"),
        (lambda: cross_entropy(HIDDEN, UNEMBEDDING, LABELS, implementation="fused"),
         UnknownImplementationError, "^cross_entropy: implementation must be one of"),
        (lambda: cross_entropy(HIDDEN, UNEMBEDDING, LABELS.astype(jnp.float32)), BadArgumentsError,
         "^cross_entropy: labels must be integers"),
        (lambda: PallasAttentionConfig(block_q=48), BadTilingError, "block_q must be a power of two"),
        (lambda: PallasCrossEntropyConfig(num_warps=3), BadTilingError, "num_warps must be a power of two"),
        (lambda: MosaicAttentionConfig(block_k=96), BadTilingError, "block_k must be a positive multiple"),
        (lambda: MosaicAttentionConfig(stages=1), BadTilingError, "stages must be an int >= 2"),
        (lambda: cross_entropy(HIDDEN, UNEMBEDDING, LABELS.at[2].set(30)), LabelOutOfRangeError,
         r"labels\[2\] is 30 \(the first one outside\)"),
        (lambda: attention(Q.at[0, 0, 0, 0].set(jnp.inf), KV, KV), NonFiniteError, "in q$"),
    ],
)  # fmt: skip
def test_each_mistake_raises_its_own_class(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_an_unsupported_implementation_says_which_and_why_and_survives_pickling():
    """The reason is what ``attention_unsupported_reason`` answers, so a caller can word its own remedy."""
    with pytest.raises(UnsupportedError) as caught:
        attention(Q, KV, KV, implementation="cudnn")
    refusal = caught.value
    assert refusal.implementation == "cudnn"
    assert refusal.reason == attention_unsupported_reason("cudnn", Q)
    assert str(refusal) == (
        f"attention: implementation='cudnn' cannot run these arguments: {refusal.reason}; 'auto' picks one "
        "that can"
    )
    copy = pickle.loads(pickle.dumps(refusal))
    assert (type(copy), str(copy), copy.implementation, copy.reason) == (
        UnsupportedError, str(refusal), "cudnn", refusal.reason
    )  # fmt: skip


def test_the_mosaic_kernel_called_directly_refuses_with_the_same_class():
    with pytest.raises(
        UnsupportedError, match="^mosaic_attention: the Mosaic GPU kernel needs bfloat16"
    ) as caught:
        mosaic_attention(Q, KV, KV, None, MaskSpec(True, None, 0.25))
    assert caught.value.implementation == "mosaic"
    assert caught.value.reason == "the Mosaic GPU kernel needs bfloat16 or float16, got float32"
