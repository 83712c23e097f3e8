"""A location that passed its probe is not probed again in the process, unless asked or the environment that
picks its endpoint and credentials changed."""

import types

import pytest

import meltemi.datastore.storage.directory as directory_module
from meltemi.datastore.errors import AccessDeniedError
from meltemi.datastore.storage import check_writable


def test_a_location_checked_once_is_probed_again_only_when_the_environment_changes(s3, monkeypatch):
    probes = []
    real = directory_module.uuid  # a uuid4 names each probe object: counted in this module alone
    counting = types.SimpleNamespace(uuid4=lambda: probes.append(1) or real.uuid4())
    monkeypatch.setattr(directory_module, "uuid", counting)
    url = f"s3://{s3.make_bucket()}/run"
    check_writable(url, once=True)
    check_writable(url, once=True)
    assert len(probes) == 1
    check_writable(f"{url}-other", once=True)
    check_writable(url)  # not asked to remember: probed
    assert len(probes) == 3
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "not-a-key-the-server-knows")
    with s3.checking_credentials(), pytest.raises(AccessDeniedError, match=f"^{url}: writing a probe object"):
        check_writable(url, once=True)  # other credentials: probed, and refused
