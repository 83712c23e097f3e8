"""Argument checks shared by the public entry points: clear errors for what a caller can get wrong.

Shape and dtype errors are raised at trace time. Non-finite values are raised at once for concrete
arrays; inside ``jit`` they are reported by a host callback that fails the computation with the same
message, so a NaN never flows silently into a loss. JAX turns an exception raised in a callback into a
``jax.errors.JaxRuntimeError`` (whose message ends with ``NonFiniteError: <function>: ...``) and logs
"jax.debug.callback failed" with the callback's traceback on stderr; there is no public way to re-raise
the original type from inside a compiled computation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from meltemi.kernels.errors import BadArgumentsError, NonFiniteError


def require(condition: bool, where: str, message: str) -> None:
    """Raise ``BadArgumentsError("where: message")`` unless ``condition`` holds."""
    if not condition:
        raise BadArgumentsError(f"{where}: {message}")


def require_floating(where: str, **arrays: jax.Array) -> None:
    for name, array in arrays.items():
        require(
            jnp.issubdtype(array.dtype, jnp.floating),
            where,
            f"{name} must be a floating-point array, got dtype {array.dtype}",
        )


def require_integer(where: str, name: str, array: jax.Array) -> None:
    require(
        jnp.issubdtype(array.dtype, jnp.integer), where, f"{name} must be integers, got dtype {array.dtype}"
    )


def _raise_if_nonfinite(where: str, names: tuple[str, ...], bad: jax.Array) -> None:
    offenders = [name for name, is_bad in zip(names, bad.tolist(), strict=True) if is_bad]
    if offenders:
        raise NonFiniteError(f"{where}: NaN or infinite values in {', '.join(offenders)}")


def report_nonfinite(where: str, **arrays: jax.Array) -> None:
    """Fail loudly, naming the argument, when any of ``arrays`` holds NaN or +-inf.

    >>> import jax.numpy as jnp
    >>> report_nonfinite("demo", x=jnp.ones(3))
    """
    names = tuple(arrays)
    bad = jnp.stack([~jnp.all(jnp.isfinite(a)) for a in arrays.values()])
    if isinstance(bad, jax.core.Tracer):
        jax.debug.callback(lambda b: _raise_if_nonfinite(where, names, b), bad)
    else:
        _raise_if_nonfinite(where, names, bad)
