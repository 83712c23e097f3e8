"""Object-storage servers on loopback for tests: an S3 server (moto) and a GCS emulator, as pytest fixtures.

Tests of any package reuse them by importing the fixtures into a `conftest.py`:

    from meltemi.datastore.testing import gcs, gcs_server, s3, s3_server  # noqa: F401

`s3_server` and `gcs_server` start one server per test process (session scope: once per xdist worker) on
127.0.0.1 and a free port; `s3` and `gcs` also set, for one test, the standard environment variables a
user would set (`AWS_ENDPOINT_URL` and keys; `STORAGE_EMULATOR_HOST`), so the code under test finds the
server as it finds a real one. Each test makes its own bucket (`make_bucket`, a unique name), so tests
sharing a server never see each other's objects; a subprocess gets `os.environ | server.environ`.

Both refuse what the real stores refuse when told to check credentials (`checking_credentials`): S3 unknown
keys and unsigned requests (403), GCS any bearer token but the one named (401). `FaultyProxy` fails
requests between a client and either server. `google_oauth` (`GoogleOAuth`) is Google's token endpoint on
loopback behind an HTTPS proxy, so a service account's key file named by `GOOGLE_APPLICATION_CREDENTIALS`
is exchanged for a token the way Google's clients do it, and nothing leaves loopback. `put_in_hub_cache`
lays a directory out in a Hugging Face Hub cache as `hf download` does (blobs, a snapshot of links to them,
`refs/main`). `LocalRayCluster` is a real multi-node Ray cluster on loopback for builds on a cluster
(`build_store(cluster=...)`), whose nodes can be killed as machines are lost.

The servers are development dependencies (`moto[server]`, `gcp-storage-emulator`, `cryptography`),
imported only when a fixture starts one: where they are not installed (the datastore's wheel tested alone)
the tests that use them are skipped, saying so, and everything else runs. Ray (the `[ray]` extra) is
imported only when a `LocalRayCluster` starts.
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
from pathlib import Path
from typing import Any, ClassVar

import pytest

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

    server = ThreadedMotoServer(ip_address=LOOPBACK, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    checking = [False]
    server._server.app = _refusing_unsigned(server._server.app, checking)
    return S3Server(f"http://{host}:{port}", server, checking)


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


@dataclass
class FaultyProxy:
    """A proxy on loopback in front of a storage server that fails some requests, as a flaky network or an
    overloaded store does: each request with probability `rate` (a 503 and a "slow down" body, which
    clients retry), and, once `refuse(...)` is called, every request whose method and path match (a 403:
    a persistent failure that no retry mends). Point a client at `endpoint` instead of the server's.

    `failed` counts the requests it failed; `seed` makes the sequence of coin flips repeatable.
    """

    endpoint: str
    target: str
    rate: float = 0.0
    seed: int = 0
    failed: int = 0
    _refused: list[tuple[str, str, int]] = field(default_factory=list, repr=False)
    _server: Any = field(default=None, repr=False)
    _coin: Any = field(default=None, repr=False)

    def refuse(self, method: str, path_contains: str, after: int = 0) -> None:
        """From now on, refuse `method` requests whose path contains `path_contains`, once `after` of them
        have gone through (a failure in the middle of a save)."""
        self._refused.append((method, path_contains, after))

    def heal(self) -> None:
        """Stop refusing requests (the failure is over)."""
        self._refused.clear()

    def _verdict(self, method: str, path: str) -> int | None:
        for i, (wanted, part, after) in enumerate(self._refused):
            if method == wanted and part in path:
                if after > 0:
                    self._refused[i] = (wanted, part, after - 1)
                    return None
                return 403
        return 503 if self._coin.random() < self.rate else None

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def start_faulty_proxy(target: str, rate: float = 0.0, seed: int = 0) -> FaultyProxy:
    """Start a `FaultyProxy` in front of the server at `target` (an `http://host:port` endpoint)."""
    import http.client
    import random
    import threading
    from http.server import BaseHTTPRequestHandler
    from urllib.parse import urlsplit

    upstream = urlsplit(target)
    proxy = FaultyProxy("", target, rate, seed)
    proxy._coin = random.Random(seed)
    lock = threading.Lock()
    hop_by_hop = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet, as the servers are
            pass

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with lock:
                verdict = proxy._verdict(self.command, self.path)
                proxy.failed += verdict is not None
            if verdict is not None:
                reply = b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"
                if verdict == 403:
                    reply = b"<Error><Code>AccessDenied</Code><Message>injected refusal</Message></Error>"
                self.send_response(verdict)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
                return
            connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in hop_by_hop}
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            self.send_response(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in hop_by_hop | {"content-length"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            connection.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _relay

    server = _serve_on_loopback(Handler, "faulty-proxy")
    proxy.endpoint = f"http://{LOOPBACK}:{server.server_address[1]}"
    proxy._server = server
    return proxy


def _serve_on_loopback(handler: type, name: str):
    """A threaded HTTP server (``http.server``'s) on a free loopback port, serving from a daemon thread
    named ``name``."""
    import threading
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer((LOOPBACK, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server


GOOGLE_TOKEN_URL = "https://www.googleapis.com/oauth2/v4/token"
"""Where TensorStore (and Google's older clients) exchange a service account's signed JWT for an access
token: fixed in its code, whatever the key file's `token_uri` says."""


@dataclass
class GoogleOAuth:
    """Google's token endpoint on loopback, reached as Google's clients reach the real one: through an HTTPS
    proxy (`HTTPS_PROXY`) that answers `CONNECT www.googleapis.com:443` by terminating TLS itself, with a
    certificate for www.googleapis.com signed by a test CA (`TENSORSTORE_CA_BUNDLE`). The proxy connects
    nowhere: a CONNECT to any other host is refused, so nothing leaves loopback.

    A service account's key file (`service_account`) is what a user names in `GOOGLE_APPLICATION_CREDENTIALS`.
    A client signs a JWT with its private key and posts it to `GOOGLE_TOKEN_URL`; the endpoint checks the
    JWT as Google does (RS256 signature against the account's public key, issuer, audience, lifetime) and
    answers with `token` (count: `issued`), or refuses it with Google's 400 (`invalid_grant`, count:
    `refused`). A GCS emulator that requires `token` (`GcsServer.checking_credentials(oauth.token)`) then
    accepts only requests whose credentials were exchanged here. `environ(gcs)` points a client at both:
    the emulator through `TENSORSTORE_GCS_HTTP_URL` (direct: `NO_PROXY`), not `STORAGE_EMULATOR_HOST`,
    under which clients go anonymous.
    """

    proxy: str
    ca_bundle: Path
    token: str
    issued: int = 0
    refused: int = 0
    _keys: dict[str, tuple[str, Any]] = field(default_factory=dict, repr=False)  # key id: (email, public key)
    _server: Any = field(default=None, repr=False)

    def environ(self, gcs: GcsServer) -> dict[str, str]:
        """The variables that send a client's token requests here and its storage requests to `gcs`."""
        direct = f"{LOOPBACK},localhost"
        return {
            "HTTPS_PROXY": self.proxy,
            "https_proxy": self.proxy,
            "http_proxy": self.proxy,  # plain HTTP too (a metadata server's): refused, never forwarded
            "NO_PROXY": direct,
            "no_proxy": direct,
            "TENSORSTORE_CA_BUNDLE": str(self.ca_bundle),
            "TENSORSTORE_GCS_HTTP_URL": gcs.endpoint,
        }

    def service_account(self, path: Path, *, known: bool = True) -> Path:
        """Write a service account's key file at `path`, as Google's console downloads it. Its key is one the
        endpoint knows unless `known` is false (a deleted key, or another project's: refused)."""
        from cryptography.hazmat.primitives import serialization

        key = _rsa_key()
        key_id, email = (
            uuid.uuid4().hex,
            f"meltemi-test@meltemi-test-{uuid.uuid4().hex[:8]}.iam.gserviceaccount.com",
        )
        if known:
            self._keys[key_id] = (email, key.public_key())
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        account = {
            "type": "service_account",
            "project_id": "meltemi-test",
            "private_key_id": key_id,
            "private_key": pem.decode(),
            "client_email": email,
            "client_id": str(uuid.uuid4().int)[:21],
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": "https://oauth2.googleapis.com/token",
        }
        path.write_text(json.dumps(account, indent=2))
        return path

    def refusal(self, form: dict[str, list[str]]) -> dict[str, str] | None:
        """Google's answer to a token request that it refuses (RFC 6749's error object), or None."""
        import base64
        import time

        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        def decoded(part: str) -> bytes:
            return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
            return {"error": "unsupported_grant_type", "error_description": "Invalid grant_type."}
        try:
            header, claims, signature = form["assertion"][0].split(".")
            said, claimed = json.loads(decoded(header)), json.loads(decoded(claims))
            email, public = self._keys[said["kid"]]
            public.verify(
                decoded(signature), f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except (KeyError, ValueError, InvalidSignature):
            return {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        if (
            said.get("alg") != "RS256"
            or claimed.get("iss") != email
            or claimed.get("aud") != GOOGLE_TOKEN_URL
        ):
            return {
                "error": "invalid_grant",
                "error_description": "Invalid JWT: the issuer or audience is wrong.",
            }
        if not claimed.get("iat", 0) - 300 <= time.time() < claimed.get("exp", 0) <= claimed["iat"] + 3600:
            return {
                "error": "invalid_grant",
                "error_description": "Invalid JWT: Token must be a short-lived token (60 minutes) and in a "
                "reasonable timeframe. Check your iat and exp values in the JWT claim.",
            }
        return None

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _rsa_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def start_google_oauth(directory: Path) -> GoogleOAuth:
    """Start a `GoogleOAuth` on loopback, its CA certificate written into `directory` (ImportError when
    `cryptography` is missing)."""
    import datetime
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler
    from urllib.parse import parse_qs, urlsplit

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    host = urlsplit(GOOGLE_TOKEN_URL).hostname
    now = datetime.datetime.now(datetime.UTC)
    ca_key, server_key = _rsa_key(), _rsa_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "meltemi test CA")])

    def certificate(subject: x509.Name, key: Any, serial: int) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    ca = (
        certificate(ca_name, ca_key, 1)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    served = (
        certificate(server_name, server_key, 2)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca_bundle, chain = directory / "ca.pem", directory / "www.googleapis.com.pem"
    ca_bundle.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    key_pem = server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    chain.write_bytes(served.public_bytes(serialization.Encoding.PEM) + key_pem)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(chain)
    oauth = GoogleOAuth("", ca_bundle, f"ya29.meltemi-{uuid.uuid4().hex}")
    lock = threading.Lock()
    token_path = urlsplit(GOOGLE_TOKEN_URL).path

    class TokenEndpoint(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode("ascii", "replace"))
            refusal = oauth.refusal(form) if self.path == token_path else {"error": "not_found"}
            with lock:
                oauth.issued += refusal is None
                oauth.refused += refusal is not None
            answer = refusal or {"access_token": oauth.token, "token_type": "Bearer", "expires_in": 3599}
            body = json.dumps(answer).encode()
            self.send_response(HTTPStatus.OK if refusal is None else HTTPStatus.BAD_REQUEST)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_CONNECT(self) -> None:
            self.close_connection = True
            if self.path != f"{host}:443":  # this proxy forwards nothing: only the token endpoint is here
                self.send_error(HTTPStatus.FORBIDDEN, "only the test token endpoint is served")
                return
            self.send_response(HTTPStatus.OK, "Connection established")
            self.end_headers()
            try:
                connection = tls.wrap_socket(self.connection, server_side=True)
            except (ssl.SSLError, OSError):
                return
            TokenEndpoint(connection, self.client_address, self.server)  # serves the tunnel until it closes

        def _refuse(self) -> None:
            self.close_connection = True
            self.send_error(HTTPStatus.FORBIDDEN, "only CONNECT to the test token endpoint is served")

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _refuse

    server = _serve_on_loopback(Proxy, "google-oauth")
    oauth.proxy = f"http://{LOOPBACK}:{server.server_address[1]}"
    oauth._server = server
    return oauth


def _started(start, package: str):
    try:
        return start()
    except ImportError as error:
        pytest.skip(f"{package} is not installed (a development dependency: uv sync): {error}")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One S3 server per test process, on loopback."""
    server = _started(start_s3_server, "moto[server]")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    """One GCS emulator per test process, on loopback."""
    server = _started(start_gcs_server, "gcp-storage-emulator")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def google_oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GoogleOAuth]:
    """Google's token endpoint on loopback, behind its HTTPS proxy (one per test process)."""
    oauth = _started(lambda: start_google_oauth(tmp_path_factory.mktemp("google-oauth")), "cryptography")
    yield oauth
    oauth.stop()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The S3 server, with its environment set for this test."""
    for name, value in s3_server.environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return s3_server


@pytest.fixture
def gcs(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> GcsServer:
    """The GCS emulator, with its environment set for this test (the seam's mapping of
    `STORAGE_EMULATOR_HOST` to `TENSORSTORE_GCS_HTTP_URL` is undone after it)."""
    for set_by_the_seam in ("TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING"):
        monkeypatch.setenv(set_by_the_seam, "")  # recorded, so the value the seam sets is undone
        monkeypatch.delenv(set_by_the_seam)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)  # a developer's own, not for it
    for name, value in gcs_server.environ.items():
        monkeypatch.setenv(name, value)
    return gcs_server


def environ_with(*servers: S3Server | GcsServer) -> dict[str, str]:
    """`os.environ` with the servers' variables, for a subprocess."""
    merged = dict(os.environ)
    for server in servers:
        merged |= server.environ
        if isinstance(server, GcsServer):
            merged.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    return merged


def put_in_hub_cache(cache: Path, repo_id: str, kind: str, files: Path, commit: str = "a" * 40) -> Path:
    """`files` (a directory) as the main revision `commit` of the Hub repository `repo_id` (`kind`: model or
    dataset) in the Hub cache `cache`, laid out as huggingface_hub lays it out: each file a blob named by its
    hash, the snapshot's files links to them; returns the snapshot's directory."""
    import hashlib

    repository = cache / "--".join([f"{kind}s", *repo_id.split("/")])
    snapshot = repository / "snapshots" / commit
    for path in sorted(p for p in files.rglob("*") if p.is_file()):
        data = path.read_bytes()
        blob = repository / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / path.relative_to(files)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repository / "refs").mkdir(parents=True, exist_ok=True)
    (repository / "refs" / "main").write_text(commit)
    return snapshot


# Ray's switches for a cluster on loopback, run from this interpreter: by their environment variable (read by
# the nodes and by any driver started as a subprocess) and, where the running process has already read it,
# by their constant in `ray._private.ray_constants`. Under `uv run`, Ray would otherwise ship the working
# directory to every worker and rebuild the environment there.
_RAY_SWITCHES = {
    "ENABLE_RAY_CLUSTER": "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "RAY_ENABLE_UV_RUN_RUNTIME_ENV",
}
RAY_DRIVER_ENVIRON = {variable: "0" for variable in _RAY_SWITCHES.values()}  # for a driver in a subprocess


class LocalRayCluster:
    """A real multi-node Ray cluster on this machine (the datastore's `[ray]` extra), for tests and
    benchmarks of builds on a cluster: a head node with `head_cpus` CPUs and `workers` nodes of one CPU each,
    every node its own raylet on loopback, with no dashboard, no autoscaler and a small object store; this
    process is connected to it (`ray.init`) until `shutdown`.

    `environ` is set for the nodes (None removes a variable): their workers inherit it, as a real node's
    workers inherit what its `ray start` was given, so an emulator's endpoint reaches the tasks.
    `kill_node` ends a node without grace, its workers first, the way a machine is lost; `system_config`
    is Ray's own settings for the cluster (such as how soon a silent node is declared dead).

    This example starts a Ray cluster, so the doctest run skips it (``+SKIP``); the cluster tests run one:

    >>> with LocalRayCluster(workers=2) as cluster:  # doctest: +SKIP
    ...     build_store(files, tokenizer, "s3://bucket/store", cluster=cluster.address)
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        head_cpus: int = 0,
        environ: dict[str, str | None] | None = None,
        object_store_mb: int = 80,
        system_config: dict[str, Any] | None = None,
    ):
        import ray
        from ray.cluster_utils import Cluster

        self._environ = dict(environ or {})
        self._node_args = {"node_ip_address": LOOPBACK, "object_store_memory": object_store_mb << 20}
        with self._ray_environment():
            head = self._node_args | {"num_cpus": head_cpus, "include_dashboard": False, "no_monitor": True}
            if system_config:
                head["_system_config"] = system_config
            self._cluster = Cluster(initialize_head=True, head_node_args=head)
            try:
                for _ in range(workers):
                    self._cluster.add_node(wait=False, num_cpus=1, **self._node_args)
                self._cluster.wait_for_nodes()
                ray.init(address=self.address, log_to_driver=False, logging_level="WARNING")
            except BaseException:
                self._cluster.shutdown()
                raise

    @property
    def address(self) -> str:
        """The head's `host:port`: what `build_store(cluster=...)` and `--ray` take."""
        return self._cluster.address

    @property
    def nodes(self) -> list[Any]:
        """The worker nodes (not the head), oldest first."""
        return list(self._cluster.worker_nodes)

    def add_node(self) -> Any:
        """Start one more worker node of one CPU, and wait until the cluster counts it."""
        with self._ray_environment():
            node = self._cluster.add_node(wait=False, num_cpus=1, **self._node_args)
            self._cluster.wait_for_nodes()
        return node

    @staticmethod
    def worker_pids(node: Any) -> set[int]:
        """The processes a node's raylet started (its workers, and its agents)."""
        raylet = node.all_processes["raylet"][0].process.pid
        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # a process that ended while read
                continue
            if parent == raylet:
                found.add(int(stat.parent.name))
        return found

    def kill_node(self, node: Any) -> None:
        """End a worker node without grace: SIGKILL to its workers, then to its raylet and the rest."""
        import signal

        for pid in self.worker_pids(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._cluster.remove_node(node, allow_graceful=False)

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        self._cluster.shutdown()

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    @contextlib.contextmanager
    def _ray_environment(self) -> Iterator[None]:
        """`environ` and Ray's loopback switches in `os.environ` (and Ray's constants) while nodes start and
        this process connects; everything as it was after."""
        import ray._private.ray_constants as constants

        changes: dict[str, str | None] = {**RAY_DRIVER_ENVIRON, **self._environ}
        saved = {name: os.environ.get(name) for name in changes}
        present = [name for name in _RAY_SWITCHES if hasattr(constants, name)]  # older Rays lack uv's
        saved_constants = {name: getattr(constants, name) for name in present}
        for name in present:
            setattr(constants, name, False)
        for name, value in changes.items():
            _set_variable(name, value)
        try:
            yield
        finally:
            for name, value in saved_constants.items():
                setattr(constants, name, value)
            for name, value in saved.items():
                _set_variable(name, value)


def _set_variable(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
