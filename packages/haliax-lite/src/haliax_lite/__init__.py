"""haliax-lite: named tensors for JAX with Haliax's API, in a fraction of its code.

Use it as ``import haliax_lite as hax``; code written against Haliax's core API runs unchanged. Each
module below holds one idea and lists its public names in ``__all__``; they are all re-exported here.

>>> import jax, haliax_lite as hax
>>> Batch, Embed = hax.Axis("batch", 2), hax.Axis("embed", 3)
>>> x = hax.random.normal(jax.random.PRNGKey(0), (Batch, Embed))
>>> hax.dot(x, hax.ones(Embed), axis=Embed).axes == (Batch,)
True
"""

import importlib.metadata

__version__ = importlib.metadata.version("haliax-lite")

from equinox import filter_eval_shape as filter_eval_shape
from equinox import filter_grad as filter_grad
from equinox import filter_jit as filter_jit
from equinox import filter_value_and_grad as filter_value_and_grad
from equinox import filter_vmap as filter_vmap

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
from . import partitioning as partitioning
from . import random as random
from . import tree_util as tree_util
from . import util as util
from . import nn as nn  # last: the layers build on every name above
from . import state_dict as state_dict
# isort: on

__all__ = [name for name in dir() if not name.startswith("_")]
