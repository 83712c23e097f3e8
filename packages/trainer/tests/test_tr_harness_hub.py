"""Whether the harness may fetch task data from the Hugging Face Hub: an offline switch, or a Hub that cannot
be reached (then both switches are set, so only cached data is read), each with its reason; probed on
loopback only."""

import socket

import pytest

from meltemi.trainer.harness.hub import OFFLINE_SWITCHES, HubAccess, decide_hub_access


@pytest.mark.parametrize("switch", OFFLINE_SWITCHES)
@pytest.mark.parametrize("value", ["1", "ON", "true", " yes "])
def test_an_offline_switch_decides_without_any_connection(switch, value):
    environ = {switch: value, "HF_ENDPOINT": "http://127.0.0.1:1"}
    assert decide_hub_access(environ) == HubAccess(False, f"{switch} is set")
    assert environ == {switch: value, "HF_ENDPOINT": "http://127.0.0.1:1"}  # nothing else set


def test_a_hub_that_cannot_be_reached_sets_both_switches_and_says_why():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        hub = f"http://127.0.0.1:{closed.getsockname()[1]}"  # bound, not listening: refused
        environ = {"HF_ENDPOINT": hub, "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "false"}
        access = decide_hub_access(environ, timeout_s=1)
    assert not access.online
    assert (
        access.reason
        == f"the Hub ({hub}) cannot be reached: [Errno 111] Connection refused; only cached data is read"
    )
    assert environ == {"HF_ENDPOINT": hub, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    nameless = {"HF_ENDPOINT": "huggingface.co"}  # no scheme: no host to connect to
    assert decide_hub_access(nameless).reason.endswith("names no host; only cached data is read")


def test_a_hub_that_answers_leaves_the_switches_alone():
    with socket.create_server(("127.0.0.1", 0)) as listening:
        environ = {"HF_ENDPOINT": f"http://127.0.0.1:{listening.getsockname()[1]}/"}
        access = decide_hub_access(environ, timeout_s=1)
    assert access.online and access.reason.endswith("can be reached")
    assert set(environ) == {"HF_ENDPOINT"}


def test_behind_a_proxy_the_proxy_is_what_must_answer_unless_no_proxy_names_the_hub():
    with socket.create_server(("127.0.0.1", 0)) as proxy:
        address = f"http://127.0.0.1:{proxy.getsockname()[1]}"
        environ = {"HTTPS_PROXY": address}  # the Hub's own name is never looked up: only the proxy answers
        access = decide_hub_access(environ, timeout_s=1)
    assert access == HubAccess(
        True, f"the Hub (https://huggingface.co) through the proxy {address} can be reached"
    )
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
        environ = {"all_proxy": dead, "HF_ENDPOINT": "https://hub.example"}
        assert decide_hub_access(environ, timeout_s=1).reason.startswith(
            f"the Hub (https://hub.example) through the proxy {dead} cannot be reached: [Errno 111]"
        )
        with socket.create_server(("127.0.0.1", 0)) as hub:
            direct = {"HTTPS_PROXY": dead, "NO_PROXY": "localhost,127.0.0.1"}
            direct["HF_ENDPOINT"] = f"https://127.0.0.1:{hub.getsockname()[1]}"
            assert decide_hub_access(direct, timeout_s=1).online  # NO_PROXY: straight to the Hub
