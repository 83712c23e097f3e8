"""Neural-network layers and functions on named arrays (Haliax's ``haliax.nn``).

Layers are Equinox modules built with ``Layer.init(..., key=...)``; functions take axes by name::

    >>> import jax, haliax_lite as hax
    >>> Batch, Embed, Vocab = hax.Axis("batch", 2), hax.Axis("embed", 8), hax.Axis("vocab", 5)
    >>> proj = hax.nn.Linear.init(Embed, Vocab, key=jax.random.PRNGKey(0))
    >>> logits = proj(hax.nn.gelu(hax.ones((Batch, Embed))))
    >>> targets = hax.nn.one_hot(hax.named([1, 4], Batch), Vocab)
    >>> float(hax.nn.cross_entropy_loss(logits, Vocab, targets).array) > 0
    True
"""

from haliax_lite._namespace import ScanCheckpointPolicy

from . import attention
from .activations import (
    celu,
    elu,
    gelu,
    glu,
    hard_sigmoid,
    hard_silu,
    hard_swish,
    hard_tanh,
    leaky_relu,
    log_sigmoid,
    quick_gelu,
    relu,
    relu6,
    relu_squared,
    selu,
    sigmoid,
    silu,
    soft_sign,
    softplus,
    swish,
)
from .conv import Conv, ConvTranspose
from .dropout import Dropout, dropout
from .embedding import Embedding
from .linear import Linear
from .loss import (
    binary_cross_entropy_loss,
    cross_entropy_loss,
    cross_entropy_loss_and_log_normalizers,
    one_hot,
    reduce_loss,
)
from .mlp import MLP
from .moe_linear import MoELinear
from .normalization import LayerNorm, RmsNorm, log_softmax, logsumexp, softmax, standardize
from .pooling import max_pool, mean_pool, min_pool
from .scan import BlockSeq, Stacked
from .scan_protocols import BlockFoldable, FoldFunction, ModuleInit, ScanFunction, VmapFunction

__all__ = [
    "attention",
    "max_pool",
    "mean_pool",
    "min_pool",
    "one_hot",
    "binary_cross_entropy_loss",
    "reduce_loss",
    "cross_entropy_loss",
    "cross_entropy_loss_and_log_normalizers",
    "Conv",
    "ConvTranspose",
    "Dropout",
    "dropout",
    "LayerNorm",
    "Linear",
    "MoELinear",
    "Embedding",
    "RmsNorm",
    "Stacked",
    "BlockFoldable",
    "FoldFunction",
    "ModuleInit",
    "ScanFunction",
    "VmapFunction",
    "BlockSeq",
    "MLP",
    "ScanCheckpointPolicy",
    "relu",
    "gelu",
    "quick_gelu",
    "glu",
    "relu6",
    "relu_squared",
    "sigmoid",
    "soft_sign",
    "softplus",
    "swish",
    "silu",
    "log_sigmoid",
    "leaky_relu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "logsumexp",
    "softmax",
    "log_softmax",
    "standardize",
    "elu",
    "celu",
    "selu",
]
