"""Building a token store, as its stages: the inputs read (`inputs/`), the request and its options
(`request`), the plan of units (`plan` in `builder`), the units tokenized into parts (`units`), the parts
assembled into the store's arrays (`assembly`), the output's checks (`output`), and the records a build
keeps (`records`); `builder.build_store` composes them.

>>> from meltemi.datastore.build import build_store
>>> build_store.__module__
'meltemi.datastore.build.builder'
"""

from typing import TYPE_CHECKING

from meltemi.datastore.lazy import lazy_names

if TYPE_CHECKING:
    from meltemi.datastore.build.builder import build_store
    from meltemi.datastore.build.records import BuildReport

# Each public name and the module that defines it, imported on first use: the modules that read inputs
# (`inputs/`, which the chat stage and the tokenizer reader use too) import without the builder, which
# imports them.
_HOMES = {
    "meltemi.datastore.build.builder": ("build_store",),
    "meltemi.datastore.build.records": ("BuildReport",),
}

__all__ = ["BuildReport", "build_store"]

__getattr__ = lazy_names(__name__, _HOMES)
