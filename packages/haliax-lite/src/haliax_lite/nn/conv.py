"""``Conv`` and ``ConvTranspose``: N-dimensional convolutions over named spatial axes (Haliax's layers).

``Spatial`` names the axes the kernel slides over, ``In`` and ``Out`` are the channel axes, and every other
axis of the input is a batch axis, in any order. The output keeps the input's axis order, with ``In``
replaced by ``Out`` and the spatial axes resized. The weight is ``(Out, In / groups, *kernel)``, its kernel
axes named after the spatial axes, as in Haliax (and PyTorch), so Haliax checkpoints load unchanged.

>>> import jax, haliax_lite as hax
>>> Batch, Height, Width = hax.Axis("batch", 2), hax.Axis("height", 8), hax.Axis("width", 8)
>>> Rgb, Features = hax.Axis("rgb", 3), hax.Axis("features", 4)
>>> conv = hax.nn.Conv.init((Height, Width), Rgb, Features, 3, stride=2, padding=1, key=jax.random.PRNGKey(0))
>>> conv(hax.ones((Height, Batch, Width, Rgb))).shape
{'height': 4, 'batch': 2, 'width': 4, 'features': 4}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp

from haliax_lite import _namespace as hax

from ._inputs import check_layer_input

__all__ = ["Conv", "ConvTranspose"]

Padding = int | Sequence[int] | Sequence[tuple[int, int]]


class Conv(eqx.Module):
    """A convolution over the ``Spatial`` axes from ``In`` channels to ``Out`` channels.

    Each spatial axis of size ``L`` becomes ``(L + low + high - dilation * (kernel - 1) - 1) // stride + 1``
    (``low``/``high`` its padding). ``groups`` splits the channels into that many independent convolutions.
    """

    Spatial: tuple[hax.AxisSelector, ...] = eqx.field(static=True)
    In: hax.Axis = eqx.field(static=True)
    Out: hax.Axis = eqx.field(static=True)
    weight: hax.NamedArray
    bias: hax.NamedArray | None
    kernel_size: tuple[int, ...] = eqx.field(static=True)
    stride: tuple[int, ...] = eqx.field(static=True)
    padding: tuple[tuple[int, int], ...] = eqx.field(static=True)
    dilation: tuple[int, ...] = eqx.field(static=True)
    groups: int = eqx.field(static=True)

    @staticmethod
    def init(
        Spatial: hax.AxisSelection,
        In: hax.Axis,
        Out: hax.Axis,
        kernel_size: int | Sequence[int],
        *,
        stride: int | Sequence[int] = 1,
        padding: Padding = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        use_bias: bool = True,
        key: jax.Array,
    ) -> Conv:
        """A layer with weight and bias uniform in ``±1 / sqrt(prod(kernel_size) * In.size / groups)``.

        ``kernel_size``, ``stride`` and ``dilation`` are one int for every spatial axis or one per axis;
        ``padding`` is an int, one int per axis, or one ``(low, high)`` pair per axis.
        """
        Spatial = _spatial_axes(Spatial, "Conv.init")
        n = len(Spatial)
        kernel_size = _per_axis(kernel_size, n, "kernel_size", "Conv.init")
        stride = _per_axis(stride, n, "stride", "Conv.init")
        dilation = _per_axis(dilation, n, "dilation", "Conv.init")
        padding = _padding_pairs(padding, n, "Conv.init")
        weight, bias = _init_params(key, Spatial, In, Out, kernel_size, groups, use_bias, "Conv.init")
        return Conv(Spatial, In, Out, weight, bias, kernel_size, stride, padding, dilation, groups)

    def __call__(self, inputs: hax.NamedArray, *, key: jax.Array | None = None) -> hax.NamedArray:
        """Convolve ``inputs``; ``key`` is accepted (and unused) so layers can be called uniformly."""
        del key

        def conv(x: jax.Array, w: jax.Array, dims: jax.lax.ConvDimensionNumbers) -> jax.Array:
            return jax.lax.conv_general_dilated(
                x,
                w,
                window_strides=self.stride,
                padding=self.padding,
                rhs_dilation=self.dilation,
                feature_group_count=self.groups,
                dimension_numbers=dims,
            )

        _check_input(self, inputs, "Conv")
        sizes = [
            (inputs.shape[hax.axis_name(ax)] + lo + hi - d * (k - 1) - 1) // s + 1
            for ax, (lo, hi), d, k, s in zip(
                self.Spatial, self.padding, self.dilation, self.kernel_size, self.stride, strict=True
            )
        ]
        return _convolve(self, inputs, conv, sizes, "Conv")


class ConvTranspose(eqx.Module):
    """A transposed ("fractionally strided") convolution over the ``Spatial`` axes, from ``In`` to ``Out``.

    Each spatial axis of size ``L`` becomes
    ``(L - 1) * stride - low - high + dilation * (kernel - 1) + output_padding + 1``: the input is dilated by
    ``stride`` and convolved with the kernel as stored (not flipped), as in Haliax and Equinox.
    ``output_padding`` adds rows at the high end, to pick among the input sizes a strided ``Conv`` maps to
    the same output size.

    >>> import jax, haliax_lite as hax
    >>> Time, In, Out = hax.Axis("time", 5), hax.Axis("in", 2), hax.Axis("out", 3)
    >>> up = hax.nn.ConvTranspose.init(Time, In, Out, 4, stride=2, padding=1, key=jax.random.PRNGKey(0))
    >>> up(hax.ones((Time, In))).shape
    {'time': 10, 'out': 3}
    """

    Spatial: tuple[hax.AxisSelector, ...] = eqx.field(static=True)
    In: hax.Axis = eqx.field(static=True)
    Out: hax.Axis = eqx.field(static=True)
    weight: hax.NamedArray
    bias: hax.NamedArray | None
    kernel_size: tuple[int, ...] = eqx.field(static=True)
    stride: tuple[int, ...] = eqx.field(static=True)
    padding: tuple[tuple[int, int], ...] = eqx.field(static=True)
    output_padding: tuple[int, ...] = eqx.field(static=True)
    dilation: tuple[int, ...] = eqx.field(static=True)
    groups: int = eqx.field(static=True)

    @staticmethod
    def init(
        Spatial: hax.AxisSelection,
        In: hax.Axis,
        Out: hax.Axis,
        kernel_size: int | Sequence[int],
        *,
        stride: int | Sequence[int] = 1,
        padding: Padding = 0,
        output_padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        use_bias: bool = True,
        key: jax.Array,
    ) -> ConvTranspose:
        """A layer initialised as :meth:`Conv.init` does; ``output_padding`` is one int or one per axis."""
        Spatial = _spatial_axes(Spatial, "ConvTranspose.init")
        n = len(Spatial)
        kernel_size = _per_axis(kernel_size, n, "kernel_size", "ConvTranspose.init")
        stride = _per_axis(stride, n, "stride", "ConvTranspose.init")
        dilation = _per_axis(dilation, n, "dilation", "ConvTranspose.init")
        output_padding = _per_axis(output_padding, n, "output_padding", "ConvTranspose.init", minimum=0)
        padding = _padding_pairs(padding, n, "ConvTranspose.init")
        weight, bias = _init_params(
            key, Spatial, In, Out, kernel_size, groups, use_bias, "ConvTranspose.init"
        )
        return ConvTranspose(
            Spatial, In, Out, weight, bias, kernel_size, stride, padding, output_padding, dilation, groups
        )

    def __call__(self, inputs: hax.NamedArray, *, key: jax.Array | None = None) -> hax.NamedArray:
        """Apply the transposed convolution; ``key`` is accepted (and unused)."""
        del key
        # a stride-1 convolution of the stride-dilated input, padded so each output sees the whole kernel
        pads = tuple(
            (d * (k - 1) - lo, d * (k - 1) - hi + o)
            for k, (lo, hi), o, d in zip(
                self.kernel_size, self.padding, self.output_padding, self.dilation, strict=True
            )
        )

        def conv(x: jax.Array, w: jax.Array, dims: jax.lax.ConvDimensionNumbers) -> jax.Array:
            return jax.lax.conv_general_dilated(
                x,
                w,
                window_strides=(1,) * len(self.Spatial),
                padding=pads,
                lhs_dilation=self.stride,
                rhs_dilation=self.dilation,
                feature_group_count=self.groups,
                dimension_numbers=dims,
            )

        _check_input(self, inputs, "ConvTranspose")
        sizes = [
            (inputs.shape[hax.axis_name(ax)] - 1) * s - lo - hi + d * (k - 1) + o + 1
            for ax, s, (lo, hi), d, k, o in zip(
                self.Spatial,
                self.stride,
                self.padding,
                self.dilation,
                self.kernel_size,
                self.output_padding,
                strict=True,
            )
        ]
        return _convolve(self, inputs, conv, sizes, "ConvTranspose")


def _spatial_axes(Spatial: hax.AxisSelection, where: str) -> tuple[hax.AxisSelector, ...]:
    spatial = hax.ensure_tuple(Spatial)
    if not spatial:
        raise ValueError(f"{where}: Spatial names no axes; give the axes the kernel slides over")
    names = [hax.axis_name(s) for s in spatial]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: Spatial names an axis twice: {names}")
    return spatial


def _per_axis(value, n: int, what: str, where: str, minimum: int = 1) -> tuple[int, ...]:
    """One int per spatial axis, from one int (for all) or a sequence of ``n`` ints."""
    values = (value,) if isinstance(value, int) else tuple(value)
    if len(values) == 1:
        values *= n
    if len(values) != n:
        raise ValueError(f"{where}: {what} {value!r} has {len(values)} entries for the {n} spatial axes")
    if any(not isinstance(v, int) or isinstance(v, bool) or v < minimum for v in values):
        raise ValueError(f"{where}: {what} must be ints >= {minimum}, got {value!r}")
    return tuple(int(v) for v in values)


def _padding_pairs(padding: Padding, n: int, where: str) -> tuple[tuple[int, int], ...]:
    """``(low, high)`` per spatial axis, from an int, one int per axis, or one pair per axis."""
    if isinstance(padding, str):
        raise ValueError(f"{where}: padding {padding!r} must be ints or (low, high) pairs, not a string")
    entries = (padding,) if isinstance(padding, int) else tuple(padding)
    if len(entries) == 1:
        entries *= n
    if len(entries) != n:
        hint = (
            f"; a (low, high) pair for one axis is written (({entries[0]}, {entries[1]}),)" if n == 1 else ""
        )
        raise ValueError(
            f"{where}: padding {padding!r} has {len(entries)} entries for the {n} spatial axes{hint}"
        )
    pairs = []
    for p in entries:
        pair = (p, p) if isinstance(p, int) else tuple(p)
        if len(pair) != 2 or any(not isinstance(v, int) or isinstance(v, bool) for v in pair):
            raise ValueError(f"{where}: padding entry {p!r} must be an int or a (low, high) pair of ints")
        pairs.append((int(pair[0]), int(pair[1])))
    return tuple(pairs)


def _init_params(
    key: jax.Array,
    Spatial: tuple[hax.AxisSelector, ...],
    In: hax.Axis,
    Out: hax.Axis,
    kernel_size: tuple[int, ...],
    groups: int,
    use_bias: bool,
    where: str,
) -> tuple[hax.NamedArray, hax.NamedArray | None]:
    for what, ax in (("In", In), ("Out", Out)):
        if not isinstance(ax, hax.Axis):
            raise TypeError(f"{where}: {what} must be one hax.Axis with a size, got {ax!r}")
    spatial_names = [hax.axis_name(s) for s in Spatial]
    if In.name == Out.name:
        raise ValueError(
            f"{where}: In and Out are both named {In.name!r}; the weight needs distinct names, e.g. "
            f"Out=hax.Axis('{In.name}_out', {Out.size})"
        )
    clashes = [ax.name for ax in (In, Out) if ax.name in spatial_names]
    if clashes:
        raise ValueError(f"{where}: the channel axes {clashes} are also in Spatial {spatial_names}")
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{where}: groups must be an int >= 1, got {groups!r}")
    if In.size % groups or Out.size % groups:
        raise ValueError(f"{where}: groups={groups} must divide both channel sizes, In {In} and Out {Out}")
    kernel = tuple(hax.Axis(name, k) for name, k in zip(spatial_names, kernel_size, strict=True))
    InGroup = In.resize(In.size // groups)
    limit = 1 / math.sqrt(math.prod(kernel_size) * InGroup.size)
    weight_key, bias_key = jax.random.split(key)
    weight = hax.random.uniform(weight_key, (Out, InGroup, *kernel), minval=-limit, maxval=limit)
    bias = hax.random.uniform(bias_key, Out, minval=-limit, maxval=limit) if use_bias else None
    return weight, bias


def _check_input(layer: Conv | ConvTranspose, inputs: hax.NamedArray, where: str) -> None:
    spatial = [hax.axis_name(s) for s in layer.Spatial]
    check_layer_input(inputs, layer.In, layer.Out, where, also_needed=spatial)


def _convolve(
    layer: Conv | ConvTranspose,
    inputs: hax.NamedArray,
    conv: Callable[[jax.Array, jax.Array, jax.lax.ConvDimensionNumbers], jax.Array],
    out_sizes: list[int],
    where: str,
) -> hax.NamedArray:
    """Run ``conv`` on ``inputs`` with its batch axes merged into one, then restore names and order.

    ``conv_general_dilated`` takes exactly one batch dimension, so the batch axes (any not spatial and not
    ``In``) go in front and are reshaped into one (or a size-1 one when there are none).
    """
    spatial = [hax.axis_name(s) for s in layer.Spatial]
    too_small = {name: size for name, size in zip(spatial, out_sizes, strict=True) if size < 1}
    if too_small:
        raise ValueError(
            f"{where}: the output would have sizes {too_small} along the spatial axes of the input "
            f"{inputs.shape}: pad the input or use a smaller kernel_size, stride or dilation"
        )
    batch = [a for a in inputs.axes if a.name not in spatial and a.name != layer.In.name]
    rest = [a for a in inputs.axes if a not in batch]
    moved = hax.rearrange(inputs, (*batch, *rest)).array
    lhs = moved.reshape((math.prod(a.size for a in batch), *moved.shape[len(batch) :]))
    rest_names = [a.name for a in rest]
    lhs_spec = (0, 1 + rest_names.index(layer.In.name), *(1 + rest_names.index(n) for n in spatial))
    weight_names = [a.name for a in layer.weight.axes]
    rhs_spec = tuple(weight_names.index(n) for n in (layer.Out.name, layer.In.name, *spatial))
    dtype = jnp.result_type(lhs, layer.weight.array)
    out = conv(
        lhs.astype(dtype),
        layer.weight.array.astype(dtype),
        jax.lax.ConvDimensionNumbers(lhs_spec, rhs_spec, lhs_spec),
    )

    new_size = dict(zip(spatial, out_sizes, strict=True))
    out_rest = [layer.Out if a.name == layer.In.name else a.resize(new_size[a.name]) for a in rest]
    result = hax.NamedArray(out.reshape((*(a.size for a in batch), *out.shape[1:])), (*batch, *out_rest))
    result = hax.rearrange(
        result, [layer.Out.name if a.name == layer.In.name else a.name for a in inputs.axes]
    )
    if layer.bias is not None:
        result = result + layer.bias
    return result
