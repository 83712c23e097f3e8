"""NamedArray: a JAX array whose dimensions are named by :class:`~haliax_lite.axis.Axis` objects.

It is a pytree whose only leaf is the array; the axes are static metadata, so NamedArrays pass through
``jax.jit``, ``jax.grad`` and Equinox unchanged. Most methods forward to the function of the same name in
``haliax_lite`` (``x.sum("batch")`` is ``hax.sum(x, "batch")``); :mod:`.named_array_methods` holds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from .axes_spec import NamedArrayAxesSpec, parse_axes_spec
from .axis import Axis, AxisSelection, AxisSelector, _check_no_duplicates, axis_name, ensure_tuple

if TYPE_CHECKING:  # the methods are installed by named_array_methods, which imports this module
    from .named_array_methods import NamedArrayMethods as _Methods
else:
    _Methods = object

__all__ = ["NamedArray", "are_shape_checks_enabled", "enable_shape_checks", "is_named_array", "named"]

_shape_checks = True


def enable_shape_checks(enabled: bool) -> bool:
    """Turn the check that an array's shape matches its axes on or off; returns the previous setting.

    The check runs when a NamedArray is built from an array with a shape (not inside pytree
    unflattening); turning it off saves a little Python time in tight loops, at the cost of late errors.

    >>> previous = enable_shape_checks(False)
    >>> are_shape_checks_enabled()
    False
    >>> _ = enable_shape_checks(previous)
    """
    global _shape_checks
    previous, _shape_checks = _shape_checks, bool(enabled)
    return previous


def are_shape_checks_enabled() -> bool:
    """Whether NamedArray checks that its array's shape matches its axes (see :func:`enable_shape_checks`)."""
    return _shape_checks


class _NamedArrayAnnotation(type):
    """``NamedArray["batch embed"]``: a type whose isinstance check also checks the axis names."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, NamedArray) and obj.matches_axes(cls.axes_spec)

    def __repr__(cls) -> str:
        return repr(cls.axes_spec)


@jax.tree_util.register_pytree_with_keys_class
class NamedArray(_Methods):
    """An array with named axes.

    >>> import jax.numpy as jnp
    >>> x = NamedArray(jnp.ones((2, 3)), (Axis("batch", 2), Axis("embed", 3)))
    >>> x.shape, x.sum("embed").axes
    ({'batch': 2, 'embed': 3}, (Axis(name='batch', size=2),))
    """

    __slots__ = ("array", "axes")
    array: jax.Array
    axes: tuple[Axis, ...]

    def __init__(self, array, axes: Sequence[Axis] | Axis):
        axes = ensure_tuple(axes)
        for a in axes:
            if not isinstance(a, Axis):
                raise TypeError(f"NamedArray axes must be Axis objects, got {a!r}; use hax.named for names")
        _check_no_duplicates(axes)
        shape = getattr(array, "shape", None) if _shape_checks else None
        if shape is not None and tuple(shape) != tuple(a.size for a in axes):
            raise ValueError(f"Array shape {tuple(shape)} does not match axes {axes}")
        object.__setattr__(self, "array", array)
        object.__setattr__(self, "axes", axes)

    def __setattr__(self, name, value):
        raise AttributeError("NamedArray is immutable")

    def __class_getitem__(cls, spec: NamedArrayAxesSpec):
        axes_spec = parse_axes_spec(spec)
        return _NamedArrayAnnotation(repr(axes_spec), (), {"axes_spec": axes_spec})

    def matches_axes(self, spec: NamedArrayAxesSpec) -> bool:
        """Whether this array's axis names (and dtype) fit an axis spec (see :mod:`.haxtyping`).

        >>> NamedArray(jnp.ones((2, 3)), (Axis("batch", 2), Axis("embed", 3))).matches_axes("batch ...")
        True
        """
        return parse_axes_spec(spec).matches([a.name for a in self.axes], getattr(self.array, "dtype", None))

    # pytree protocol: the array is the only child, the axes are static
    def tree_flatten_with_keys(self):
        return ((jax.tree_util.GetAttrKey("array"), self.array),), self.axes

    def tree_flatten(self):
        return (self.array,), self.axes

    @classmethod
    def tree_unflatten(cls, axes, children):
        obj = object.__new__(cls)
        object.__setattr__(obj, "array", children[0])
        object.__setattr__(obj, "axes", axes)
        return obj

    # shape information
    @property
    def shape(self) -> dict[str, int]:
        """``{name: size}`` in axis order."""
        return {a.name: a.size for a in self.axes}

    @property
    def dtype(self):
        return self.array.dtype

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def size(self) -> int:
        return int(np.prod([a.size for a in self.axes], dtype=np.int64))

    def _lookup_indices(self, axis: AxisSelection):
        """Position of an axis (None if absent), or a tuple of positions for a selection."""
        names = [a.name for a in self.axes]
        if isinstance(axis, (str, Axis)):
            name = axis_name(axis)
            return names.index(name) if name in names else None
        return tuple(self._lookup_indices(a) for a in ensure_tuple(axis))

    def axis_indices(self, axis: AxisSelection) -> int | None | tuple[int | None, ...]:
        """Position of an axis, or a tuple of positions for a selection; None where an axis is absent (as
        Haliax). An Axis whose name is present with another size is a ValueError.

        >>> x = NamedArray(jnp.ones((2, 3)), (Axis("batch", 2), Axis("embed", 3)))
        >>> x.axis_indices("embed"), x.axis_indices(("embed", "missing")), x.axis_indices("missing") is None
        (1, (1, None), True)
        """
        if isinstance(axis, (str, Axis)):
            index = self._lookup_indices(axis)
            if index is not None and isinstance(axis, Axis) and axis.size != self.axes[index].size:
                raise ValueError(
                    f"Axis {axis} does not match {self.axes[index]} of array with axes {self.axes}"
                )
            return index
        return tuple(self.axis_indices(a) for a in ensure_tuple(axis))

    def require_axis_indices(self, axis: AxisSelection) -> int | tuple[int, ...]:
        """Like :meth:`axis_indices`, but an absent axis is a ValueError naming the array's axes."""
        if isinstance(axis, (str, Axis)):
            return self._index_of(axis)
        return tuple(self._index_of(a) for a in ensure_tuple(axis))

    def _index_of(self, axis: AxisSelector) -> int:
        index = self._lookup_indices(axis)
        if index is None:
            raise ValueError(f"Axis {axis_name(axis)!r} not found in array with axes {self.axes}")
        if isinstance(axis, Axis) and axis.size != self.axes[index].size:
            raise ValueError(f"Axis {axis} does not match {self.axes[index]} of array with axes {self.axes}")
        return index

    def resolve_axis(self, axis: AxisSelection) -> Axis | tuple[Axis, ...]:
        """The Axis object(s) of this array for the given name(s)."""
        if isinstance(axis, (str, Axis)):
            return self.axes[self._index_of(axis)]
        return tuple(self.axes[self._index_of(a)] for a in ensure_tuple(axis))

    def axis_size(self, axis: AxisSelection) -> int:
        """Size of an axis, or the product of sizes of a selection."""
        axes = self.resolve_axis(axis)
        return axes.size if isinstance(axes, Axis) else int(np.prod([a.size for a in axes]))

    def has_axis(self, axis: AxisSelection) -> bool:
        return all(self._lookup_indices(a) is not None for a in ensure_tuple(axis))

    # conversions
    def scalar(self) -> jax.Array:
        """The underlying 0-d array of a NamedArray with no axes."""
        if self.axes:
            raise ValueError(f"scalar() needs an array with no axes, this one has {self.axes}")
        return self.array

    def item(self):
        return self.array.item()

    def astype(self, dtype) -> NamedArray:
        return NamedArray(self.array.astype(dtype), self.axes)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.array, dtype=dtype)

    def __bool__(self) -> bool:
        return bool(self.array)

    def __repr__(self) -> str:
        return f"NamedArray(axes={self.axes}, array={self.array!r})"

    def __iter__(self):
        raise TypeError("Iterating a NamedArray is ambiguous; use hax.unbind(x, axis) to split along an axis")

    __hash__ = None  # arrays are not hashable; == is elementwise


def is_named_array(x: Any) -> bool:
    """Whether ``x`` is a NamedArray (useful as ``is_leaf`` in tree maps)."""
    return isinstance(x, NamedArray)


def named(a, axis: AxisSelection) -> NamedArray:
    """Name the dimensions of a positional array; sizes of bare names are read off the array.

    >>> named(jnp.zeros((2, 3)), ("batch", "embed")).shape
    {'batch': 2, 'embed': 3}
    """
    a = jnp.asarray(a)
    axes = ensure_tuple(axis)
    if len(axes) != a.ndim:
        raise ValueError(f"named: array of shape {a.shape} has {a.ndim} dimensions but got axes {axes}")
    resolved = tuple(Axis(ax, n) if isinstance(ax, str) else ax for ax, n in zip(axes, a.shape, strict=True))
    return NamedArray(a, resolved)
