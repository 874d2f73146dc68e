"""Index functions and predicates of the Provider and VMImage controllers."""

from __future__ import annotations

from typing import Any

import pytest

from banlieue.reconcilers.provider.controller import config_maps_index, secrets_index
from banlieue.reconcilers.vmimage.controller import ProviderLookupChanged


def provider(ca: dict[str, Any] | None = None, status: dict[str, Any] | None = None, generation: int = 1) -> dict[str, Any]:
    conn: dict[str, Any] = {"endpoint": "vc", "credentialsRef": {"name": "creds"}}
    if ca is not None:
        conn["caBundle"] = ca
    obj: dict[str, Any] = {
        "apiVersion": "banlieue.io/v1alpha1", "kind": "Provider",
        "metadata": {"name": "p", "namespace": "ns", "generation": generation},
        "spec": {"providerClassRef": {"name": "vsphere"}, "connection": conn},
    }
    if status is not None:
        obj["status"] = status
    return obj


@pytest.mark.parametrize(
    ("ca", "secrets", "config_maps"),
    [
        pytest.param(None, ["ns/creds"], [], id="credentials-only"),
        pytest.param({"inline": "PEM"}, ["ns/creds"], [], id="inline-ca"),
        pytest.param({"secretRef": {"name": "ca"}}, ["ns/creds", "ns/ca"], [], id="ca-secret"),
        pytest.param({"configMapRef": {"name": "ca", "key": "b.pem"}}, ["ns/creds"], ["ns/ca"], id="ca-configmap"),
    ],
)
def test_indexes(ca: dict[str, Any] | None, secrets: list[str], config_maps: list[str]) -> None:
    obj = provider(ca)
    assert secrets_index(obj) == secrets
    assert config_maps_index(obj) == config_maps


def test_indexes_of_an_invalid_object_are_empty() -> None:
    bad = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"connection": {}}}
    assert secrets_index(bad) == [] and config_maps_index(bad) == []


def fds(*dcs: str) -> list[dict[str, Any]]:
    return [{"name": f"x{i}", "attributes": {"raw": {"datacenter": dc}, "capacity": {"cpuMHz": i}}} for i, dc in enumerate(dcs)]


READY_TRUE = [{"type": "Ready", "status": "True"}]
READY_FALSE = [{"type": "Ready", "status": "False"}]


@pytest.mark.parametrize(
    ("old", "new", "passes"),
    [
        pytest.param(provider(), provider(generation=2), True, id="generation-changed"),
        pytest.param(provider(status={"failureDomains": fds("DC0")}), provider(status={"failureDomains": fds("DC0", "DC1")}), True, id="datacenter-added"),
        pytest.param(provider(status={"conditions": READY_FALSE}), provider(status={"conditions": READY_TRUE}), True, id="ready-flipped"),
        pytest.param(provider(status={"failureDomains": fds("DC0", "DC0")}), provider(status={"failureDomains": fds("DC0")}), False, id="same-datacenters-capacity-only"),
        pytest.param(provider(status={"conditions": READY_TRUE}), provider(status={"conditions": [{"type": "Ready", "status": "True", "message": "x"}]}), False, id="ready-message-only"),
        pytest.param(provider(), provider(), False, id="resync"),
    ],
)
def test_provider_lookup_changed(old: dict[str, Any], new: dict[str, Any], passes: bool) -> None:
    pred = ProviderLookupChanged()
    assert pred.update(old, new) is passes
    assert pred.create(new) and pred.delete(new)
