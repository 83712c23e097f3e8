"""Token stores in object storage: built straight into an S3 or GCS bucket (servers on loopback), the same
objects and bytes as a local build, resumable after a kill, read back through the store reader and
TensorStore's zarr3 driver; a bad bucket fails before any tokenizing."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest
import tensorstore as ts
import zarr

from meltemi.datastore import IncompleteStoreError, TokenizerMismatchError, TokenStore, build_store
from meltemi.datastore.errors import AccessDeniedError, DatastoreError, InputError, NoSuchBucketError
from meltemi.datastore.storage import Directory, storage_context
from meltemi.datastore.testing import environ_with


def bucket_objects(url: str) -> dict[str, bytes]:
    directory = Directory(url)
    return {key: directory.read_bytes(key) for key in directory.list()}


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, stdlib_files, tokenizer_path) -> str:
    out = tmp_path_factory.mktemp("reference") / "store"
    build_store(stdlib_files[:12], tokenizer_path, out, unit_bytes=20_000, chunk_tokens=500, progress=False)
    return str(out)


@pytest.mark.parametrize("server", ["s3", "gcs"])
@pytest.mark.filterwarnings("ignore:Object at manifest.json is not recognized")
def test_a_store_built_into_a_bucket_is_the_local_store_object_for_object(
    request, server, stdlib_files, tokenizer_path, local_reference, tree_bytes
):
    fake = request.getfixturevalue(server)
    url = f"{fake.bucket_url()}/stores/web"
    report = build_store(
        stdlib_files[:12], tokenizer_path, url, unit_bytes=20_000, chunk_tokens=500, progress=False
    )
    assert report.out == url
    assert bucket_objects(url) == tree_bytes(local_reference)  # every array shard, zarr.json, the manifest
    remote, local = TokenStore.open(url, tokenizer=tokenizer_path), TokenStore.open(local_reference)
    assert remote.content_hash == local.content_hash
    starts = np.array([0, 499, 501, local.num_tokens - 64])
    assert np.array_equal(remote.read_ranges(starts, 64), local.read_ranges(starts, 64))
    assert np.array_equal(remote.doc(5), local.doc(5))
    if (
        server == "s3"
    ):  # the GCS emulator ignores suffix byte ranges, which TensorStore reads shard indices with
        stored = ts.open(Directory(url).array_spec("tokens"), context=storage_context()).result()
        assert np.array_equal(stored.read().result(), zarr.open(local_reference, mode="r")["tokens"][:])
    again = build_store(stdlib_files[:12], tokenizer_path, url, unit_bytes=20_000, chunk_tokens=500)
    assert again.already_built


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_build_into_and_reads_from_a_flaky_bucket_retry_to_the_local_stores_bytes(
    request, server, stdlib_files, tokenizer_path, local_reference, tree_bytes, monkeypatch, quick_retries
):
    """A store under load: one request in ten fails with a 503 on its way to the bucket (a proxy in front
    of the server). TensorStore retries them with backoff; the store built is the local one object for
    object, and every read gives the local tokens."""
    from meltemi.datastore.storage import retried_requests
    from meltemi.datastore.testing import start_faulty_proxy

    fake = request.getfixturevalue(server)
    url = f"{fake.bucket_url()}/stores/web"
    proxy = start_faulty_proxy(fake.endpoint, rate=0.1, seed=3)
    monkeypatch.setenv(fake.endpoint_variable, proxy.endpoint)
    retried = retried_requests()
    try:
        build_store(
            stdlib_files[:12], tokenizer_path, url, unit_bytes=20_000, chunk_tokens=500, progress=False
        )
        assert bucket_objects(url) == tree_bytes(local_reference)  # read through the proxy too
        remote, local = TokenStore.open(url), TokenStore.open(local_reference)
        starts = np.arange(0, local.num_tokens - 64, 997)
        assert np.array_equal(remote.read_ranges(starts, 64), local.read_ranges(starts, 64))
        assert all(np.array_equal(remote.doc(i), local.doc(i)) for i in range(0, local.num_docs, 3))
    finally:
        proxy.stop()
    assert proxy.failed > 0 and retried_requests() - retried > 0


KILL_AFTER_PARTS = 2


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_build_into_a_bucket_killed_midway_resumes_to_the_same_bytes(
    request, server, tmp_path, stdlib_files, tokenizer_path, tree_bytes
):
    fake = request.getfixturevalue(server)
    files = stdlib_files[:12]
    local = tmp_path / "local"
    build_store(files, tokenizer_path, local, unit_bytes=4_000, progress=False)
    url = f"{fake.bucket_url()}/stores/killed"
    command = [sys.executable, "-m", "meltemi.datastore", "build", "--input", *files]
    command += ["--tokenizer", tokenizer_path, "--out", url, "--unit-bytes", "4000"]
    env = environ_with(fake) | {"PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    parts = Directory(url)
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        if len([k for k in parts.list(".build/parts/") if k.endswith(".json")]) >= KILL_AFTER_PARTS:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert "manifest.json" not in parts.list()  # killed midway: a few of about 50 units done
    done = [k for k in parts.list(".build/parts/") if k.endswith(".json")]
    assert len(done) >= KILL_AFTER_PARTS
    with pytest.raises(
        IncompleteStoreError, match=rf"its build was tokenizing and stopped after {len(done)} of"
    ):
        TokenStore.open(url)
    finished = subprocess.run(command, env=env, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.startswith(f"{url}: built ")
    assert bucket_objects(url) == tree_bytes(local)


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_missing_bucket_or_refused_keys_fail_before_any_tokenizing(
    request, server, stdlib_files, tokenizer_path, monkeypatch
):
    import meltemi.datastore.build.builder as build

    fake = request.getfixturevalue(server)
    scheme = fake.scheme
    tokenized = []
    monkeypatch.setattr(build, "tokenize_units", lambda *a: tokenized.append(a) or [])
    with pytest.raises(
        NoSuchBucketError, match=rf"^{scheme}://absent-bucket/x: writing a probe object failed"
    ):
        build_store(stdlib_files[:2], tokenizer_path, f"{scheme}://absent-bucket/x", progress=False)
    url = f"{scheme}://{fake.make_bucket()}/x"
    if server == "s3":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unknown")
    with fake.checking_credentials(), pytest.raises(AccessDeniedError, match=rf"^{url}: writing a probe"):
        build_store(stdlib_files[:2], tokenizer_path, url, progress=False)
    assert tokenized == []


def test_the_s3_server_finds_each_requests_service_without_listing_its_package_again(s3, monkeypatch):
    """moto's server lists its own package's directory to find each request's service; the testing module
    has it list once per process (a third of the server's CPU), with the same services."""
    from moto import backends

    directory = Directory(s3.bucket_url())
    directory.write_bytes("a", b"1")  # the server's first requests make its S3 app, once
    package, listdir, listings = os.path.dirname(backends.moto.__file__), os.listdir, []
    monkeypatch.setattr(os, "listdir", lambda path=".": listings.append(path) or listdir(path))
    directory.write_bytes("b", b"2")
    assert directory.read_bytes("b") == b"2" and directory.exists("a")
    assert package not in listings
    services = {name for name in listdir(package) if os.path.isdir(os.path.join(package, name))}
    assert "s3" in backends.list_of_moto_modules() and set(backends.list_of_moto_modules()) <= services


def test_the_cli_says_a_bad_bucket_in_one_line(s3):
    command = [sys.executable, "-m", "meltemi.datastore", "info", "s3://absent-bucket/store"]
    result = subprocess.run(command, env=environ_with(s3), capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.startswith(
        "error: s3://absent-bucket/store: listing failed: the bucket 'absent-bucket'"
    )
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_tokenizer_in_a_bucket_is_read_through_the_seam(
    request, server, tokenizer_path, stdlib_files, tmp_path
):
    fake = request.getfixturevalue(server)
    url = f"{fake.bucket_url()}/tokenizers/tokenizer.json"
    with open(tokenizer_path, "rb") as f:
        Directory(url.rsplit("/", 1)[0]).write_bytes("tokenizer.json", f.read())
    built = build_store(stdlib_files[:2], url, tmp_path / "s", progress=False)
    assert TokenStore.open(built.out, tokenizer=tokenizer_path).num_docs == built.documents
    assert TokenStore.open(built.out, tokenizer=url).num_docs == built.documents  # checked through the seam
    Directory(url.rsplit("/", 1)[0]).write_text("other.json", '{"model": {"vocab": {}}}')
    with pytest.raises(TokenizerMismatchError, match=r"other.json \(sha256 "):
        TokenStore.open(built.out, tokenizer=url.replace("tokenizer.json", "other.json"))
    assert os.path.basename(url) == TokenStore.open(built.out).manifest["tokenizer"]["name"]


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_inputs_in_a_bucket_are_read_through_the_storage_seam_to_the_local_builds_bytes(
    request, server, tmp_path, stdlib_files, tokenizer_path, tree_bytes
):
    """A corpus in a bucket (an object, or every object under a prefix) is read with the seam's endpoint,
    credentials and errors: text and chat builds give the stores the same inputs on disk give."""
    from meltemi.datastore.chat.stdlib import stdlib_chat

    fake = request.getfixturevalue(server)
    bucket = f"{fake.bucket_url()}"
    chat = stdlib_chat(tmp_path / "chat.jsonl", files=stdlib_files[:15])
    texts = [tmp_path / "texts" / name for name in ("a.py", "b.py")]
    (tmp_path / "texts").mkdir()
    for path, source in zip(texts, stdlib_files[:2], strict=True):
        path.write_bytes(open(source, "rb").read())
    corpus = Directory(f"{bucket}/corpus")
    corpus.write_bytes("chat/part-0.jsonl", open(chat, "rb").read())
    corpus.write_bytes("chat/README.md", b"# A chat data set\n")  # as a Hugging Face data set has: not data
    zstd = pa.compress(open(chat, "rb").read(), codec="zstd", asbytes=True)
    corpus.write_bytes("chat-zst/part-0.jsonl.zst", zstd)  # compressed whole, as DCLM's shards are
    for path in texts:
        corpus.write_bytes(f"texts/{path.name}", path.read_bytes())
    options = {"unit_bytes": 5_000, "progress": False}
    build_store(f"{bucket}/corpus/chat", tokenizer_path, tmp_path / "remote-chat", format="chat", **options)
    build_store(chat, tokenizer_path, tmp_path / "local-chat", format="chat", **options)
    remote, local = TokenStore.open(tmp_path / "remote-chat"), TokenStore.open(tmp_path / "local-chat")
    assert remote.content_hash == local.content_hash and remote.num_docs > 100
    build_store(
        f"{bucket}/corpus/chat-zst", tokenizer_path, tmp_path / "remote-zst", format="chat", **options
    )
    assert TokenStore.open(tmp_path / "remote-zst").content_hash == local.content_hash
    build_store(f"{bucket}/corpus/texts/", tokenizer_path, tmp_path / "remote-text", **options)
    build_store([str(p) for p in texts], tokenizer_path, tmp_path / "local-text", **options)
    assert (
        TokenStore.open(tmp_path / "remote-text").content_hash
        == TokenStore.open(tmp_path / "local-text").content_hash
    )
    with pytest.raises(Exception, match=r"corpus/nothing'?: no such object, and no object under it"):
        build_store(f"{bucket}/corpus/nothing", tokenizer_path, tmp_path / "none", **options)
    with pytest.raises(InputError, match=r"corpus/texts/\*\.py'?: a bucket URL cannot be a pattern"):
        build_store(f"{bucket}/corpus/texts/*.py", tokenizer_path, tmp_path / "none", **options)


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_slices_of_one_chunk_read_at_once_each_get_their_values(request, server):
    """Devices restoring their shards of one chunk read it at once: TensorStore coalesces those reads and
    checks they saw one generation of the object (an emulator that does not name it, as GCS does, failed
    every read but the first with "Malformed StorageGeneration")."""
    import numpy as np
    import tensorstore as ts

    from meltemi.datastore.storage import Location, storage_context

    fake = request.getfixturevalue(server)
    location = Location.parse(f"{fake.bucket_url()}/array")
    metadata = {
        "shape": [16, 32],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16, 32]}},
        "data_type": "float32",
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
    }
    spec = {"driver": "zarr3", "kvstore": location.kvstore_spec(), "metadata": metadata, "create": True}
    values = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    ts.open(spec, context=storage_context()).result().write(values).result()
    array = ts.open(
        {"driver": "zarr3", "kvstore": location.kvstore_spec()}, context=storage_context()
    ).result()
    reads = [array[:, i * 4 : (i + 1) * 4].read() for i in range(8)]
    for i, read in enumerate(reads):
        np.testing.assert_array_equal(read.result(), values[:, i * 4 : (i + 1) * 4])


def test_on_gcs_a_missing_bucket_reads_as_empty_and_what_finds_nothing_there_says_so(
    gcs, tokenizer_path, tmp_path
):
    """TensorStore's GCS driver lists nothing and reads missing keys in a bucket that does not exist, so a
    store or input found empty there names the bucket as the other likely mistake (S3 says so itself)."""
    missing = "meltemi-no-such-bucket"
    note = f"(or the bucket '{missing}' does not exist: on GCS, a missing bucket reads as empty)"
    with pytest.raises(DatastoreError) as opened:
        TokenStore.open(f"gs://{missing}/stores/web")
    assert str(opened.value).endswith(f"is not a token store (it has no manifest.json) {note}")
    with pytest.raises(InputError) as built:
        build_store(f"gs://{missing}/corpus", tokenizer_path, tmp_path / "none", progress=False)
    assert str(built.value).endswith(f"no such object, and no object under it {note}")
    bucket = gcs.bucket_url()
    with pytest.raises(DatastoreError) as empty:  # a bucket that exists: the same words, the same note
        TokenStore.open(f"{bucket}/stores/web")
    assert note.replace(missing, bucket.removeprefix("gs://")) in str(empty.value)
