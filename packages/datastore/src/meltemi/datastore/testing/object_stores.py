"""S3 (moto) and GCS (gcp-storage-emulator) servers on loopback, each taught to refuse what the real
store refuses (`checking_credentials`), and the GCS emulator taught what GCS does that it lacks (listing by
key range, a 416 for a range past the end).
"""

from __future__ import annotations

import abc
import contextlib
import functools
import json
import logging
import os
import re
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, ClassVar

LOOPBACK = "127.0.0.1"
TEST_KEYS = {"AWS_ACCESS_KEY_ID": "meltemi-test", "AWS_SECRET_ACCESS_KEY": "meltemi-test-secret"}


def unique_bucket(prefix: str = "meltemi") -> str:
    """A bucket name no other test uses (valid for S3 and GCS: lowercase, digits and dashes).

    >>> a, b = unique_bucket(), unique_bucket("t")
    >>> a != b and a.startswith("meltemi-") and b.startswith("t-")
    True
    """
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


class _LoopbackStore(abc.ABC):
    """What the S3 server and the GCS emulator share: a URL scheme, the standard variable through which a
    client finds the endpoint (a test points it at a proxy), the HTTP method of an object upload (what a
    faulty proxy refuses to stop writes), and new buckets."""

    scheme: ClassVar[str]
    endpoint_variable: ClassVar[str]
    upload_method: ClassVar[str]

    @abc.abstractmethod
    def make_bucket(self, prefix: str = "meltemi") -> str:
        """Create a bucket with a unique name and return the name."""

    def bucket_url(self, prefix: str = "meltemi") -> str:
        """A new bucket's URL (``make_bucket``'s name under this server's scheme)."""
        return f"{self.scheme}://{self.make_bucket(prefix)}"


@dataclass
class S3Server(_LoopbackStore):
    """moto's S3 server in this process; `environ` is what a user of an S3-compatible store sets."""

    endpoint: str
    _server: Any = field(repr=False)
    _checking: list[bool] = field(default_factory=lambda: [False], repr=False)  # shared with its WSGI app
    scheme: ClassVar[str] = "s3"
    endpoint_variable: ClassVar[str] = "AWS_ENDPOINT_URL"
    upload_method: ClassVar[str] = "PUT"

    @property
    def environ(self) -> dict[str, str]:
        return {self.endpoint_variable: self.endpoint, "AWS_REGION": "us-east-1"} | TEST_KEYS

    def make_bucket(self, prefix: str = "meltemi") -> str:
        """Create a bucket with a unique name and return the name."""
        import boto3  # moto's own dependency

        name = unique_bucket(prefix)
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=TEST_KEYS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=TEST_KEYS["AWS_SECRET_ACCESS_KEY"],
        )
        client.create_bucket(Bucket=name)
        return name

    @contextlib.contextmanager
    def checking_credentials(self) -> Iterator[None]:
        """Make the server refuse unknown access keys (moto accepts any by default) and unsigned requests
        (403, AccessDenied, as a private bucket does) within the block."""
        previous = self._post("/moto-api/reset-auth", b"0")["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"]
        self._checking[0] = True
        try:
            yield
        finally:
            self._checking[0] = False
            self._post("/moto-api/reset-auth", str(previous).encode())

    def _post(self, path: str, data: bytes) -> dict[str, Any]:
        headers = {"Content-Type": "text/plain"}
        request = urllib.request.Request(self.endpoint + path, data=data, headers=headers)
        with urllib.request.urlopen(request) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        self._server.stop()


def start_s3_server() -> S3Server:
    """Start moto's S3 server on 127.0.0.1 and a free port (ImportError when moto[server] is missing)."""
    from moto.server import ThreadedMotoServer

    _services_listed_once()
    server = ThreadedMotoServer(ip_address=LOOPBACK, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    checking = [False]
    server._server.app = _refusing_unsigned(server._server.app, checking)
    return S3Server(f"http://{host}:{port}", server, checking)


def _services_listed_once() -> None:
    """moto's server finds each request's service by listing its own package's directory (`listdir`, then
    `isdir` on each of its ~170 entries), twice a request: 600 small requests from a boto3 client took
    4.2-5.3 CPU-s of client and server, and 3.3-4.4 with the list read once. The directory does not change
    while the process runs."""
    from moto import backends

    if not hasattr(backends.list_of_moto_modules, "services"):
        services = tuple(backends.list_of_moto_modules())
        listed = functools.wraps(backends.list_of_moto_modules)(lambda: services)
        listed.services = services  # type: ignore[attr-defined]
        backends.list_of_moto_modules = listed


def _refusing_unsigned(app: Any, checking: list[bool]) -> Any:
    """moto's WSGI app, answering an unsigned request with S3's 403 (AccessDenied) while it checks
    credentials: moto itself fails on one with a 500 (it reads the missing Authorization header)."""
    denied = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"

    def refusing(environ: dict[str, Any], start_response: Any) -> Any:
        signed = "HTTP_AUTHORIZATION" in environ or "X-Amz-Signature" in environ.get("QUERY_STRING", "")
        if not checking[0] or signed or environ.get("PATH_INFO", "").startswith("/moto-api/"):
            return app(environ, start_response)
        start_response(
            "403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(denied)))]
        )
        return [denied]

    return refusing


@dataclass
class _TokenGate:
    """What the GCS emulator asks of a request's bearer token: nothing (`required` None), or exactly that
    token; `seen` is every token a request carried."""

    required: str | None = None
    seen: set[str] = field(default_factory=set)

    def refusal(self, authorization: str | None) -> dict[str, Any] | None:
        """The error GCS answers a request with this `Authorization` header with (a 401), or None."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        if token:
            self.seen.add(token)
        if self.required is None or token == self.required:
            return None
        if token:
            said, reason = "Invalid Credentials", "authError"
        else:
            said = "Anonymous caller does not have storage.objects.list access to the Google Cloud Storage"
            said += " bucket."
            reason = "required"
        where = {"domain": "global", "reason": reason, "locationType": "header", "location": "Authorization"}
        return {"error": {"code": 401, "message": said, "errors": [{"message": said} | where]}}


@dataclass
class GcsServer(_LoopbackStore):
    """gcp-storage-emulator's GCS server in this process; `environ` points Google's clients (and, through
    the storage seam, TensorStore) at it, as a user does: the seam sends an emulator anonymous requests.

    It accepts any bearer token unless `checking_credentials` says which; `bearer_tokens` are those it saw.
    """

    endpoint: str
    _server: Any = field(repr=False)
    _gate: _TokenGate = field(default_factory=_TokenGate, repr=False)
    scheme: ClassVar[str] = "gs"
    endpoint_variable: ClassVar[str] = "STORAGE_EMULATOR_HOST"
    upload_method: ClassVar[str] = "POST"  # the object's name is in the query, escaped

    @property
    def environ(self) -> dict[str, str]:
        return {self.endpoint_variable: self.endpoint}

    @property
    def bearer_tokens(self) -> set[str]:
        """Every bearer token a request to the emulator has carried."""
        return set(self._gate.seen)

    def make_bucket(self, prefix: str = "meltemi") -> str:
        """Create a bucket with a unique name and return the name."""
        name = unique_bucket(prefix)
        headers = {"Content-Type": "application/json"}
        if self._gate.required is not None:
            headers["Authorization"] = f"Bearer {self._gate.required}"
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=meltemi-test",
            data=json.dumps({"name": name}).encode(),
            headers=headers,
        )
        urllib.request.urlopen(request).close()
        return name

    @contextlib.contextmanager
    def checking_credentials(self, token: str = "meltemi-test-token") -> Iterator[None]:
        """Within the block, refuse every request that does not carry `token` as its bearer token, as GCS
        refuses a wrong or missing token: a 401 with GCS's JSON error ("Invalid Credentials", or an
        anonymous caller's). The emulator accepts any token by default, and the seam sends it a fixed one
        (`credentials.EMULATOR_TOKEN`), so a request from this process is refused unless `token` is that.
        """
        previous, self._gate.required = self._gate.required, token
        try:
            yield
        finally:
            self._gate.required = previous

    def stop(self) -> None:
        self._server.stop()


def start_gcs_server() -> GcsServer:
    """Start the GCS emulator on 127.0.0.1 and a free port, in memory (ImportError when it is missing)."""
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.WARNING)
    _list_by_key_range()
    _unsatisfiable_ranges()
    server = create_server(LOOPBACK, 0, in_memory=True)
    # In memory, the emulator's file of every object's metadata is never read back, yet it rewrote it whole
    # (as indented JSON) on every write: quadratic in the objects a test process has written.
    server._storage._write_config_to_file = lambda: None
    server.start()
    httpd = server._api._httpd
    port = httpd.server_address[1]  # bound to port 0: the port the system chose
    gate = _TokenGate()
    httpd.RequestHandlerClass = _gated_handler(httpd.RequestHandlerClass, gate)
    return GcsServer(f"http://{LOOPBACK}:{port}", server, gate)


def _gated_handler(handler: Any, gate: _TokenGate) -> Any:
    """The emulator's request handler (`functools.partial(RequestHandler, storage)`), asking `gate` first."""
    base = handler.func

    class Gated(base):
        def _refused(self) -> bool:
            refusal = gate.refusal(self.headers.get("Authorization"))
            if refusal is None:
                return False
            self.rfile.read(int(self.headers.get("Content-Length") or 0))  # the body, unread, would reset
            body = json.dumps(refusal).encode()
            self.send_response(HTTPStatus.UNAUTHORIZED)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("WWW-Authenticate", 'Bearer realm="https://accounts.google.com/"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return True

        def do_GET(self) -> None:
            self._refused() or base.do_GET(self)

        def do_POST(self) -> None:
            self._refused() or base.do_POST(self)

        def do_PUT(self) -> None:
            self._refused() or base.do_PUT(self)

        def do_PATCH(self) -> None:
            self._refused() or base.do_PATCH(self)

        def do_DELETE(self) -> None:
            self._refused() or base.do_DELETE(self)

    return functools.partial(Gated, *handler.args, **handler.keywords)


class _KeyRange:
    """The emulator's storage, listing only the names in `[start, end)`."""

    def __init__(self, storage: Any, start: str, end: str):
        self._storage, self._start, self._end = storage, start, end

    def get_file_list(self, *args: Any, **kwargs: Any) -> tuple[list[dict[str, Any]], list[str]]:
        files, prefixes = self._storage.get_file_list(*args, **kwargs)
        inside = [f for f in files if self._start <= f["name"] and (not self._end or f["name"] < self._end)]
        return inside, prefixes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


def _list_by_key_range() -> None:
    """Teach the emulator the object-list parameters `startOffset` and `endOffset`, which TensorStore uses
    to list a prefix and the emulator ignores (a listing of the whole bucket makes TensorStore abort), and
    to answer a listing of a missing bucket as GCS does (a 404 with a JSON error, not an empty body)."""
    from gcp_storage_emulator import server
    from gcp_storage_emulator.handlers import objects

    def listing(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        start, end = (request.query.get(name, [""])[0] for name in ("startOffset", "endOffset"))
        listed = objects.ls(request, response, _KeyRange(storage, start, end), *args, **kwargs)
        if response.status == HTTPStatus.NOT_FOUND:
            missing = "The specified bucket does not exist."
            error = {"code": 404, "message": missing, "errors": [{"reason": "notFound", "message": missing}]}
            response.json({"error": error})
        return listed

    for _, handlers in server.HANDLERS:
        if handlers.get(server.GET) is objects.ls:
            handlers[server.GET] = listing


def _unsatisfiable_ranges() -> None:
    """Answer a read whose byte range starts at or past the object's end with a 416, as GCS does (the
    emulator answers with a Content-Range that ends before it starts), so that reading past the end of an
    object is the same error on every backend; and name the object's generation on every read
    (`x-goog-generation`), as GCS does: TensorStore checks that reads of one object it has coalesced (the
    shards of a chunk that several devices restore at once) saw one generation, and without it answers
    "Malformed StorageGeneration". Media reads of the JSON API (`alt=media`) go through the same function."""
    from gcp_storage_emulator import server
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    original = objects.download
    if getattr(original, "refuses_unsatisfiable_ranges", False):  # taught already (a second server)
        return

    def download(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        bucket, name = request.params["bucket_name"], request.params["object_id"]
        try:
            size = len(storage.get_file(bucket, name))
            generation = storage.get_file_obj(bucket, name)["generation"]
        except NotFound:  # the emulator's own download answers that
            return original(request, response, storage, *args, **kwargs)
        asked = re.fullmatch(r"\s*bytes=(?P<start>[0-9]+)-[0-9]*", request.get_header("range", None) or "")
        if asked and int(asked["start"]) >= size:
            response.status = HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE
            return None
        response["x-goog-generation"] = str(generation)
        return original(request, response, storage, *args, **kwargs)

    download.refuses_unsatisfiable_ranges = True  # type: ignore[attr-defined]
    objects.download = download
    for _, handlers in server.HANDLERS:
        if handlers.get(server.GET) is original:
            handlers[server.GET] = download


def environ_with(*servers: S3Server | GcsServer) -> dict[str, str]:
    """`os.environ` with the servers' variables, for a subprocess."""
    merged = dict(os.environ)
    for server in servers:
        merged |= server.environ
        if isinstance(server, GcsServer):
            merged.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    return merged
