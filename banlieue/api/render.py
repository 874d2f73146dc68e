"""YAML rendering shared by the generators (crdgen, rbac, admission): stable, diffable output."""

from __future__ import annotations

import os
from typing import Any

import yaml


def dump_documents(docs: list[dict[str, Any]]) -> str:
    """Multi-document YAML (each preceded by ``---``), insertion order kept, block style, no wrapping."""
    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False, default_flow_style=False, width=100000) for d in docs)


def kustomization(resources: list[str], header: str) -> str:
    """A kustomize ``Kustomization`` listing ``resources`` (sorted), after a ``# header`` line."""
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(resources),
    }
    return f"# {header}\n" + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)


def write_files(out: str, files: dict[str, list[dict[str, Any]]], header: str) -> None:
    """Write each ``name -> documents`` into directory ``out`` plus a ``Kustomization`` listing them.

    The extension-less name (accepted by kustomize) keeps ``kubectl apply -f DIR/`` working.

    ``out`` is created if missing; raises OSError when it cannot be written.
    """
    os.makedirs(out, exist_ok=True)
    for name, docs in files.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as fh:
            fh.write(dump_documents(docs))
    with open(os.path.join(out, "Kustomization"), "w", encoding="utf-8") as fh:
        fh.write(kustomization(list(files), header))
