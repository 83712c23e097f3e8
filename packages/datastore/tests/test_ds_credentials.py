"""Which credentials a bucket request carries, decided from the environment; bucket names checked when a
URL is parsed; and a bucket error said in one line, without the log lines of TensorStore's own clients."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltemi.datastore.errors import BadBucketNameError, CredentialsError
from meltemi.datastore.storage import Location
from meltemi.datastore.storage.credentials import Credentials, gcs_credentials, s3_credentials
from meltemi.datastore.storage.failures import storage_error
from meltemi.datastore.storage.native_log import native_log_held

SECRET = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}


def test_s3_credentials_follow_the_environment_and_files_aws_tools_read(tmp_path):
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)

    def kind(env, cloud=None):
        return s3_credentials(env, home=home, cloud=cloud).kind

    assert kind(SECRET) == "environment"
    assert kind({}) == "anonymous" and kind({}, cloud="gce") == "anonymous"
    assert kind({}, cloud="ec2") == "imds"
    assert kind({"AWS_EC2_METADATA_DISABLED": "true"}, cloud="ec2") == "anonymous"
    assert kind({"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/x"}) == "ecs"
    assert kind({"AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token"}) == "default"
    assert kind({"AWS_PROFILE": "lab"}) == "default"
    (home / ".aws" / "config").write_text("[default]\nregion = us-east-1\n")
    assert kind({}) == "default"
    assert kind(SECRET) == "environment"  # the environment's keys come first, as in AWS's chain


def test_gcs_credentials_follow_application_default_credentials_and_emulators(tmp_path):
    home = tmp_path / "home"
    key = tmp_path / "key.json"
    key.write_text("{}")

    def kind(env, cloud=None):
        return gcs_credentials(env, home=home, cloud=cloud).kind

    assert kind({}) == "none" and kind({}, cloud="ec2") == "none"
    assert kind({}, cloud="gce") == "metadata"
    assert kind({"STORAGE_EMULATOR_HOST": "localhost:9023"}) == "emulator"
    assert kind({"GOOGLE_APPLICATION_CREDENTIALS": str(key)}) == "file"
    both = {"STORAGE_EMULATOR_HOST": "localhost:9023", "GOOGLE_APPLICATION_CREDENTIALS": str(key)}
    assert kind(both) == "emulator"  # as Google's clients: anonymous there, whatever else is configured
    assert kind({"GOOGLE_AUTH_TOKEN_FOR_TESTING": "t", "GOOGLE_APPLICATION_CREDENTIALS": str(key)}) == "token"
    gcloud = tmp_path / "gcloud"
    gcloud.mkdir()
    (gcloud / "application_default_credentials.json").write_text("{}")
    assert kind({"CLOUDSDK_CONFIG": str(gcloud)}) == "gcloud"
    assert not gcs_credentials({}, home=home, cloud=None).found


@pytest.mark.parametrize(
    ("decide", "env", "message"),
    [
        (
            s3_credentials,
            {"AWS_ACCESS_KEY_ID": "AKIA"},
            "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not",
        ),
        (
            s3_credentials,
            {"AWS_SHARED_CREDENTIALS_FILE": "/no/such/file"},
            "names /no/such/file, which is not a",
        ),
        (
            gcs_credentials,
            {"GOOGLE_APPLICATION_CREDENTIALS": "/no/key.json"},
            "names /no/key.json, which is not a",
        ),
    ],
)
def test_credentials_named_but_unusable_are_a_clear_error(decide, env, message, tmp_path):
    with pytest.raises(CredentialsError, match=message):
        decide(env, home=tmp_path, cloud=None)


def test_an_s3_location_without_credentials_asks_tensorstore_for_unsigned_requests(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("meltemi.datastore.storage.credentials.cloud_instance", lambda: None)
    spec = Location.parse("s3://meltemi-runs/x").kvstore_spec()
    assert spec["context"]["aws_credentials"] == {"type": "anonymous"}
    monkeypatch.setenv("AWS_PROFILE", "lab")
    assert (
        Location.parse("s3://meltemi-runs/x").kvstore_spec()["context"]["aws_credentials"]["type"]
        == "default"
    )


@pytest.mark.parametrize(
    "url",
    [
        "s3://b/run",
        "s3://ab/run",
        "s3://My-Bucket/run",
        "s3://-bucket/run",
        "s3://bucket-/run",
        "s3://my..bucket/run",
        "s3://192.168.0.1/run",
        "s3://under_score/run",
        f"s3://{'a' * 64}/run",
        "gs://b/run",
        "gs://Caps/run",
        f"gs://{'a' * 64}.b/run",
    ],
)
def test_a_bucket_name_the_store_refuses_is_refused_when_parsed_with_the_rules(url):
    with pytest.raises(BadBucketNameError) as caught:
        Location.parse(url)
    message = str(caught.value)
    assert message.startswith(f"{url}: {url.split('/')[2]!r} is not a valid bucket name; ")
    assert (
        "S3 bucket names have 3 to 63" if url.startswith("s3") else "GCS bucket names have 3 to 63"
    ) in message


@given(st.from_regex(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", fullmatch=True))
def test_every_name_both_stores_accept_parses(name):
    for scheme in ("s3", "gs"):
        assert Location.parse(f"{scheme}://{name}/run").bucket == name
    assert Location.parse(f"gs://{name}_x.{name}/run").bucket == f"{name}_x.{name}"


def test_a_probe_holds_back_absl_log_lines_and_keeps_everything_else_in_order(capfd):
    with native_log_held() as dropped:
        os.write(2, b"before\n")
        os.write(2, b"E1127 00:54:07.118258   19138 common-io:5] static: Failed to open file.\n")
        os.write(2, b"a line of our own\n")
        os.write(2, b"W0101 12:00:00.5 7 google_auth_provider.cc:188] Could not find the credentials file\n")
    assert capfd.readouterr().err == "before\na line of our own\n"
    assert [line[:5] for line in dropped] == [b"E1127", b"W0101"]


def test_a_refused_request_says_that_no_credentials_were_found(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith(("AWS_", "GOOGLE_", "STORAGE_EMULATOR", "CLOUDSDK_", "GCE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("meltemi.datastore.storage.credentials.cloud_instance", lambda: None)
    refused = ValueError("PERMISSION_DENIED: AccessDenied: Access Denied [http_response_code='403']")
    said = str(storage_error("s3://meltemi-runs/x", "writing a probe object", refused))
    assert said.endswith(
        "(PERMISSION_DENIED: AccessDenied: Access Denied); no AWS credentials were found "
        "(no AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/credentials or ~/.aws/config, container or "
        "web-identity role, or EC2 instance): requests are unsigned"
    )
    said = str(storage_error("gs://meltemi-runs/x", "listing", ValueError("PERMISSION_DENIED: no")))
    assert said.endswith(
        "; no Google credentials were found (no GOOGLE_APPLICATION_CREDENTIALS, no gcloud "
        "application-default login, not a Compute Engine VM): requests are anonymous"
    )
    monkeypatch.setenv("AWS_PROFILE", "lab")
    assert str(storage_error("s3://meltemi-runs/x", "listing", refused)).endswith("Access Denied)")


def without_credentials(tmp_path: Path) -> dict[str, str]:
    """This process's environment without any cloud credentials or endpoints, and an empty home."""
    cloud = ("AWS_", "GOOGLE_", "STORAGE_EMULATOR", "TENSORSTORE_", "CLOUDSDK_", "GCE_")
    env = {name: value for name, value in os.environ.items() if not name.startswith(cloud)}
    (tmp_path / "home").mkdir(exist_ok=True)
    return env | {"HOME": str(tmp_path / "home")}


def stderr_of(env: dict[str, str], *args: str) -> str:
    command = [sys.executable, "-m", "meltemi.datastore", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120).stderr


def test_without_credentials_a_bucket_error_is_one_line_for_s3_and_gcs(s3_server, gcs_server, tmp_path):
    """Without credentials TensorStore's AWS client logged nine `E…` lines (its default chain's missing
    files and metadata service) and its Google client one, before the project's own message."""
    bare = without_credentials(tmp_path)
    unreachable = bare | {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_REGION": "us-east-1"}
    said = stderr_of(unreachable, "info", "s3://meltemi-nowhere/store")
    assert said.startswith(
        "error: s3://meltemi-nowhere/store: listing failed: the storage endpoint cannot be"
    )
    assert said.count("\n") == 1, said
    served = bare | {"AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_REGION": "us-east-1"}
    bucket = s3_server.make_bucket()
    assert (
        stderr_of(served, "info", f"s3://{bucket}/x")
        == f"error: s3://{bucket}/x is not a token store (it has no manifest.json)\n"
    )
    # GCS through TensorStore's own variable, so nothing says "emulator": the client looks for
    # application-default credentials, logs that it found none, asks the metadata server (a closed port
    # on loopback here) and goes on anonymously; the emulator answers.
    bucket = gcs_server.make_bucket()
    missing = f" (or the bucket '{bucket}' does not exist: on GCS, a missing bucket reads as empty)"
    google = bare | {"TENSORSTORE_GCS_HTTP_URL": gcs_server.endpoint, "GCE_METADATA_ROOT": "127.0.0.1:9"}
    assert (
        stderr_of(google, "info", f"gs://{bucket}/x")
        == f"error: gs://{bucket}/x is not a token store (it has no manifest.json){missing}\n"
    )
    emulator = bare | {"STORAGE_EMULATOR_HOST": gcs_server.endpoint}  # a user's whole setup for an emulator
    assert (
        stderr_of(emulator, "info", f"gs://{bucket}/x")
        == f"error: gs://{bucket}/x is not a token store (it has no manifest.json){missing}\n"
    )


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_bucket_that_refuses_anonymous_requests_says_that_no_credentials_were_found(
    request, server, tmp_path
):
    fake = request.getfixturevalue(f"{server}_server")
    bare = without_credentials(tmp_path)
    if server == "s3":
        url, doing = f"s3://{fake.make_bucket()}/x", "listing"
        env = bare | {"AWS_ENDPOINT_URL": fake.endpoint, "AWS_REGION": "us-east-1"}
        found = "no AWS credentials were found (no AWS_ACCESS_KEY_ID, AWS_PROFILE"
    else:  # TensorStore's own variable: nothing says "emulator", so requests go without a token; its look
        # for a metadata server goes to a proxy where nothing listens (GCE_METADATA_ROOT would say one is)
        url, doing = f"gs://{fake.make_bucket()}/x", "reading"
        nowhere = {"http_proxy": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
        env = bare | nowhere | {"TENSORSTORE_GCS_HTTP_URL": fake.endpoint}
        found = "no Google credentials were found (no GOOGLE_APPLICATION_CREDENTIALS"
    with fake.checking_credentials():
        said = stderr_of(env, "info", url)
    assert said.startswith(f"error: {url}: {doing} failed: access denied; check the credentials"), said
    assert found in said and said.count("\n") == 1, said


def test_a_service_account_file_named_by_google_application_credentials_is_what_gcs_requests_carry(
    gcs_server, google_oauth, stdlib_files, tokenizer_path, tmp_path
):
    """Application-default credentials as Google's clients find them: TensorStore signs a JWT with the key
    that GOOGLE_APPLICATION_CREDENTIALS names, exchanges it at Google's token endpoint (on loopback: reached
    through HTTPS_PROXY, trusted through a test CA) and carries the token it is given to the store (the
    emulator, through TENSORSTORE_GCS_HTTP_URL, requiring exactly that token). A key the endpoint refuses
    is one line naming the URL, the refusal and the file."""
    key = google_oauth.service_account(tmp_path / "service-account.json")
    env = (
        without_credentials(tmp_path)
        | google_oauth.environ(gcs_server)
        | {"GCE_METADATA_ROOT": "127.0.0.1:9"}
    )
    with_key = env | {"GOOGLE_APPLICATION_CREDENTIALS": str(key)}
    decided = gcs_credentials(with_key, home=tmp_path / "home", cloud=None)
    assert decided == Credentials("file", f"GOOGLE_APPLICATION_CREDENTIALS names {key}")
    url = f"gs://{gcs_server.make_bucket()}/stores/web"
    build = [sys.executable, "-m", "meltemi.datastore", "build", "--input", *stdlib_files[:2]]
    build += ["--tokenizer", tokenizer_path, "--out", url]
    issued = google_oauth.issued
    with gcs_server.checking_credentials(google_oauth.token):
        built = subprocess.run(build, env=with_key, capture_output=True, text=True, timeout=120)
        info = subprocess.run(
            [sys.executable, "-m", "meltemi.datastore", "info", url],
            env=with_key, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        foreign = google_oauth.service_account(tmp_path / "foreign.json", known=False)
        refused = stderr_of(env | {"GOOGLE_APPLICATION_CREDENTIALS": str(foreign)}, "info", url)
    assert built.returncode == 0 and built.stdout.startswith(f"{url}: built "), built.stderr
    assert info.returncode == 0 and url in info.stdout, info.stderr
    assert (
        google_oauth.issued - issued >= 2 and google_oauth.token in gcs_server.bearer_tokens
    )  # each process
    assert refused == (
        f"error: {url}: listing failed: the credentials were refused: the token endpoint answered "
        f"invalid_grant (Invalid JWT Signature.); GOOGLE_APPLICATION_CREDENTIALS names {foreign}\n"
    )
