"""Building a token store, as its stages: the inputs read (`inputs/`), the request and its options
(`request`), the plan of units (`plan` in `builder`), the units tokenized into parts (`units`), the parts
assembled into the store's arrays (`assembly`), the output's checks (`output`), and the records a build
keeps (`records`); `builder.build_store` composes them.

>>> from meltemi.datastore.build import build_store
>>> build_store.__module__
'meltemi.datastore.build.builder'
"""

from meltemi.datastore.build.builder import build_store
from meltemi.datastore.build.records import BuildReport

__all__ = ["BuildReport", "build_store"]
