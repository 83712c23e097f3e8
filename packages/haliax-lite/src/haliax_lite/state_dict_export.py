"""Haliax's state-dict export: host (NumPy) copies, safetensors files, and PyTorch's flat layouts.

A module with several input or output axes (a ``Linear`` from ``(Heads, HeadSize)``) is stored by PyTorch
with each group flattened into one dimension; ``flatten_for_export`` (see
:class:`~haliax_lite.serialization.ModuleWithStateDictSerialization`) does that, and
:func:`to_torch_compatible_state_dict` / :func:`from_torch_compatible_state_dict` apply it on the way out
and undo it on the way in.

>>> import jax, haliax_lite as hax
>>> Heads, Size, Embed = hax.Axis("heads", 2), hax.Axis("head_size", 3), hax.Axis("embed", 4)
>>> q = hax.nn.Linear.init(Embed, (Heads, Size), key=jax.random.PRNGKey(0))
>>> to_torch_compatible_state_dict({"q": q})["q.weight"].shape  # (heads * head_size, embed)
(6, 4)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .core import NamedArray, is_named_array
from .serialization import ModuleWithStateDictSerialization, StateDict, from_state_dict, to_state_dict
from .tree_util import scan_aware_tree_map

__all__ = [
    "flatten_modules_for_export",
    "from_torch_compatible_state_dict",
    "load_state_dict",
    "save_state_dict",
    "to_numpy_state_dict",
    "to_torch_compatible_state_dict",
    "unflatten_modules_from_export",
]

T = TypeVar("T")


def _is_module(x) -> bool:
    return isinstance(x, ModuleWithStateDictSerialization)


def flatten_modules_for_export(tree: T) -> T:
    """Every self-serializing module in ``tree`` (blocks of a ``Stacked`` one by one) replaced by its
    ``flatten_for_export()``, children included."""

    def flatten(module):
        if not _is_module(module):
            return module
        flat = module.flatten_for_export()
        return scan_aware_tree_map(flatten, flat, is_leaf=lambda x: x is not flat and _is_module(x))

    return scan_aware_tree_map(flatten, tree, is_leaf=_is_module)


def unflatten_modules_from_export(tree: T, template: T) -> T:
    """Undo :func:`flatten_modules_for_export`, given a ``template`` with the named layout."""

    def unflatten(module, like):
        if not _is_module(module):
            return module
        restored = module.unflatten_from_export(like)
        return scan_aware_tree_map(
            unflatten, restored, like, is_leaf=lambda x: x is not restored and _is_module(x)
        )

    return scan_aware_tree_map(unflatten, tree, template, is_leaf=_is_module)


def _to_host(x):
    if is_named_array(x):
        return NamedArray(_to_host(x.array), x.axes)
    if isinstance(x, jax.Array):
        if not x.is_fully_addressable:  # spread over several hosts: gather a full copy on each
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(jax.device_get(x))
    return x


def to_numpy_state_dict(model, prefix: str | None = None) -> StateDict:
    """:func:`~haliax_lite.serialization.to_state_dict` with every array copied to host memory as NumPy.

    >>> import haliax_lite as hax
    >>> type(to_numpy_state_dict({"w": hax.ones(hax.Axis("a", 2))})["w"]).__name__
    'ndarray'
    """
    return {name: _to_host(value) for name, value in to_state_dict(model, prefix).items()}


def _is_array_like(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def to_torch_compatible_state_dict(
    tree, *, flatten: bool = True, prefix: str | None = None, filter: Callable[[Any], bool] = _is_array_like
) -> StateDict:
    """The NumPy state dict PyTorch expects: only leaves passing ``filter``, modules flattened for export."""
    tree = eqx.filter(tree, filter, is_leaf=is_named_array)
    if flatten:
        tree = flatten_modules_for_export(tree)
    return to_numpy_state_dict(tree, prefix)


def from_torch_compatible_state_dict(
    template: T, state_dict: Mapping[str, Any], *, unflatten: bool = True, prefix: str | None = None
) -> T:
    """``template`` filled from a PyTorch-layout state dict (the inverse of
    :func:`to_torch_compatible_state_dict`); the template may be abstract (``ShapeDtypeStruct`` leaves)."""
    if not unflatten:
        return from_state_dict(template, state_dict, prefix)
    concrete = jax.tree_util.tree_map(
        lambda x: jnp.zeros(x.shape, x.dtype) if isinstance(x, jax.ShapeDtypeStruct) else x, template
    )
    flat = from_state_dict(flatten_modules_for_export(concrete), state_dict, prefix)
    return unflatten_modules_from_export(flat, concrete)


def _safetensors_numpy():
    try:
        import safetensors.numpy
    except ImportError as e:  # an optional dependency, as in Haliax
        raise ImportError(
            "save_state_dict/load_state_dict need the safetensors package: pip install safetensors"
        ) from e
    return safetensors.numpy


def save_state_dict(state_dict: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write ``state_dict`` (arrays copied to host) to a safetensors file; only process 0 writes.

    ``None`` entries are skipped; the file says ``format: pt``, as Hugging Face expects.
    """
    arrays = {k: np.asarray(_to_host(v)) for k, v in state_dict.items() if v is not None}
    if jax.process_index() == 0:
        _safetensors_numpy().save_file(arrays, os.fspath(path), metadata={"format": "pt"})


def load_state_dict(path: str | os.PathLike) -> StateDict:
    """The arrays of a safetensors file, by name, as NumPy arrays."""
    return dict(_safetensors_numpy().load_file(os.fspath(path)))
