"""meltemi.kernels: flash attention and fused cross-entropy for JAX, in Pallas and plain JAX.

Plain arrays in and out, so any JAX model can use them.

>>> import jax.numpy as jnp
>>> from meltemi.kernels import attention, cross_entropy
>>> attention(jnp.ones((1, 8, 4, 16)), jnp.ones((1, 8, 2, 16)), jnp.ones((1, 8, 2, 16))).shape
(1, 8, 4, 16)
"""

import importlib.metadata

from meltemi.kernels.attention import (
    AttentionImplementation,
    Choice,
    attention,
    attention_unsupported_reason,
    choose_attention_implementation,
)
from meltemi.kernels.attention_pallas import PallasAttentionConfig
from meltemi.kernels.cross_entropy import (
    CrossEntropyImplementation,
    choose_cross_entropy_implementation,
    cross_entropy,
)
from meltemi.kernels.cross_entropy_pallas import PallasCrossEntropyConfig
from meltemi.kernels.errors import (
    BadArgumentsError,
    BadTilingError,
    KernelError,
    LabelOutOfRangeError,
    NonFiniteError,
    UnknownImplementationError,
    UnsupportedError,
)
from meltemi.kernels.mask_spec import MaskSpec

__version__ = importlib.metadata.version("meltemi-kernels")

__all__ = [
    "AttentionImplementation",
    "BadArgumentsError",
    "BadTilingError",
    "Choice",
    "CrossEntropyImplementation",
    "KernelError",
    "LabelOutOfRangeError",
    "MaskSpec",
    "NonFiniteError",
    "PallasAttentionConfig",
    "PallasCrossEntropyConfig",
    "UnknownImplementationError",
    "UnsupportedError",
    "attention",
    "attention_unsupported_reason",
    "choose_attention_implementation",
    "choose_cross_entropy_implementation",
    "cross_entropy",
]
