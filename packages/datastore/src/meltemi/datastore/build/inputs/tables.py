"""Columnar sources read as one thing: a Parquet file (Hugging Face datasets' exports) or an Arrow file (what
its `save_to_disk` writes: `data-00000-of-00001.arrow`, an IPC stream; the IPC file format is read too),
each as its schema and its record batches of the columns asked for.

>>> import pathlib, tempfile
>>> import pyarrow as pa
>>> from meltemi.datastore.build.inputs.files import describe_source
>>> path = pathlib.Path(tempfile.mkdtemp()) / "data-00000-of-00001.arrow"
>>> table = pa.table({"text": ["one", "two"], "id": [1, 2]})
>>> with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
...     writer.write_table(table)
>>> with open_table(describe_source(str(path))) as columns:
...     columns.schema.names, [b.to_pydict() for b in columns.batches(["text"])]
(['text', 'id'], [{'text': ['one', 'two']}])
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meltemi.datastore.build.inputs.files import Source, open_source
from meltemi.datastore.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class ColumnarFile:
    """A table's schema, and its record batches holding only the columns named (in their order)."""

    schema: pa.Schema
    batches: Callable[[Sequence[str]], Iterator[pa.RecordBatch]]


@contextlib.contextmanager
def open_table(source: Source) -> Iterator[ColumnarFile]:
    """The Parquet or Arrow file `source` as a `ColumnarFile`, read whole into memory (a reader seeks from
    its end); an `InputError` naming it when it cannot be read as one."""
    with open_source(source, whole=True) as f:
        yield _parquet(source, f) if source.kind == "parquet" else _arrow(source, f)


def _parquet(source: Source, f) -> ColumnarFile:
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(f)
    except Exception as e:
        raise InputError(f"{source.name}: not a readable Parquet file ({e})") from None
    return ColumnarFile(table.schema_arrow, lambda columns: table.iter_batches(columns=list(columns)))


def _arrow(source: Source, f) -> ColumnarFile:
    import pyarrow as pa

    data = f.read()
    try:
        reader = pa.ipc.open_stream(data)
        schema, batches = reader.schema, (batch for batch in reader)
    except pa.ArrowInvalid:
        try:
            file = pa.ipc.open_file(data)
        except pa.ArrowInvalid as e:
            raise InputError(f"{source.name}: not a readable Arrow file ({e})") from None
        schema, batches = file.schema, (file.get_batch(i) for i in range(file.num_record_batches))

    def select(columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield batch.select(list(columns))

    return ColumnarFile(schema, select)
