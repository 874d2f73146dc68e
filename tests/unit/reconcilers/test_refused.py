"""``reconcilers/refused``: the log line of a refused login names the Secret it re-reads."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import structlog

from banlieue.reconcilers import refused
from banlieue.runtime.kinds import SECRET
from banlieue.runtime.log import configure_logging


@pytest.fixture
def json_logs() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    root.handlers, root.level = handlers, level


def test_the_log_names_the_secret_it_re_reads(json_logs: None, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A Secret's name is no credential: the operator reads which Secret to fix (it was logged
    under the key ``secret``, which the log redacts as a secret value)."""
    raw = {"apiVersion": "banlieue.io/v1alpha1", "kind": "Provider", "metadata": {"name": "p", "namespace": "ns"},
           "spec": {"providerClassRef": {"name": "vsphere"},
                    "connection": {"endpoint": "https://vc/sdk", "credentialsRef": {"name": "vc-creds"}}}}
    rereads: list[tuple[Any, ...]] = []
    store = SimpleNamespace(reread_soon=lambda *args: rereads.append(args[1:]))
    monkeypatch.setattr(refused, "referenced", lambda cache: store)
    ctx = SimpleNamespace(cache=SimpleNamespace(get=lambda kind, name, ns: raw if (name, ns) == ("p", "ns") else None),
                          client=object())
    configure_logging("json", "info")  # in the test: the log writes to capsys's stderr
    refused.RefusedCredentials(ctx, SimpleNamespace()).reread("ns/p")  # type: ignore[arg-type]
    assert rereads == [(SECRET, "vc-creds", "ns")]
    [entry] = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert entry["provider"] == "ns/p" and entry["secretName"] == "vc-creds", entry
