"""Realistic VirtualMachine bodies for runtime benchmarks (~2.4 KB compact JSON each after
managedFields are stripped; they arrive with managedFields as from a real API server)."""

from __future__ import annotations

import json
import uuid
from typing import Any

GROUP_VERSION = "banlieue.io/v1alpha1"


def virtual_machine(i: int, namespace: str = "team-a") -> dict[str, Any]:
    """VirtualMachine number ``i`` with spec, status conditions, owner and managedFields."""
    name = f"vm-{i:05d}"
    uid = str(uuid.UUID(int=i + 1))
    ts = "2026-11-30T01:02:03Z"
    conditions = [
        {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": ts, "observedGeneration": 3}
        for t, r, m in (
            ("Ready", "Ready", ""),
            ("Placed", "Placed", f"placed in cluster-{i % 4} on datastore ds-{i % 7}"),
            ("Created", "Created", "cloned from template ubuntu-24.04-cloudimg"),
            ("PoweredOn", "PoweredOn", ""),
            ("GuestReady", "GuestReady", "guest reported IP addresses"),
        )
    ]
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "VirtualMachine",
        "metadata": {
            "name": name, "namespace": namespace, "uid": uid, "resourceVersion": str(100000 + i), "generation": 3,
            "creationTimestamp": ts,
            "labels": {"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": f"web-{i % 50}",
                       "banlieue.io/zone": f"zone-{i % 3}", "tier": "frontend"},
            "annotations": {"banlieue.io/last-applied-class": "best-effort-medium",
                            "banlieue.io/placement": json.dumps({"cluster": f"cluster-{i % 4}", "host": f"esx-{i % 16}"})},
            "finalizers": ["banlieue.io/virtualmachine"],
            "ownerReferences": [{"apiVersion": "apps.example.com/v1", "kind": "WebFleet", "name": f"web-{i % 50}",
                                 "uid": str(uuid.UUID(int=10**9 + i % 50)), "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [
                {"manager": "kubectl", "operation": "Apply", "apiVersion": GROUP_VERSION, "time": ts,
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:className": {}, "f:imageName": {}, "f:powerState": {}}}},
                {"manager": "banlieue.io/controller", "operation": "Update", "apiVersion": GROUP_VERSION, "time": ts,
                 "subresource": "status", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}},
            ],
        },
        "spec": {
            "className": "best-effort-medium", "imageName": "ubuntu-24.04-cloudimg", "storageClass": "vsan-default",
            "powerState": "PoweredOn", "minHardwareVersion": 19,
            "network": {"interfaces": [{"name": "eth0", "network": "vm-network", "type": "vmxnet3"}]},
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"{name}-data"}, "sizeGiB": 40}],
            "bootstrap": {"cloudInit": {"secretRef": {"name": f"{name}-cloud-init", "key": "user-data"}}},
            "readinessProbe": {"tcpSocket": {"port": 22}, "periodSeconds": 10},
            "failureDomain": f"zone-{i % 3}",
        },
        "status": {
            "phase": "Running", "observedGeneration": 3, "powerState": "PoweredOn",
            "biosUUID": str(uuid.UUID(int=2**64 + i)), "instanceUUID": str(uuid.UUID(int=2**65 + i)),
            "moRef": f"vm-{2000 + i}", "host": f"esx-{i % 16}.lab.example.com", "zone": f"zone-{i % 3}",
            "network": {"primaryIP": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
                        "interfaces": [{"name": "eth0", "macAddress": f"00:50:56:{i // 65536 % 256:02x}:{i // 256 % 256:02x}:{i % 256:02x}",
                                        "ipAddresses": [f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}/16"]}]},
            "hardwareVersion": "vmx-19", "guestID": "ubuntu64Guest",
            "conditions": conditions,
        },
    }
