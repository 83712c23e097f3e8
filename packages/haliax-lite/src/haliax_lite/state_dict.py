"""Haliax's ``haliax.state_dict``: flat, PyTorch-style state dicts of named modules.

The protocol and the walk live in :mod:`.serialization` (which ``nn.scan`` implements for repeated layers);
this module is the public face Haliax code imports.

>>> import haliax_lite as hax
>>> hax.state_dict.to_state_dict({"w": hax.ones(hax.Axis("embed", 2))}, "model")["model.w"].shape
(2,)
"""

from .serialization import (
    ModuleWithStateDictSerialization,
    StateDict,
    StateDictError,
    from_state_dict,
    iter_state_dict,
    to_state_dict,
    with_prefix,
)

__all__ = [
    "ModuleWithStateDictSerialization",
    "StateDict",
    "StateDictError",
    "from_state_dict",
    "iter_state_dict",
    "to_state_dict",
    "with_prefix",
]
