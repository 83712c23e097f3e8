"""haliax-lite: named tensors for JAX with Haliax's API, in a fraction of its code.

Use it as ``import haliax_lite as hax``; code written against Haliax's core API runs unchanged.

>>> import jax, haliax_lite as hax
>>> Batch, Embed = hax.Axis("batch", 2), hax.Axis("embed", 3)
>>> x = hax.random.normal(jax.random.PRNGKey(0), (Batch, Embed))
>>> hax.dot(x, hax.ones(Embed), axis=Embed).axes == (Batch,)
True
"""

__version__ = "0.1.0"

from equinox import filter_eval_shape, filter_grad, filter_jit, filter_value_and_grad, filter_vmap

from .axis import (
    Axis,
    AxisSelection,
    AxisSelector,
    AxisSpec,
    axis_name,
    axis_size,
    concat_axes,
    dblock,
    ds,
    dslice,
    eliminate_axes,
    ensure_tuple,
    intersect_axes,
    is_axis_compatible,
    make_axes,
    overlapping_axes,
    replace_axis,
    selects_axis,
    union_axes,
    without_axes,
)
from .broadcast import broadcast_arrays, broadcast_axis, broadcast_to
from .checkpoint import ScanCheckpointPolicy, ScanCheckpointSpec, tree_checkpoint_name
from .core import NamedArray, is_named_array, named
from .creation import (
    arange,
    concatenate,
    full,
    full_like,
    geomspace,
    linspace,
    logspace,
    ones,
    ones_like,
    stack,
    zeros,
    zeros_like,
)
from .dot import dot
from .einsum import einsum
from .elementwise import *  # noqa: F403 - the generated table of jnp wrappers
from .elementwise import __all__ as _elementwise_names
from .hof import fold, is_named_or_shaped_array_like, map, scan, vmap
from .indexing import index, slice, take, updated_slice
from .jit import fsdp, named_jit
from .ops import pad, roll, top_k, trace, tril, triu
from .partitioning import (
    ResourceAxis,
    ResourceMapping,
    auto_sharded,
    axis_mapping,
    infer_resource_partitions,
    physical_axis_name,
    physical_axis_size,
    pspec_for,
    round_axis_for_partitioning,
    shard,
    shard_with_axis_mapping,
)
from .reductions import *  # noqa: F403 - the generated table of reductions
from .reductions import __all__ as _reduction_names
from .shape_ops import flatten, flatten_axes, ravel, rearrange, rename, split, unbind, unflatten_axis

# isort: off
from . import indexing, nn, partitioning, random, tree_util
# isort: on

__all__ = [
    "indexing",
    "nn",
    "partitioning",
    *_elementwise_names,
    *_reduction_names,
    "Axis",
    "AxisSelection",
    "AxisSelector",
    "AxisSpec",
    "NamedArray",
    "ResourceAxis",
    "ResourceMapping",
    "ScanCheckpointPolicy",
    "ScanCheckpointSpec",
    "arange",
    "auto_sharded",
    "axis_mapping",
    "axis_name",
    "axis_size",
    "broadcast_arrays",
    "broadcast_axis",
    "broadcast_to",
    "concat_axes",
    "concatenate",
    "dblock",
    "dot",
    "ds",
    "dslice",
    "einsum",
    "eliminate_axes",
    "ensure_tuple",
    "filter_eval_shape",
    "filter_grad",
    "filter_jit",
    "filter_value_and_grad",
    "filter_vmap",
    "flatten",
    "flatten_axes",
    "fold",
    "fsdp",
    "full",
    "full_like",
    "geomspace",
    "index",
    "infer_resource_partitions",
    "intersect_axes",
    "is_axis_compatible",
    "is_named_array",
    "is_named_or_shaped_array_like",
    "linspace",
    "logspace",
    "make_axes",
    "map",
    "named",
    "named_jit",
    "ones",
    "ones_like",
    "overlapping_axes",
    "pad",
    "physical_axis_name",
    "physical_axis_size",
    "pspec_for",
    "random",
    "ravel",
    "rearrange",
    "rename",
    "replace_axis",
    "roll",
    "round_axis_for_partitioning",
    "scan",
    "selects_axis",
    "shard",
    "shard_with_axis_mapping",
    "slice",
    "split",
    "stack",
    "take",
    "top_k",
    "trace",
    "tree_checkpoint_name",
    "tree_util",
    "tril",
    "triu",
    "unbind",
    "unflatten_axis",
    "union_axes",
    "updated_slice",
    "vmap",
    "without_axes",
    "zeros",
    "zeros_like",
]
