"""meltemi.datastore: a deterministic random-access token store in Zarr v3.

It returns numpy arrays and never imports JAX, so it serves any framework (PyTorch included).
"""

import importlib.metadata

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

__version__ = importlib.metadata.version("meltemi-datastore")

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
