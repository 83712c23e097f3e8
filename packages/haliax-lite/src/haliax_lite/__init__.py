"""haliax-lite: named tensors for JAX with Haliax's API, in a fraction of its code.

Use it as ``import haliax_lite as hax``; code written against Haliax's core API runs unchanged. Each
module below holds one idea and lists its public names in ``__all__``; they are all re-exported here,
and ``__all__`` is their union plus the public submodules.

>>> import jax, haliax_lite as hax
>>> Batch, Embed = hax.Axis("batch", 2), hax.Axis("embed", 3)
>>> x = hax.random.normal(jax.random.PRNGKey(0), (Batch, Embed))
>>> hax.dot(x, hax.ones(Embed), axis=Embed).axes == (Batch,)
True
"""

import importlib.metadata

__version__ = importlib.metadata.version("haliax-lite")

from ._namespace import *  # noqa: F403
from ._namespace import __all__ as _names

# isort: off
from . import nn as nn  # after every name above: the layers build on them (through `_namespace`)
from . import quantization as quantization
# isort: on

__all__ = [*_names, "nn", "quantization"]
