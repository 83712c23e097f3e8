"""Which credentials requests to a bucket carry, decided from the standard environment before the first
request, with the reason.

Left to itself, TensorStore's AWS client walks AWS's default chain and logs an error line for every link it
finds missing (nine `E…` lines on a laptop without `~/.aws`, again for every new context), and its Google
client logs one when no application-default credentials exist. Deciding here, from the same variables and
files those chains read, asks TensorStore only for what is there, and lets a refused request say what was
(not) found:

- S3: `AWS_ACCESS_KEY_ID` → the environment's keys; a profile (`AWS_PROFILE`, `AWS_SHARED_CREDENTIALS_FILE`,
  `AWS_CONFIG_FILE`, `~/.aws/credentials` or `~/.aws/config`) or a web-identity role → AWS's default chain;
  a container role (`AWS_CONTAINER_CREDENTIALS_*`) → ECS's endpoint; an EC2 instance → its metadata
  service; otherwise unsigned (anonymous) requests, which public buckets and most emulators accept.
- GCS: `GOOGLE_AUTH_TOKEN_FOR_TESTING` → that token; with `STORAGE_EMULATOR_HOST` → anonymous, as Google's
  own clients are against an emulator; `GOOGLE_APPLICATION_CREDENTIALS` → that file; gcloud's
  application-default file → it; a Compute Engine VM → its metadata server; otherwise none.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from meltemi.datastore.errors import CredentialsError

Cloud = Literal["ec2", "gce"]
_NOT_FOUND = ("anonymous", "none")
EMULATOR_TOKEN = "meltemi-emulator"
"""The bearer token sent to a GCS emulator when no credentials were given (emulators accept any)."""


@dataclass(frozen=True)
class Credentials:
    """A decision: the credentials kind requests carry, and why.

    For S3, `kind` is TensorStore's `aws_credentials` type (`environment`, `default`, `ecs`, `imds` or
    `anonymous`); for GCS it is `token`, `file`, `emulator`, `gcloud`, `metadata` or `none`.

    >>> s3_credentials({"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"}, home=Path("/nowhere"))
    Credentials(kind='environment', reason='AWS_ACCESS_KEY_ID is set')
    >>> s3_credentials({}, home=Path("/nowhere"), cloud=None).found
    False
    """

    kind: str
    reason: str

    @property
    def found(self) -> bool:
        """Whether requests are signed with credentials of some kind."""
        return self.kind not in _NOT_FOUND


def s3_credentials(
    environ: Mapping[str, str] | None = None,
    *,
    home: Path | None = None,
    cloud: Cloud | None | Literal["detect"] = "detect",
) -> Credentials:
    """The credentials S3 requests carry, from the environment AWS's tools read.

    `cloud` is the VM this runs on, looked up (`cloud_instance()`) unless given.

    >>> s3_credentials({"AWS_PROFILE": "lab"}, home=Path("/nowhere"), cloud=None).kind
    'default'
    >>> s3_credentials({}, home=Path("/nowhere"), cloud="ec2").kind
    'imds'
    >>> print(s3_credentials({}, home=Path("/nowhere"), cloud=None).reason)
    no AWS credentials were found (no AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/credentials or ~/.aws/config, \
container or web-identity role, or EC2 instance): requests are unsigned
    """
    env = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    if env.get("AWS_ACCESS_KEY_ID"):
        if not env.get("AWS_SECRET_ACCESS_KEY"):
            raise CredentialsError(
                "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both (and AWS_SESSION_TOKEN "
                "for temporary keys), or unset AWS_ACCESS_KEY_ID to use a profile"
            )
        return Credentials("environment", "AWS_ACCESS_KEY_ID is set")
    for variable in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        named = env.get(variable)
        if named and not Path(named).expanduser().is_file():
            raise CredentialsError(f"{variable} names {named}, which is not a file")
        if named:
            return Credentials("default", f"{variable} names {named}")
    if env.get("AWS_PROFILE"):
        return Credentials("default", f"AWS_PROFILE is {env['AWS_PROFILE']!r}")
    for file in (home / ".aws" / "credentials", home / ".aws" / "config"):
        if file.is_file():
            return Credentials("default", f"{file} exists")
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return Credentials("default", "AWS_WEB_IDENTITY_TOKEN_FILE is set (a web-identity role)")
    if env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        return Credentials("ecs", "AWS_CONTAINER_CREDENTIALS_* is set (a container role)")
    on = cloud_instance() if cloud == "detect" else cloud
    if on == "ec2" and env.get("AWS_EC2_METADATA_DISABLED", "").lower() != "true":
        return Credentials("imds", "this is an EC2 instance (its metadata service)")
    return Credentials(
        "anonymous",
        "no AWS credentials were found (no AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/credentials or "
        "~/.aws/config, container or web-identity role, or EC2 instance): requests are unsigned",
    )


def gcs_credentials(
    environ: Mapping[str, str] | None = None,
    *,
    home: Path | None = None,
    cloud: Cloud | None | Literal["detect"] = "detect",
) -> Credentials:
    """The credentials GCS requests carry, found where Google's clients look (application-default
    credentials), anonymous against an emulator.

    >>> gcs_credentials({"STORAGE_EMULATOR_HOST": "localhost:9023"}, home=Path("/nowhere")).kind
    'emulator'
    >>> gcs_credentials({}, home=Path("/nowhere"), cloud=None).found
    False
    """
    env = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    if env.get("GOOGLE_AUTH_TOKEN_FOR_TESTING"):
        return Credentials("token", "GOOGLE_AUTH_TOKEN_FOR_TESTING is set")
    if env.get("STORAGE_EMULATOR_HOST"):  # Google's clients ignore application-default credentials there
        return Credentials("emulator", f"STORAGE_EMULATOR_HOST is {env['STORAGE_EMULATOR_HOST']} (anonymous)")
    named = env.get("GOOGLE_APPLICATION_CREDENTIALS")
    if named:
        if not Path(named).expanduser().is_file():
            raise CredentialsError(f"GOOGLE_APPLICATION_CREDENTIALS names {named}, which is not a file")
        return Credentials("file", f"GOOGLE_APPLICATION_CREDENTIALS names {named}")
    gcloud = Path(env["CLOUDSDK_CONFIG"]) if env.get("CLOUDSDK_CONFIG") else home / ".config" / "gcloud"
    adc = gcloud / "application_default_credentials.json"
    if adc.is_file():
        return Credentials("gcloud", f"{adc} exists (gcloud auth application-default login)")
    on = cloud_instance() if cloud == "detect" else cloud
    if on == "gce" or env.get("GCE_METADATA_ROOT") or env.get("GCE_METADATA_HOST"):
        return Credentials("metadata", "this is a Compute Engine VM (its metadata server)")
    return Credentials(
        "none",
        "no Google credentials were found (no GOOGLE_APPLICATION_CREDENTIALS, no gcloud application-default "
        "login, not a Compute Engine VM): requests are anonymous",
    )


@functools.cache
def cloud_instance(dmi: Path = Path("/sys/class/dmi/id")) -> Cloud | None:
    """The cloud whose VM this is, from the firmware's identity (no network request), or None; read once
    per process (every bucket location's spec asks).

    >>> cloud_instance(Path("/nowhere")) is None
    True
    """

    def read(name: str) -> str:
        try:
            return (dmi / name).read_text(errors="replace").strip()
        except OSError:
            return ""

    if "Amazon EC2" in read("sys_vendor") or read("board_asset_tag").startswith("i-"):
        return "ec2"
    if "Google" in read("product_name") or "Google" in read("bios_vendor"):
        return "gce"
    return None


def decided(scheme: str | None) -> Credentials | None:
    """The credentials a request to a bucket of `scheme` carries now; None for other schemes, or when the
    environment names credentials that cannot be used (`CredentialsError`, said before any request).

    >>> decided("memory") is None
    True
    """
    if scheme not in ("s3", "gs"):
        return None
    try:
        return s3_credentials() if scheme == "s3" else gcs_credentials()
    except CredentialsError:
        return None


def hint(scheme: str | None) -> str:
    """What to add to a refused request's message: why nothing was signed, when nothing was found.

    >>> hint("memory")
    ''
    """
    found = decided(scheme)
    return "" if found is None or found.found else f"; {found.reason}"
