"""The package's names, all of them but its layers (`nn`) and `quantization`: what `haliax_lite` exports,
and what the layers build on. The layers import this module, never the package, so the package and its
layers do not import each other; `haliax_lite/__init__.py` re-exports it whole and adds the two.

>>> import haliax_lite as hax
>>> from haliax_lite import _namespace
>>> set(_namespace.__all__) <= set(hax.__all__) and _namespace.dot is hax.dot
True
"""

from equinox import filter_eval_shape as filter_eval_shape
from equinox import filter_grad as filter_grad
from equinox import filter_jit as filter_jit
from equinox import filter_value_and_grad as filter_value_and_grad
from equinox import filter_vmap as filter_vmap

# the implementation modules, by name (before the star imports rebind names such as `dot`)
from . import array_ops as _array_ops
from . import axis as _axis
from . import binary as _binary
from . import broadcast as _broadcast
from . import checkpoint as _checkpoint
from . import core as _core
from . import creation as _creation
from . import dot as _dot
from . import einsum as _einsum
from . import elementwise as _elementwise
from . import field as _field
from . import fourier as _fourier
from . import haxtyping as _haxtyping
from . import hof as _hof
from . import indexing as _indexing
from . import ops as _ops
from . import partitioning as _partitioning
from . import poly as _poly
from . import reductions as _reductions
from . import shape_ops as _shape_ops
from . import unary as _unary
from . import unique_bits as _unique_bits
from .array_ops import *  # noqa: F403
from .axis import *  # noqa: F403
from .binary import *  # noqa: F403
from .broadcast import *  # noqa: F403
from .checkpoint import *  # noqa: F403
from .core import *  # noqa: F403
from .creation import *  # noqa: F403
from .dot import *  # noqa: F403
from .einsum import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .field import *  # noqa: F403
from .fourier import *  # noqa: F403
from .haxtyping import *  # noqa: F403
from .hof import *  # noqa: F403
from .indexing import *  # noqa: F403
from .named_array_methods import install_methods as _install_methods
from .ops import *  # noqa: F403
from .partitioning import *  # noqa: F403
from .poly import *  # noqa: F403
from .reductions import *  # noqa: F403
from .shape_ops import *  # noqa: F403
from .unary import *  # noqa: F403
from .unique_bits import *  # noqa: F403

# isort: off
from . import debug as debug
from . import indexing as indexing
from . import jax_utils as jax_utils
from . import partitioning as partitioning
from . import random as random
from . import tree_util as tree_util
from . import util as util
from . import state_dict as state_dict
# isort: on

_install_methods()  # NamedArray's methods forward to the functions above (see named_array_methods)

__all__ = [
    # the public submodules, as in Haliax
    "debug",
    "indexing",
    "partitioning",
    "random",
    "state_dict",
    "tree_util",
    "util",
    # Equinox's transforms, re-exported as Haliax does
    "filter_eval_shape",
    "filter_grad",
    "filter_jit",
    "filter_value_and_grad",
    "filter_vmap",
    # every name each implementation module lists in its own __all__
    *_array_ops.__all__,
    *_axis.__all__,
    *_binary.__all__,
    *_broadcast.__all__,
    *_checkpoint.__all__,
    *_core.__all__,
    *_creation.__all__,
    *_dot.__all__,
    *_einsum.__all__,
    *_elementwise.__all__,
    *_field.__all__,
    *_fourier.__all__,
    *_haxtyping.__all__,
    *_hof.__all__,
    *_indexing.__all__,
    *_ops.__all__,
    *_partitioning.__all__,
    *_poly.__all__,
    *_reductions.__all__,
    *_shape_ops.__all__,
    *_unary.__all__,
    *_unique_bits.__all__,
]
