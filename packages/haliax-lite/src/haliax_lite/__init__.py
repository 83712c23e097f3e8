"""haliax-lite: named tensors for JAX with Haliax's API, in a fraction of its code.

Use it as ``import haliax_lite as hax``; code written against Haliax's core API runs unchanged.
"""

__version__ = "0.1.0"
