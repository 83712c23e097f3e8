"""Haliax's ``haliax.state_dict``: flat, PyTorch-style state dicts of named modules.

The protocol and the walk live in :mod:`.serialization` (which ``nn.scan`` implements for repeated layers),
host copies, files and PyTorch layouts in :mod:`.state_dict_export`; this module is the public face Haliax
code imports.

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
from .state_dict_export import (
    flatten_modules_for_export,
    from_torch_compatible_state_dict,
    load_state_dict,
    save_state_dict,
    to_numpy_state_dict,
    to_torch_compatible_state_dict,
    unflatten_modules_from_export,
)

__all__ = [
    "ModuleWithStateDictSerialization",
    "StateDict",
    "StateDictError",
    "flatten_modules_for_export",
    "from_state_dict",
    "from_torch_compatible_state_dict",
    "iter_state_dict",
    "load_state_dict",
    "save_state_dict",
    "to_numpy_state_dict",
    "to_state_dict",
    "to_torch_compatible_state_dict",
    "unflatten_modules_from_export",
    "with_prefix",
]
