"""Writes by name that land only on the object the reconcile read (same ``metadata.uid``).

A controller reads an object from its informer cache and writes its status (or one spec field)
back by name with server-side apply (or an annotation with a merge patch, which honours the
same precondition). When the object was deleted and re-created with the same
name meanwhile (``kubectl delete`` then create, ``dev --keep-state``), a stale cached copy would
make that write land on the new object: kube-apiserver (v1.34) and the API double both accept an
apply whose body names another object's ``metadata.uid`` (tests/envtest/test_differential.py;
the custom-resource status strategy copies the stored metadata over the body's), so the UID in
the body is no guard.

``write_same_object`` puts the read object's ``metadata.resourceVersion`` into the body: the API
server compares it with the stored one inside the same storage transaction as the write (the
optimistic-concurrency precondition of an update, which an apply honours; Kubernetes API
conventions, "Concurrency Control and Consistency") and answers 409 Conflict when they differ.
Resource versions are unique across the store, so the version the reconcile read belongs to that
one object: a write that succeeds landed on it, whatever happened in between. On a 409 the
object is read again (one GET): another UID (or none) means the object was replaced (``Replaced``,
or NotFound) and nothing is written; the same UID means a concurrent writer (another field
manager, a label, a finalizer) bumped the version, and the write is retried with the version
just read (at most ``RETRIES`` times).

Why this and not the alternatives: a UID compare against the informer or a GET before the write
leaves a window between the check and the write (not correct under every interleaving); a JSON
patch ``test`` on ``/metadata/uid`` is atomic but is no server-side apply (the field ownership
and the removal of fields the manager stopped applying would be lost). The cost here is zero
requests while nobody else writes the object between our read and our write, and two (the GET
and the repeated write) per concurrent write otherwise; the reconcile is not restarted, so no
vCenter look-up is repeated and nothing is logged as a reconcile error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from banlieue.runtime.client import Client
from banlieue.runtime.errors import Conflict
from banlieue.runtime.kinds import ResourceKind

__all__ = ["RETRIES", "Replaced", "write_same_object"]

RETRIES = 3
"""Writes retried after a 409 while the object keeps its UID (each after one GET)."""


class Replaced(Exception):
    """The object of that name is not the one the reconcile read: ``read_uid`` was read,
    ``current_uid`` holds the name now. Nothing was written."""

    def __init__(self, kind: ResourceKind, name: str, namespace: str | None, read_uid: str, current_uid: str) -> None:
        super().__init__(f"{kind.kind} {namespace}/{name} was replaced: read uid {read_uid}, now {current_uid}")
        self.read_uid = read_uid
        self.current_uid = current_uid


async def write_same_object(
    client: Client, kind: ResourceKind, read: Mapping[str, Any], body: Mapping[str, Any],
    write: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """``write(body)`` with ``body.metadata.resourceVersion`` set to the version of ``read`` (the
    object as the reconcile read it: a dict with metadata name, namespace, uid and
    resourceVersion); returns what the server returned. On 409 Conflict: GET by name, then
    raise ``Replaced`` (another UID), NotFound (no object), or write again with the fresh
    version (same UID; Conflict re-raised after ``RETRIES`` retries). Raises what ``write`` and
    ``Client.get`` raise otherwise."""
    meta = read["metadata"]
    name, namespace, uid = str(meta["name"]), meta.get("namespace"), str(meta.get("uid") or "")
    rv = str(meta.get("resourceVersion") or "")
    for attempt in range(RETRIES + 1):
        guarded = {**body, "metadata": {**body["metadata"], "resourceVersion": rv}}
        try:
            return await write(guarded)
        except Conflict:
            if attempt == RETRIES:
                raise
        current = (await client.get(kind, name, namespace))["metadata"]
        if str(current.get("uid") or "") != uid:
            raise Replaced(kind, name, namespace, uid, str(current.get("uid") or ""))
        rv = str(current.get("resourceVersion") or "")
    raise AssertionError("unreachable")  # pragma: no cover
