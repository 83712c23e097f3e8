"""TensorStore's errors said in one line: which URL, what was being done, and which mistake it is.

TensorStore raises `ValueError` with an absl status (`NOT_FOUND: NoSuchBucket: ... [http_response_body=
'<xml...>']`). `storage_error` keeps the status and its first sentence, drops the response body and
headers, and picks the `StorageError` subclass that names the mistake. Credentials that are exchanged for
an access token first (a service account's key, a gcloud login) can be refused by the token endpoint before
any request reaches the bucket; TensorStore then says only "Bad Request [HTTP code 400]", and the OAuth
error in the response body (RFC 6749: `{"error": "invalid_grant", "error_description": ...}`) is what
tells it from the store's own refusal.
"""

from __future__ import annotations

import re

from meltemi.datastore.errors import (
    AccessDeniedError,
    NoSuchBucketError,
    OutOfRangeError,
    PathIsAFileError,
    StorageError,
    UnreachableError,
)
from meltemi.datastore.storage.credentials import decided, hint
from meltemi.datastore.storage.location import url_scheme

_OAUTH_ERROR = re.compile(r'"error"\s*:\s*"(?P<error>[a-z_]+)"')  # a token endpoint's; a store's is an object
_OAUTH_DESCRIPTION = re.compile(r'"error_description"\s*:\s*"(?P<description>[^"\\]*)"')
_DETAILS = re.compile(r"\s*\[[a-z_]+='.*", re.DOTALL)  # TensorStore's [http_response_code='404'] and so on
_UNREACHABLE = (
    "could not connect",
    "couldn't connect",
    "could not resolve",
    "couldn't resolve",
    "connection refused",
    "timeout was reached",
    "timed out",
    "failed to connect",
)
_DENIED = (
    "permission_denied",
    "unauthenticated",
    "accessdenied",
    "invalidaccesskeyid",
    "signaturedoesnotmatch",
)


def reason(error: BaseException) -> str:
    """TensorStore's message, on one line, without the HTTP response it quotes.

    >>> reason(ValueError("NOT_FOUND: NoSuchBucket: gone [http_response_code='404'] [body='<x/>']"))
    'NOT_FOUND: NoSuchBucket: gone'
    """
    text = _DETAILS.sub("", str(error))
    return " ".join(text.split())


def storage_error(
    where: str, doing: str, error: BaseException, *, not_found_is_bucket: bool = False
) -> StorageError:
    """The `StorageError` for `error`, raised by TensorStore while `doing` something at `where`.

    `not_found_is_bucket`: a 404 can only mean the bucket is missing, as when writing or listing (a missing
    key is not an error when reading, an empty prefix lists nothing).

    >>> e = storage_error("s3://my-bucket/x", "writing", ValueError("NOT_FOUND: NoSuchBucket: none"))
    >>> type(e).__name__
    'NoSuchBucketError'
    >>> str(e)
    "s3://my-bucket/x: writing failed: the bucket 'my-bucket' does not exist (NOT_FOUND: NoSuchBucket: none)"
    """
    refused = _token_refusal(str(error))
    if refused:
        found = decided(url_scheme(where))
        return AccessDeniedError(
            f"{where}: {doing} failed: the credentials were refused: the token endpoint answered {refused}"
            f"{f'; {found.reason}' if found and found.found else ''}"
        )
    said = reason(error)
    lowered = said.lower()
    bucket = _bucket(where)
    if "nosuchbucket" in lowered or (not_found_is_bucket and lowered.startswith("not_found") and bucket):
        return NoSuchBucketError(f"{where}: {doing} failed: the bucket {bucket!r} does not exist ({said})")
    if any(word in lowered for word in _DENIED):
        return AccessDeniedError(
            f"{where}: {doing} failed: access denied; check the credentials and their permissions ({said})"
            f"{hint(url_scheme(where))}"
        )
    if any(word in lowered for word in _UNREACHABLE):
        return UnreachableError(f"{where}: {doing} failed: the storage endpoint cannot be reached ({said})")
    if lowered.startswith("out_of_range"):
        return OutOfRangeError(f"{where}: {doing} failed: the object is shorter than that ({said})")
    if "not a directory" in lowered or "non-directory" in lowered:
        return PathIsAFileError(f"{where}: {doing} failed: a file is in the way of this directory ({said})")
    return StorageError(f"{where}: {doing} failed ({said})")


def _token_refusal(text: str) -> str | None:
    r"""The OAuth error a token endpoint refused credentials with, from TensorStore's message (the response
    body it quotes, its quotes escaped), or None when the error is not a token endpoint's.

    >>> body = '{\"error\": \"invalid_grant\", \"error_description\": \"Invalid JWT Signature.\"}'
    >>> _token_refusal(f"Bad Request [HTTP code 400] [http_response_body='{body}']")
    'invalid_grant (Invalid JWT Signature.)'
    >>> _token_refusal("PERMISSION_DENIED: no [http_response_body='{\"error\": {\"code\": 401}}']") is None
    True
    """
    body = text.partition("http_response_body=")[2].replace('\\"', '"')
    error = _OAUTH_ERROR.search(body)
    if error is None:
        return None
    description = _OAUTH_DESCRIPTION.search(body)
    return f"{error['error']} ({description['description']})" if description else error["error"]


def _bucket(where: str) -> str | None:
    match = re.match(r"^(?:gs|s3)://([^/]+)", where)
    return match.group(1) if match else None
