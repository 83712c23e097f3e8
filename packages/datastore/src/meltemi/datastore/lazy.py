"""A package's public names imported from their modules on first use (PEP 562), so that importing the
package loads none of them: `meltemi.datastore`'s and `meltemi.datastore.build`'s ``__getattr__``.

>>> getattr_ = lazy_names("meltemi.datastore", {"meltemi.datastore.keys": ("derive_key",)})
>>> getattr_("derive_key").__module__
'meltemi.datastore.keys'
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_names(
    package: str, homes: dict[str, tuple[str, ...]], submodules: tuple[str, ...] = ()
) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package`` whose names ``homes`` lists by the module defining them (and whose
    ``submodules`` are public too): each is imported once, then kept as the package's attribute."""
    module_of = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        elif name in module_of:
            value = getattr(importlib.import_module(module_of[name]), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
