"""Between a client and a server on loopback: `FaultyProxy` fails a share of requests, or every matching one;
`GoogleOAuth` is Google's token endpoint behind an HTTPS proxy that ends TLS for www.googleapis.com with a
test CA, so a service account's key file is exchanged for a token as Google's clients do it.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

from meltemi.datastore.testing.object_stores import LOOPBACK, GcsServer


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
                if self.command != "HEAD":  # a HEAD's reply has no body: bytes sent would start the next
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

    server = serve_on_loopback(Handler, "faulty-proxy")
    proxy.endpoint = f"http://{LOOPBACK}:{server.server_address[1]}"
    proxy._server = server
    return proxy


def serve_on_loopback(handler: type, name: str):
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

    server = serve_on_loopback(Proxy, "google-oauth")
    oauth.proxy = f"http://{LOOPBACK}:{server.server_address[1]}"
    oauth._server = server
    return oauth
