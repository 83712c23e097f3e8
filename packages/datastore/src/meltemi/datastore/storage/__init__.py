"""The storage seam: one way to read and write a local directory or a `gs://`, `s3://`, `file://` or
`memory://` URL, through TensorStore's kvstores.

- `Location`: a user's path or URL, parsed (no I/O); its `kvstore_spec()` for TensorStore arrays.
- `Directory`: small objects at a location (bytes, text, JSON), list, exists, delete by prefix; each write
  one atomic PUT, the commit primitive.
- `Appender`, `read_appended`: a log such as `metrics.jsonl` on stores that cannot append.
- `check_writable`, `check_readable`: probe a location before any work, failing in one line that names
  the URL and the mistake (a `StorageError` subclass from `meltemi.datastore.errors`); `first_contact`
  makes a first request as fast-failing as a probe, and `read_object` reads one object that way;
  `file_to_write` is where a command's one output file goes (its folder probed, a folder refused).

>>> from meltemi.datastore.storage import Directory, check_writable
>>> run = Directory(check_writable("memory://example/run"))
>>> run.write_text("config.yaml", "seed: 0\\n"); run.list()
['config.yaml']
"""

from meltemi.datastore.storage.appender import Appender, read_appended
from meltemi.datastore.storage.directory import (
    Directory,
    check_readable,
    check_writable,
    file_to_write,
    first_contact,
    parent_and_key,
    read_object,
    storage_context,
)
from meltemi.datastore.storage.location import (
    DEFAULT_RETRIES,
    PROBE_RETRIES,
    SCHEMES,
    Location,
    Retries,
    local_path_of,
    retried_requests,
    url_scheme,
)

__all__ = [
    "DEFAULT_RETRIES",
    "PROBE_RETRIES",
    "SCHEMES",
    "Appender",
    "Directory",
    "Location",
    "Retries",
    "check_readable",
    "check_writable",
    "file_to_write",
    "first_contact",
    "local_path_of",
    "parent_and_key",
    "read_appended",
    "read_object",
    "retried_requests",
    "url_scheme",
    "storage_context",
]
