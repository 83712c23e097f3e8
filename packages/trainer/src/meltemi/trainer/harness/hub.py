"""Whether the harness may fetch task data from the Hugging Face Hub: decided once per process, before
lm-eval (and with it ``datasets`` and ``huggingface_hub``) is imported, since both read their offline
switches (``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``) then.

Without this, a machine that cannot reach the Hub spends about 40 seconds in ``huggingface_hub``'s retries,
printing each, before a task whose data is not cached fails; with it, that task fails at once, and its
error says why the Hub was not asked.

>>> decide_hub_access({"HF_DATASETS_OFFLINE": "true"})
HubAccess(online=False, reason='HF_DATASETS_OFFLINE is set')
"""

from __future__ import annotations

import os
import socket
import urllib.parse
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

HUB = "https://huggingface.co"
OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_TRUE = ("1", "on", "yes", "true")  # as huggingface_hub reads a switch


@dataclass(frozen=True)
class HubAccess:
    """Whether task data may come from the Hub in this process (``online``), and why (``reason``)."""

    online: bool
    reason: str


_DECIDED: list[HubAccess] = []  # this process's decision, once made


def hub_access(timeout_s: float = 2.0) -> HubAccess:
    """``decide_hub_access`` on this process's environment, made once: call it before importing lm-eval."""
    if not _DECIDED:
        _DECIDED.append(decide_hub_access(os.environ, timeout_s))
    return _DECIDED[0]


def decided_hub_access() -> HubAccess | None:
    """This process's decision, when ``hub_access`` made one (nothing is probed here)."""
    return _DECIDED[0] if _DECIDED else None


def decide_hub_access(environ: MutableMapping[str, str], timeout_s: float = 2.0) -> HubAccess:
    """Offline when an offline switch is set in ``environ``; otherwise a TCP connection to the Hub's endpoint
    (``HF_ENDPOINT``, default ``https://huggingface.co``), or to the proxy that ``environ`` routes it
    through (``HTTPS_PROXY``, ``ALL_PROXY``, unless ``NO_PROXY`` names the host), within ``timeout_s``
    decides, and when it fails both switches are set in ``environ``, so that only cached data is read."""
    for switch in OFFLINE_SWITCHES:
        if environ.get(switch, "").strip().lower() in _TRUE:
            return HubAccess(False, f"{switch} is set")
    endpoint = environ.get("HF_ENDPOINT") or HUB
    parts = urllib.parse.urlsplit(endpoint)
    proxy = _proxy(environ, parts.scheme, parts.hostname or "")
    through = parts if proxy is None else urllib.parse.urlsplit(proxy)
    where = f"the Hub ({endpoint})" + ("" if proxy is None else f" through the proxy {proxy}")
    try:
        if through.hostname is None:
            raise OSError(f"{proxy or endpoint!r} names no host")
        port = through.port or (80 if through.scheme == "http" else 443)
        socket.create_connection((through.hostname, port), timeout=timeout_s).close()
    except OSError as error:
        for switch in OFFLINE_SWITCHES:
            environ[switch] = "1"
        why = " ".join(str(error).split()) or type(error).__name__
        return HubAccess(False, f"{where} cannot be reached: {why}; only cached data is read")
    return HubAccess(True, f"{where} can be reached")


def _proxy(environ: Mapping[str, str], scheme: str, host: str) -> str | None:
    """The proxy ``environ`` sends requests for ``scheme://host`` through, as HTTP clients read it; None for
    a direct connection."""
    names = [name for base in (f"{scheme}_proxy", "all_proxy") for name in (base, base.upper())]
    proxy = next((environ[name] for name in names if environ.get(name)), None)
    skipped = (environ.get("no_proxy") or environ.get("NO_PROXY") or "").split(",")
    bypass = [entry.strip().lstrip(".") for entry in skipped if entry.strip()]
    if proxy is None or any(entry == "*" or host == entry or host.endswith(f".{entry}") for entry in bypass):
        return None
    return proxy
