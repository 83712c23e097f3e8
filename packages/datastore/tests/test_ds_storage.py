"""The storage seam: locations parse the same on every spelling, a directory behaves the same on every
backend (local, memory, an S3 server, a GCS emulator), a log survives segment rewrites, and every bad
location is one line naming the URL and the mistake, raised before any work."""

import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.datastore.errors import (
    AccessDeniedError,
    BadUrlError,
    NoSuchBucketError,
    OutOfRangeError,
    PathIsAFileError,
    StorageError,
    UnknownSchemeError,
    UnreachableError,
)
from meltemi.datastore.storage import (
    Appender,
    Directory,
    Location,
    check_readable,
    check_writable,
    read_appended,
)

_SEGMENT = st.text("abcxyz019-_.", min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))


def _spelled(scheme: str, segments: list[str]) -> str:
    path = "/".join(segments)
    spellings = {"gs": f"gs://bucket/{path}", "s3": f"s3://bucket/{path}", "memory": f"memory://{path}"}
    return spellings.get(scheme, f"file:///{path}" if scheme == "file" else f"/{path}")


@given(
    scheme=st.sampled_from(["gs", "s3", "memory", "file", "local"]),
    parts=st.lists(_SEGMENT, min_size=0, max_size=4),
    key=st.lists(_SEGMENT, min_size=1, max_size=3),
)
def test_a_location_is_the_same_place_under_every_spelling_and_join(scheme, parts, key):
    """From any place, a bucket's or a scheme's root included (``memory://``, ``file:///``, ``/``)."""
    text = _spelled(scheme, parts)
    location = Location.parse(text)
    assert Location.parse(location.url) == location
    if parts:  # (a root's extra slash is POSIX's "//", a place of its own)
        assert Location.parse(text + "/") == location
    joined = location / "/".join(key)
    assert joined == Location.parse(_spelled(scheme, parts + key)) and joined.scheme == location.scheme
    assert Location.parse(joined.url) == joined
    assert Location.parse(str(joined)) == joined  # what messages show is a URL that names the same place
    if scheme != "gs" and scheme != "s3":  # a key under a place is the place's kvstore prefix and the key
        prefix = location.kvstore_spec()["path"]
        assert joined.kvstore_spec()["path"] == prefix + "/".join(key) + "/" and "//" not in prefix


def test_the_local_root_is_a_directory_like_any_other(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    for root in ("/", "file:///"):
        assert Directory(root).read_text(f"{tmp_path}/notes.txt".lstrip("/")) == "mine"


def test_a_url_is_never_made_a_local_path():
    assert Location.parse("gs://my-bucket/run").local_path is None
    assert str(Location.parse("gs://my-bucket/run") / "ckpt") == "gs://my-bucket/run/ckpt"
    with pytest.raises(BadUrlError) as caught:
        Location.parse("gs:/my-bucket/run")
    assert (
        str(caught.value) == "gs:/my-bucket/run: a URL needs two slashes after its scheme: gs://my-bucket/run"
    )


def test_a_local_path_from_tilde_is_the_home_directory_s_and_is_shown_as_given(monkeypatch, tmp_path):
    """As a shell reads it, and as fsspec reads the datastore's inputs: a YAML config has no shell."""
    monkeypatch.setenv("HOME", str(tmp_path))
    location = Location.parse("~/runs/tiny")
    assert location.local_path == tmp_path / "runs" / "tiny" and str(location) == "~/runs/tiny"
    assert Location.parse("~") == Location.parse(str(tmp_path))
    assert Location.parse("./~/x").local_path == Path.cwd() / "~" / "x"  # only a leading ~ is the home's
    Directory("~/runs/tiny").write_text("a.txt", "here")
    assert (tmp_path / "runs" / "tiny" / "a.txt").read_text() == "here"


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        (
            "hdfs://nn/data",
            UnknownSchemeError,
            "hdfs://nn/data: unknown scheme 'hdfs'; a location is a local path or a file://, gs://, s3:// or "
            "memory:// URL",
        ),
        ("s3:///stores/x", BadUrlError, "s3:///stores/x: no bucket name; write s3://BUCKET/PATH"),
        ("gs://", BadUrlError, "gs://: no bucket name; write gs://BUCKET/PATH"),
        (
            "file://rel/x",
            BadUrlError,
            "file://rel/x: a file:// URL needs an absolute path (file:///abs/path)",
        ),
    ],
)
def test_a_malformed_location_is_one_line_naming_it(text, error, message):
    with pytest.raises(error) as caught:
        check_writable(text)
    assert str(caught.value) == message


def test_a_directory_reads_writes_lists_and_deletes_alike_on_every_backend(any_location):
    d = Directory(check_writable(any_location))
    assert d.list() == [] and d.read_bytes("a") is None and not d.exists("a")
    d.write_bytes("a", b"one")
    d.write_bytes("a", b"two")  # replaced whole
    d.write_text("x/y/z.txt", "zed\n")
    d.write_json("x/m.json", {"b": 1, "a": [2]})
    d.write_bytes("xa", b"-")
    assert d.read_bytes("a") == b"two" and d.read_text("x/y/z.txt") == "zed\n"
    assert d.read_text("x/m.json") == '{\n "a": [\n  2\n ],\n "b": 1\n}\n'
    assert d.read_range("a", 1) == b"wo" and d.read_range("a", 0, 1) == b"t"
    assert d.exists("xa") and d.read_bytes("xa") == b"-"
    assert d.list() == ["a", "x/m.json", "x/y/z.txt", "xa"]
    assert d.list("x/") == ["x/m.json", "x/y/z.txt"] and (d / "x").list() == ["m.json", "y/z.txt"]
    d.delete_prefix("x/")
    assert d.list() == ["a", "xa"]
    d.delete("a")
    d.delete("never-there")
    assert d.list() == ["xa"]
    assert check_readable(any_location) == d.location


def test_a_byte_range_is_read_in_place_and_one_past_the_end_is_named_on_every_backend(any_location):
    """What a reader of a file format in a bucket needs: any range of an object in one request, and a range
    the object does not hold (a file cut short) one `OutOfRangeError` line naming it, whatever the store."""
    d = Directory(any_location)
    d.write_bytes("f.bin", bytes(range(100)))
    assert d.read_range("f.bin", 0, 8) == bytes(range(8)) and d.read_range("f.bin", 90, 100) == bytes(
        range(90, 100)
    )
    assert d.read_range("f.bin", 40, 40) == b"" and d.read_range("f.bin", 95) == bytes(range(95, 100))
    assert d.read_range("f.bin", 100) == b"" and d.read_range("f.bin", 150) == b""
    assert d.read_range("absent.bin", 0, 8) is None
    for start, stop in [(96, 104), (100, 108), (200, 208)]:
        with pytest.raises(OutOfRangeError) as caught:
            d.read_range("f.bin", start, stop)
        message = str(caught.value)
        assert message.startswith(
            f"{d.where('f.bin')}: reading bytes {start}..{stop} failed: the object is shorter"
        )
        assert "\n" not in message


def test_a_probe_left_by_a_killed_process_is_removed_by_the_next_check(any_location):
    """A process killed between writing its probe and deleting it leaves the probe; the next check removes
    it, and keeps everything else (a store's resume compares the whole tree with a fresh build's)."""
    d = Directory(any_location)
    d.write_bytes(".meltemi-probe-0123abcd", b"probe")
    d.write_bytes("kept", b"data")
    check_writable(any_location)
    assert d.list() == ["kept"]


@settings(max_examples=15)
@given(
    # text a log can hold: any character but line breaks and lone surrogates (which UTF-8 cannot encode)
    lines=st.lists(
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=20),
        max_size=30,
    ),
    flushes=st.sets(st.integers(0, 30)),
    segment_bytes=st.integers(1, 64),
    reopen_at=st.integers(0, 30),
)
def test_an_appended_log_reads_back_every_flushed_line_in_order(lines, flushes, segment_bytes, reopen_at):
    d = Directory(f"memory://appender/{id(lines)}-{len(flushes)}-{segment_bytes}-{reopen_at}")
    d.delete_prefix()
    log = Appender(d, "run/metrics.jsonl", segment_bytes=segment_bytes)
    for i, line in enumerate(lines):
        if i == reopen_at:
            log.flush()
            log = Appender(d, "run/metrics.jsonl", segment_bytes=segment_bytes)
        log.append(line)
        if i in flushes:
            log.flush()
            flushed = "".join(f"{x}\n" for x in lines[: i + 1])
            assert read_appended(d, "run/metrics.jsonl").decode() == flushed
    log.flush()
    assert read_appended(d, "run/metrics.jsonl").decode() == "".join(f"{x}\n" for x in lines)
    sizes = [len(d.read_bytes(k)) for k in d.list("run/")]
    assert all(sizes) and (len(sizes) <= 1 or sum(sizes) > segment_bytes)


def test_an_object_written_after_a_killed_writer_is_only_the_new_bytes(tmp_path):
    """A process SIGKILLed while TensorStore's `file` driver wrote `<key>.__lock` leaves that file behind,
    longer than the next object; the next write must not keep its tail (it did: TensorStore does not
    truncate the file it writes into)."""
    d = Directory(tmp_path)
    d.write_text("metrics.jsonl", '{"step": 1}\n')
    (tmp_path / "metrics.jsonl.__lock").write_text("".join(f'{{"step": {s}}}\n' for s in range(1, 10)))
    d.write_text("metrics.jsonl", '{"step": 1}\n{"step": 2}\n')
    assert d.read_text("metrics.jsonl") == '{"step": 1}\n{"step": 2}\n'
    assert read_appended(d, "metrics.jsonl") == b'{"step": 1}\n{"step": 2}\n'


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_log_in_a_bucket_is_plain_segments_rewritten_not_appended(request, server):
    fake = request.getfixturevalue(server)
    d = Directory(f"{fake.bucket_url()}/run")
    with Appender(d, "metrics.jsonl", segment_bytes=32) as log:
        for step in range(6):
            log.append(f'{{"step": {step}}}')
            if step % 2:
                log.flush()
    assert d.list() == ["metrics.jsonl", "metrics.jsonl.1", "metrics.jsonl.2"]
    assert d.read_text("metrics.jsonl") == '{"step": 0}\n{"step": 1}\n'
    assert read_appended(d, "metrics.jsonl").decode().splitlines()[-1] == '{"step": 5}'
    assert read_appended(d, "other.jsonl") == b""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_missing_bucket_is_one_line_naming_it(s3, gcs):
    for url in ("s3://no-such-bucket-here/run", "gs://no-such-bucket-here/run"):
        with pytest.raises(NoSuchBucketError) as caught:
            check_writable(url)
        message = str(caught.value)
        expected = f"{url}: writing a probe object failed: the bucket 'no-such-bucket-here' does not exist ("
        assert message.startswith(expected)
        assert "\n" not in message and "<?xml" not in message
    with pytest.raises(NoSuchBucketError, match=r"^s3://no-such-bucket-here/run: listing failed: the bucket"):
        check_readable("s3://no-such-bucket-here/run")


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_refused_credentials_are_one_line_naming_the_url(request, server, monkeypatch):
    fake = request.getfixturevalue(server)
    url = f"{fake.bucket_url()}/run"
    if server == "s3":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "not-a-key-the-server-knows")
        refused, read = "InvalidAccessKeyId", "listing"
    else:  # the emulator now requires a token this process does not send
        refused, read = "Invalid Credentials", "reading"  # TensorStore's GCS listing drops the 401
    with fake.checking_credentials():
        for check, doing in ((check_writable, "writing a probe object"), (check_readable, read)):
            with pytest.raises(AccessDeniedError) as caught:
                check(url)
            message = str(caught.value)
            assert message.startswith(f"{url}: {doing} failed: access denied; check the credentials")
            assert refused in message and "\n" not in message
            assert "meltemi-test-secret" not in message


def test_an_unreachable_endpoint_is_one_line_naming_the_url(monkeypatch, s3, gcs):
    port = _closed_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", f"http://127.0.0.1:{port}")
    for url in ("s3://bucket/run", "gs://bucket/run"):
        with pytest.raises(UnreachableError) as caught:
            check_writable(url)
        assert str(caught.value).startswith(
            f"{url}: writing a probe object failed: the storage endpoint cannot be reached ("
        )


def test_a_first_read_fails_as_fast_as_a_probe_and_a_transient_failure_is_retried_as_usual(
    monkeypatch, request, s3
):
    """A command's first reads (its config, tokenizer, base or inputs in a bucket) say an endpoint that cannot
    be reached after a probe's few retries, not the default's minutes of backoff; a 503 is still retried."""
    from meltemi.datastore.storage import PROBE_RETRIES, read_object, retried_requests
    from meltemi.datastore.storage.inputs import list_objects
    from meltemi.datastore.testing import start_faulty_proxy

    bucket = s3.bucket_url()
    url = f"{bucket}/first/config.yaml"
    Directory(f"{bucket}/first").write_text("config.yaml", "seed: 1\n")
    proxy = start_faulty_proxy(s3.endpoint, rate=0.6, seed=11)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        assert all(read_object(url) == b"seed: 1\n" for _ in range(8))  # some failed 3 times, then retried
        assert list_objects(url) == [url]
    finally:
        proxy.stop()
    assert proxy.failed >= 8
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    retried = retried_requests()
    for first_read in (read_object, list_objects):
        with pytest.raises(UnreachableError, match=r"^s3://.*/first/config.yaml: .* cannot be reached"):
            first_read(url)
    assert retried_requests() - retried <= 2 * PROBE_RETRIES.max_retries  # the default retries 16 times


def test_a_file_where_a_directory_should_be_is_one_line(tmp_path):
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(PathIsAFileError, match=r"taken: writing a probe object failed: a file is in the way"):
        check_writable(tmp_path / "taken")
    assert issubclass(PathIsAFileError, StorageError)


def test_a_local_write_reaches_the_disk_before_it_returns(tmp_path):
    """What durable.py did by hand (write aside, fsync, rename, fsync the directory), TensorStore's file
    driver does when `file_io_sync` is on: the seam turns it on explicitly, and leaves nothing aside."""
    d = Directory(tmp_path)
    assert d.kvstore.spec(retain_context=True).to_json()["file_io_sync"] is True
    d.write_bytes("a/b.json", b"{}")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b.json"]


@pytest.mark.parametrize("doing", ["listing", "writing a probe object"])
def test_a_404_from_a_listing_or_a_write_is_a_missing_bucket_and_from_a_read_is_no_error_of_its_own(doing):
    from meltemi.datastore.storage.failures import storage_error

    gone = ValueError("NOT_FOUND: The specified bucket does not exist. [http_response_code='404']")
    error = storage_error("gs://meltemi-gone/run", doing, gone, not_found_is_bucket=True)
    assert isinstance(error, NoSuchBucketError)
    assert str(error) == (
        f"gs://meltemi-gone/run: {doing} failed: the bucket 'meltemi-gone' does not exist "
        "(NOT_FOUND: The specified bucket does not exist.)"
    )
    assert not isinstance(storage_error("gs://meltemi-gone/run", "reading", gone), NoSuchBucketError)


def test_a_file_to_write_is_named_by_its_probed_folder_and_key_and_a_folder_is_refused(tmp_path):
    """One seam for a command's single output file (evaluation results, a saved conversation)."""
    from meltemi.datastore.errors import NotAFileError
    from meltemi.datastore.storage import file_to_write

    folder, key = file_to_write(str(tmp_path / "new" / "chat.json"), "chat.json")
    assert (folder.location, key) == (Location.parse(tmp_path / "new"), "chat.json")
    folder.write_text(key, "[]")
    assert (tmp_path / "new" / "chat.json").read_text() == "[]"
    for named in (f"{tmp_path}/", str(tmp_path), "memory://doc/files/", "memory://"):
        with pytest.raises(NotAFileError, match=r"names a folder; name a file, e\.g\. .*/chat\.json$"):
            file_to_write(named, "chat.json")
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(PathIsAFileError):  # the folder is probed: a file where it should be
        file_to_write(str(tmp_path / "taken" / "chat.json"), "chat.json")
