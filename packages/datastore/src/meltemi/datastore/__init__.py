"""meltemi.datastore: a deterministic random-access token store in Zarr v3.

It returns numpy arrays and never imports JAX, so it serves any framework (PyTorch included). Importing the
package loads nothing else: each public name is imported from its module on first use, so the errors and
the storage seam (``meltemi.datastore.storage``) load without the build stack (tokenizers, Arrow, the
readers of every input format).

>>> import meltemi.datastore as ds
>>> len(ds.FeistelPermutation(10, key=3)), ds.DatastoreError.__module__
(10, 'meltemi.datastore.errors')
"""

import importlib.metadata
from typing import TYPE_CHECKING

from meltemi.datastore.lazy import lazy_names

__version__ = importlib.metadata.version("meltemi-datastore")

if TYPE_CHECKING:
    from meltemi.datastore import corpora
    from meltemi.datastore.audit import audit_store
    from meltemi.datastore.build import BuildReport, build_store
    from meltemi.datastore.corpora import python_stdlib, train_tokenizer
    from meltemi.datastore.errors import (
        BadLineError,
        DatastoreError,
        EmptyCorpusError,
        IncompleteStoreError,
        InputError,
        IntegrityError,
        InvalidUtf8Error,
        NoSuchStoreError,
        Remedy,
        SourceChangedError,
        TokenizerFileError,
        TokenizerMismatchError,
        Way,
        Wording,
    )
    from meltemi.datastore.feistel import FeistelPermutation
    from meltemi.datastore.keys import derive_key
    from meltemi.datastore.loader import BatchLoader, BatchSchedule
    from meltemi.datastore.mixture import MixtureDataset, block_counts
    from meltemi.datastore.packing import PackedDataset, Packing, hold_out_conversations, pack_lengths
    from meltemi.datastore.sequences import Rows, SequenceDataset
    from meltemi.datastore.shuffle import ShuffledDataset
    from meltemi.datastore.splits import SequenceRange, hold_out
    from meltemi.datastore.store import TokenStore
    from meltemi.datastore.token_bytes import token_byte_lengths
    from meltemi.datastore.tokenizer_file import load_tokenizer

# Each public name and the module that defines it; `corpora` is a module itself. None of these modules is
# named like a name it defines (importing it would make the package attribute the module instead).
_HOMES = {
    "meltemi.datastore.audit": ("audit_store",),
    "meltemi.datastore.build": ("BuildReport", "build_store"),
    "meltemi.datastore.corpora": ("python_stdlib", "train_tokenizer"),
    "meltemi.datastore.errors": (
        "BadLineError",
        "DatastoreError",
        "EmptyCorpusError",
        "IncompleteStoreError",
        "InputError",
        "IntegrityError",
        "InvalidUtf8Error",
        "NoSuchStoreError",
        "Remedy",
        "SourceChangedError",
        "TokenizerFileError",
        "TokenizerMismatchError",
        "Way",
        "Wording",
    ),
    "meltemi.datastore.feistel": ("FeistelPermutation",),
    "meltemi.datastore.keys": ("derive_key",),
    "meltemi.datastore.loader": ("BatchLoader", "BatchSchedule"),
    "meltemi.datastore.mixture": ("MixtureDataset", "block_counts"),
    "meltemi.datastore.packing": ("PackedDataset", "Packing", "hold_out_conversations", "pack_lengths"),
    "meltemi.datastore.sequences": ("Rows", "SequenceDataset"),
    "meltemi.datastore.shuffle": ("ShuffledDataset",),
    "meltemi.datastore.splits": ("SequenceRange", "hold_out"),
    "meltemi.datastore.store": ("TokenStore",),
    "meltemi.datastore.token_bytes": ("token_byte_lengths",),
    "meltemi.datastore.tokenizer_file": ("load_tokenizer",),
}

__all__ = [
    "BadLineError",
    "BatchLoader",
    "BatchSchedule",
    "BuildReport",
    "DatastoreError",
    "EmptyCorpusError",
    "FeistelPermutation",
    "IncompleteStoreError",
    "NoSuchStoreError",
    "InputError",
    "IntegrityError",
    "InvalidUtf8Error",
    "MixtureDataset",
    "PackedDataset",
    "Remedy",
    "Packing",
    "Rows",
    "SequenceRange",
    "SequenceDataset",
    "ShuffledDataset",
    "SourceChangedError",
    "TokenStore",
    "TokenizerFileError",
    "TokenizerMismatchError",
    "Way",
    "Wording",
    "audit_store",
    "block_counts",
    "build_store",
    "corpora",
    "derive_key",
    "hold_out",
    "hold_out_conversations",
    "load_tokenizer",
    "pack_lengths",
    "python_stdlib",
    "token_byte_lengths",
    "train_tokenizer",
]

__getattr__ = lazy_names(__name__, _HOMES, submodules=("corpora",))
