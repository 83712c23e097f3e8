"""Object-storage servers on loopback for tests: an S3 server (moto) and a GCS emulator.

This package imports no test framework, only the datastore's own dependencies; each server's package is
imported when it starts (`start_s3_server()`, `start_gcs_server()`, each with `stop()`). The workspace's
pytest fixtures over them live in its root `conftest.py`, outside every wheel: `s3_server` and `gcs_server`
start one server per test process (session scope: once per xdist worker) on 127.0.0.1 and a free port;
`s3` and `gcs` also set, for one test, the standard environment variables a
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

from meltemi.datastore.testing.hub import put_in_hub_cache
from meltemi.datastore.testing.object_stores import (
    LOOPBACK,
    TEST_KEYS,
    GcsServer,
    S3Server,
    environ_with,
    start_gcs_server,
    start_s3_server,
    unique_bucket,
)
from meltemi.datastore.testing.proxies import FaultyProxy, GoogleOAuth, start_faulty_proxy, start_google_oauth
from meltemi.datastore.testing.ray_cluster import RAY_DRIVER_ENVIRON, LocalRayCluster

__all__ = [
    "LOOPBACK",
    "RAY_DRIVER_ENVIRON",
    "TEST_KEYS",
    "FaultyProxy",
    "GcsServer",
    "GoogleOAuth",
    "LocalRayCluster",
    "S3Server",
    "environ_with",
    "put_in_hub_cache",
    "start_faulty_proxy",
    "start_gcs_server",
    "start_google_oauth",
    "start_s3_server",
    "unique_bucket",
]
