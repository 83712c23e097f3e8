"""The servers as pytest fixtures (the `testing` extra, which brings pytest and the servers' packages):
import them into a `conftest.py`.

    from meltemi.datastore.testing.fixtures import gcs, gcs_server, s3, s3_server  # noqa: F401

`s3_server` and `gcs_server` start one server per test process (session scope: once per xdist worker); `s3`
and `gcs` also set, for one test, the standard environment variables a user would set. Where a server's
package is not installed, the tests that use it are skipped, saying so.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from meltemi.datastore.testing.object_stores import GcsServer, S3Server, start_gcs_server, start_s3_server
from meltemi.datastore.testing.proxies import GoogleOAuth, start_google_oauth


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
