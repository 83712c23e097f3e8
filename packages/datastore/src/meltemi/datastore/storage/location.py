"""Where data lives: a local path or a `file://`, `gs://`, `s3://` or `memory://` URL, parsed once.

A `Location` is a plain value (it does no I/O): a scheme, a bucket for the object stores, and a key
prefix. It gives the TensorStore kvstore spec that reads and writes there, with the endpoint, region,
credentials and retry policy taken from the ecosystem's standard environment variables, so a user's
existing setup works unchanged:

- S3 and S3-compatible stores: `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (the endpoint; TensorStore does
  not read these itself), `AWS_REGION` or `AWS_DEFAULT_REGION`, and the credentials `credentials.py`
  finds (`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, a profile, a role; else unsigned requests).
- GCS: application-default credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's, the metadata
  server); `STORAGE_EMULATOR_HOST` (the emulator convention of Google's client libraries) is passed on to
  TensorStore as `TENSORSTORE_GCS_HTTP_URL`, the variable it reads for the same thing, and without
  credentials of its own an emulator is sent a fixed token (emulators accept any).

Bucket names are checked against the store's rules when a URL is parsed (`s3://b` is refused: S3 names
have 3 to 63 characters), so a typo is reported before any request.

A URL is never turned into a local path: `gs://bucket/run` stays a bucket location, and `gs:/bucket/run` (a
URL that went through `pathlib.Path`) is an error rather than a directory named `gs:`. A local path that
starts with `~` is the home directory's, as in a shell (a YAML config is not expanded by one), as fsspec
reads it for the datastore's inputs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from meltemi.datastore.errors import BadBucketNameError, BadUrlError, UnknownSchemeError
from meltemi.datastore.storage.credentials import EMULATOR_TOKEN, gcs_credentials, s3_credentials

Scheme = Literal["file", "gs", "s3", "memory"]
SCHEMES: tuple[Scheme, ...] = ("file", "gs", "s3", "memory")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.DOTALL)
_ONE_SLASH = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/?(?!/)")  # gs:/b/x and gs:b/x: slashes missing
_DRIVERS = {"file": "file", "gs": "gcs", "s3": "s3", "memory": "memory"}


@dataclass(frozen=True)
class Retries:
    """How TensorStore retries a transient error (a 5xx, a throttled or dropped request): up to
    `max_retries` attempts with exponential backoff from `initial_delay_s`, capped at `max_delay_s`."""

    max_retries: int = 16
    initial_delay_s: float = 0.5
    max_delay_s: float = 32.0

    def to_json(self) -> dict[str, Any]:
        return {
            "max_retries": self.max_retries,
            "initial_delay": f"{self.initial_delay_s}s",
            "max_delay": f"{self.max_delay_s}s",
        }


def retried_requests() -> int:
    """How many requests to GCS and S3 this process has retried so far (TensorStore's counters): each one
    met a transient error (a 5xx, throttling, a dropped connection) and was sent again.

    >>> retried_requests() >= 0
    True
    """
    import tensorstore as ts

    names = ("/tensorstore/kvstore/s3/retries", "/tensorstore/kvstore/gcs/retries")
    return sum(
        int(value.get("value", 0))
        for name in names
        for metric in ts.experimental_collect_matching_metrics(name)
        for value in metric.get("values", [])
    )


DEFAULT_RETRIES = Retries()
PROBE_RETRIES = Retries(max_retries=3, initial_delay_s=0.1, max_delay_s=1.0)
"""A probe fails fast: an endpoint that does not answer three tries in about a second is reported."""


@dataclass(frozen=True)
class Location:
    """A directory-like place: a local directory, or a key prefix in a bucket or in memory.

    `path` is the key prefix, without a trailing `/` (an absolute path for `file`); `bucket` is empty for
    `file` and `memory`. `given` is how the user wrote it, for messages; two spellings of one place
    compare equal.

    >>> Location.parse("s3://bucket/stores/web").url, Location.parse("s3://bucket/stores/web").bucket
    ('s3://bucket/stores/web', 'bucket')
    >>> (Location.parse("gs://my-bucket/run") / "step-10/manifest.json").url
    'gs://my-bucket/run/step-10/manifest.json'
    >>> Location.parse("/tmp/x") == Location.parse("file:///tmp/x"), Location.parse("/tmp/x").is_local
    (True, True)
    >>> Location.parse("gs:my-bucket/run")
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.BadUrlError: gs:my-bucket/run: a URL needs two slashes after its scheme: gs://my-bucket/run
    >>> Location.parse("hdfs://n/x")
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.UnknownSchemeError: hdfs://n/x: unknown scheme 'hdfs'; a location is a local path
    or a file://, gs://, s3:// or memory:// URL
    """

    scheme: Scheme
    bucket: str
    path: str
    given: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str | os.PathLike | Location) -> Location:
        """The location a user's path or URL names; an unknown scheme or a malformed URL is an error."""
        if isinstance(text, Location):
            return text
        given = os.fspath(text)
        if not given.strip():
            raise BadUrlError(
                "the location is empty: give a local path or a file://, gs://, s3:// or memory:// URL"
            )
        match = _URL.match(given)
        if match is None:
            slip = _ONE_SLASH.match(given)
            if slip and slip.group(1).lower() in SCHEMES and slip.group(1).lower() != "file":
                fixed = f"{slip.group(1)}://{given[slip.end() :]}"
                raise BadUrlError(f"{given}: a URL needs two slashes after its scheme: {fixed}")
            return cls("file", "", os.path.abspath(os.path.expanduser(given)), given)
        scheme, rest = match.group(1).lower(), match.group(2)
        if scheme not in SCHEMES:
            raise UnknownSchemeError(
                f"{given}: unknown scheme {scheme!r}; a location is a local path or a "
                "file://, gs://, s3:// or memory:// URL"
            )
        if scheme == "file":
            if not rest.startswith("/"):
                raise BadUrlError(f"{given}: a file:// URL needs an absolute path (file:///abs/path)")
            return cls("file", "", os.path.normpath(rest), given)
        if scheme == "memory":
            return cls("memory", "", rest.strip("/"), given)
        bucket, _, key = rest.partition("/")
        if not bucket or re.search(r"\s", bucket):
            raise BadUrlError(f"{given}: no bucket name; write {scheme}://BUCKET/PATH")
        check_bucket_name(scheme, bucket, given)
        return cls(scheme, bucket, key.strip("/"), given)

    def __str__(self) -> str:
        return self.given or self.url

    def __truediv__(self, key: str) -> Location:
        key = key.strip("/")
        if not key:
            return self
        path = f"{self.path.rstrip('/')}/{key}" if self.path else key  # the local root "/" too
        base = str(self)
        _, scheme_slashes, rest = base.partition("://")
        root = scheme_slashes and not rest.strip("/")  # memory:// or file:///: the key follows the slashes
        shown = base + key if root else f"{base.rstrip('/')}/{key}"
        return Location(self.scheme, self.bucket, os.path.normpath(path) if self.is_local else path, shown)

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def local_path(self) -> Path | None:
        """The local directory, for a `file` location (None for the others)."""
        return Path(self.path) if self.is_local else None

    @property
    def url(self) -> str:
        if self.scheme == "file":
            return f"file://{self.path}"
        if self.scheme == "memory":
            return f"memory://{self.path}"
        return f"{self.scheme}://{self.bucket}/{self.path}".rstrip("/")

    @property
    def name(self) -> str:
        """The last component of the path (the store's or run's name)."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def found_empty_note(self) -> str:
        """What a message that found nothing here adds: on GCS a bucket that does not exist lists nothing
        and reads as missing keys (TensorStore cannot tell them apart without writing), so its name is worth
        a look.

        >>> Location.parse("gs://my-buket/run").found_empty_note
        " (or the bucket 'my-buket' does not exist: on GCS, a missing bucket reads as empty)"
        >>> Location.parse("s3://my-bucket/run").found_empty_note  # S3 says so itself
        ''
        """
        if self.scheme != "gs":
            return ""
        return f" (or the bucket {self.bucket!r} does not exist: on GCS, a missing bucket reads as empty)"

    def kvstore_spec(self, retries: Retries = DEFAULT_RETRIES) -> dict[str, Any]:
        """The TensorStore kvstore spec of this location (a directory: its keys are relative to it).

        Open it with the process's shared context, `storage_context()`, so `memory://` locations see each
        other's writes. Arrays: `{"driver": "zarr3", "kvstore": (location / "name").kvstore_spec()}`.

        >>> Location.parse("/data/store").kvstore_spec()
        {'driver': 'file', 'path': '/data/store/', 'context': {'file_io_sync': True}}
        >>> spec = Location.parse("s3://bucket/x").kvstore_spec(Retries(4, 0.25, 2.0))
        >>> spec["bucket"], spec["path"], spec["context"]["s3_request_retries"]["initial_delay"]
        ('bucket', 'x/', '0.25s')
        """
        prefix = self.path.rstrip("/")  # the local root "/" is the prefix "" + "/", never "//"
        path = prefix + "/" if prefix or self.is_local else ""
        spec: dict[str, Any] = {"driver": _DRIVERS[self.scheme], "path": path}
        if self.scheme == "file":
            spec["context"] = {"file_io_sync": True}  # fsync data and directory before a write returns
        elif self.scheme == "gs":
            export_gcs_emulator()
            spec |= {"bucket": self.bucket, "context": {"gcs_request_retries": retries.to_json()}}
        elif self.scheme == "s3":
            spec |= {"bucket": self.bucket} | s3_settings()
            keys = s3_credentials().kind
            spec["context"] = {"s3_request_retries": retries.to_json(), "aws_credentials": {"type": keys}}
        return spec


_S3_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_GCS_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_IP_ADDRESS = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
_RULES = {
    "s3": "S3 bucket names have 3 to 63 characters: lowercase letters, digits, dots and hyphens, beginning "
    "and ending with a letter or digit",
    "gs": "GCS bucket names have 3 to 63 characters (222 with dots, 63 between them): lowercase letters, "
    "digits, dashes, underscores and dots, beginning and ending with a letter or digit",
}


def check_bucket_name(scheme: str, bucket: str, given: str) -> None:
    """Refuse a bucket name the store would refuse, saying its rules (TensorStore only says "invalid").

    >>> check_bucket_name("s3", "meltemi-runs", "s3://meltemi-runs/x")
    >>> check_bucket_name("s3", "b", "s3://b/run")
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.BadBucketNameError: s3://b/run: 'b' is not a valid bucket name; S3 bucket names
    have 3 to 63 characters: ...
    """
    pattern = _S3_NAME if scheme == "s3" else _GCS_NAME
    valid = pattern.match(bucket) and ".." not in bucket and not _IP_ADDRESS.match(bucket)
    if valid and scheme == "gs" and any(len(part) > 63 for part in bucket.split(".")):
        valid = False
    if not valid:
        raise BadBucketNameError(f"{given}: {bucket!r} is not a valid bucket name; {_RULES[scheme]}")


def url_scheme(text: str | os.PathLike) -> str | None:
    """The scheme of a URL, lowercased (any scheme: the seam's, or one only fsspec reads, like `https`);
    None for a local path. The one place a path is told from a URL.

    >>> url_scheme("S3://bucket/x"), url_scheme("https://host/a.json"), url_scheme("runs/tiny")
    ('s3', 'https', None)
    """
    match = _URL.match(os.fspath(text))
    return match.group(1).lower() if match else None


def local_path_of(text: str | os.PathLike) -> Path | None:
    """The local path `text` names (a plain path or a `file://` URL), or None for any other URL.

    >>> local_path_of("file:///data/tok.json"), local_path_of("gs://bucket/tok.json")
    (PosixPath('/data/tok.json'), None)
    >>> local_path_of("runs/tiny") == Path("runs/tiny").absolute()
    True
    """
    scheme = url_scheme(text)
    if scheme not in (None, "file"):
        return None
    return Location.parse(text).local_path


def s3_settings() -> dict[str, str]:
    """The S3 spec members TensorStore does not take from the environment itself: endpoint and region.

    Without an endpoint TensorStore talks to AWS and finds the bucket's region itself; with one (MinIO, a
    cloud's S3-compatible store, a test server) the region signs the requests, `us-east-1` by default.
    """
    settings = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        settings["endpoint"] = endpoint
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        settings["aws_region"] = region
    return settings


def export_gcs_emulator() -> None:
    """Point TensorStore at `STORAGE_EMULATOR_HOST` (unless `TENSORSTORE_GCS_HTTP_URL` says otherwise), with
    a fixed token when no credentials were given for it, as Google's clients go anonymous there.

    TensorStore reads its variables for every request, so setting them here takes effect at once.
    """
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if host and not os.environ.get("TENSORSTORE_GCS_HTTP_URL"):
        os.environ["TENSORSTORE_GCS_HTTP_URL"] = host if url_scheme(host) else f"http://{host}"
    if host and gcs_credentials().kind == "emulator":
        os.environ["GOOGLE_AUTH_TOKEN_FOR_TESTING"] = EMULATOR_TOKEN
