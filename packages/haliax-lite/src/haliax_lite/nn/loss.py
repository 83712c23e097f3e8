"""Losses on named logits: cross-entropy (with the log-normaliser for a z-loss), binary cross-entropy.

>>> import jax, haliax_lite as hax
>>> Batch, Vocab = hax.Axis("batch", 2), hax.Axis("vocab", 5)
>>> logits = hax.random.normal(jax.random.PRNGKey(0), (Batch, Vocab))
>>> targets = hax.nn.one_hot(hax.named([1, 3], Batch), Vocab)
>>> loss, log_z = hax.nn.cross_entropy_loss_and_log_normalizers(logits, Vocab, targets)
>>> z_loss = hax.mean(hax.square(log_z))  # PaLM's auxiliary term keeps log Z near 0
>>> loss.axes
(Axis(name='batch', size=2),)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import jax.numpy as jnp
from jax import nn as jnn

from haliax_lite import _namespace as hax

from .activations import log_sigmoid
from .normalization import logsumexp


class _Unspecified:
    def __repr__(self) -> str:
        return "UNSPECIFIED"


UNSPECIFIED = _Unspecified()
"""Default ``reduction``: the mean (``None`` instead means "do not reduce")."""


def one_hot(x: hax.NamedArray | int, class_axis: hax.Axis, *, dtype=None) -> hax.NamedArray:
    """``x``'s integers as one-hot vectors along ``class_axis`` (appended after ``x``'s axes)."""
    if isinstance(x, hax.NamedArray):
        return hax.NamedArray(jnn.one_hot(x.array, class_axis.size, dtype=dtype), x.axes + (class_axis,))
    if not -class_axis.size <= x < class_axis.size:
        raise ValueError(f"one_hot index {x} is out of range for axis {class_axis}")
    return hax.NamedArray(jnn.one_hot(x % class_axis.size, class_axis.size, dtype=dtype), (class_axis,))


def cross_entropy_loss_and_log_normalizers(
    pred_y: hax.NamedArray, Label: hax.AxisSelector, target_y: hax.NamedArray
) -> tuple[hax.NamedArray, hax.NamedArray]:
    """Per-position cross-entropy of ``target_y`` (a distribution over ``Label``) under logits ``pred_y``,
    and the log-normalisers ``logsumexp(pred_y, Label)`` that a z-loss penalises."""
    log_normalizers = logsumexp(pred_y, Label)
    loss = hax.dot(target_y, log_normalizers - pred_y, axis=Label)
    return loss, log_normalizers


def cross_entropy_loss(
    logits: hax.NamedArray,
    Label: hax.AxisSelector,
    targets: hax.NamedArray,
    reduction: Callable | None | _Unspecified = UNSPECIFIED,
    where: hax.NamedArray | None = None,
    reduction_axis: hax.AxisSelection | None = None,
) -> hax.NamedArray:
    """Cross-entropy of ``targets`` (e.g. ``one_hot`` labels) under ``logits``, reduced by ``reduction``.

    ``reduction`` defaults to ``hax.mean`` over ``reduction_axis`` (all axes when ``None``), counting only
    the positions where ``where`` is true; ``reduction=None`` returns per-position losses (zeroed outside
    ``where``).
    """
    loss, _ = cross_entropy_loss_and_log_normalizers(logits, Label, targets)
    if not jnp.issubdtype(targets.dtype, jnp.floating):
        warnings.warn(
            f"targets have dtype {targets.dtype}, not a floating type; pass one_hot(...) targets",
            stacklevel=2,
        )
    return reduce_loss(loss, reduction, reduction_axis, where)


def binary_cross_entropy_loss(
    logits: hax.NamedArray,
    targets: hax.NamedArray,
    reduction: Callable | None | _Unspecified = UNSPECIFIED,
    where: hax.NamedArray | None = None,
    reduction_axis: hax.AxisSelection | None = None,
) -> hax.NamedArray:
    """Elementwise binary cross-entropy of ``targets`` in [0, 1] under ``logits``, reduced as above."""
    targets = targets.astype(logits.dtype)
    loss = -targets * log_sigmoid(logits) - (1.0 - targets) * log_sigmoid(-logits)
    return reduce_loss(loss, reduction, reduction_axis, where)


def reduce_loss(
    arr: hax.NamedArray,
    reduction: Callable | None | _Unspecified = UNSPECIFIED,
    reduction_axis: hax.AxisSelection | None = None,
    where: hax.NamedArray | None = None,
) -> hax.NamedArray:
    """Reduce ``arr`` with ``reduction(arr, axis=reduction_axis, where=where)``; mean when unspecified.

    ``reduction=None`` (or ``reduction_axis=()``) leaves it unreduced, zeroed where ``where`` is false.
    """
    if reduction is not None and reduction_axis != ():
        if reduction is UNSPECIFIED:
            reduction = hax.mean
        return reduction(arr, axis=reduction_axis, where=where)
    if where is not None:
        return hax.where(where, arr, 0)
    return arr
