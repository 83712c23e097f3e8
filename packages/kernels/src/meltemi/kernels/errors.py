"""The errors a caller of the kernels can cause, each saying what and where (the function, the argument).

Every one is a ``KernelError``, itself a ``ValueError`` (what the kernels raised before they had their own),
so ``except ValueError`` still catches them; a caller that wants one mistake catches its subclass.

>>> import jax.numpy as jnp
>>> from meltemi.kernels import attention
>>> q = jnp.zeros((1, 8, 2, 64), jnp.float32)
>>> try:
...     attention(q, q, q, implementation="cudnn")
... except UnsupportedError as refusal:
...     print(refusal.implementation, "|", refusal.reason)
cudnn | cuDNN attention needs bfloat16 or float16, got float32
"""

from __future__ import annotations

import functools


class KernelError(ValueError):
    """Base class: every error the kernels raise on purpose is one of these."""


class BadArgumentsError(KernelError):
    """An argument's shape, dtype or value breaks the function's contract (the message names both)."""


class UnknownImplementationError(KernelError):
    """``implementation`` is not one the function has (the message lists those it has)."""


class BadTilingError(KernelError):
    """A kernel config's tile sizes, warps or stages are not ones the kernel can use."""


class UnsupportedError(KernelError):
    """The implementation asked for cannot run these arguments on this backend: ``reason`` says why (what
    ``attention_unsupported_reason`` returns), ``implementation`` names it; ``auto`` picks one that can."""

    def __init__(self, message: str, *, implementation: str, reason: str):
        super().__init__(message)
        self.implementation = implementation
        self.reason = reason

    def __reduce__(self):  # keyword arguments survive pickling (a worker process, a Ray task)
        where = {"implementation": self.implementation, "reason": self.reason}
        return functools.partial(type(self), **where), self.args


class LabelOutOfRangeError(KernelError):
    """A cross-entropy label lies outside ``[0, vocab)`` (the message names the first one's position)."""


class NonFiniteError(KernelError, FloatingPointError):
    """An input holds NaN or infinite values (the message names the argument); also a ``FloatingPointError``.

    Inside ``jit`` the check runs as a host callback and JAX raises ``jax.errors.JaxRuntimeError`` instead,
    its message ending with this one (see the README).
    """
