"""``find.VMIndex`` keeps every VM seen with a UID (issue 19; ADR 0012 decision 9): the first
stays the mapping (a scan or the change watch never swaps it), the others are candidates, and
the oldest candidate takes over when the mapping is forgotten."""

from __future__ import annotations

from pyVmomi import vim

from banlieue.backends.vsphere.find import VMIndex, moref_order
from banlieue.backends.vsphere.properties import moid


def vm(ref: str) -> object:
    return vim.VirtualMachine(ref)


def test_a_second_vm_with_a_uid_is_a_candidate_not_the_mapping() -> None:
    index = VMIndex()
    index.put("u", vm("vm-20"), replace=False)
    index.put("u", vm("vm-31"), replace=False)
    index.put("u", vm("vm-25"), replace=False)
    assert moid(index.get("u")) == "vm-20" and set(index.others("u")) == {"vm-31", "vm-25"}
    assert index.forget("u", "vm-31") is False  # a candidate gone: dropped, mapping unchanged
    assert set(index.others("u")) == {"vm-25"}
    index.put("u", vm("vm-25"))  # the VM kept is made the mapping (find_vm)
    assert moid(index.get("u")) == "vm-25" and set(index.others("u")) == {"vm-20"}
    assert index.forget("u") is True
    assert moid(index.get("u")) == "vm-20" and index.others("u") == {}
    assert index.uid_of("vm-20") == "u"


def test_morefs_sort_in_creation_order() -> None:
    assert sorted(["vm-100", "vm-9", "vm-23"], key=moref_order) == ["vm-9", "vm-23", "vm-100"]


def test_named_answers_the_moref_the_watch_last_reported_with_a_name() -> None:
    """``VMIndex.named``: the clone read beside its task's poll is guessed by name (issue 22); a
    rename moves the name, a removal or a new collector drops it."""
    index = VMIndex()
    assert index.named("web-0") is None
    index.observe("vm-7", {"name": "web-0", "runtime.powerState": "poweredOff"})
    index.observe("vm-8", {"name": "web-1"})
    assert (index.named("web-0"), index.named("web-1")) == ("vm-7", "vm-8")
    index.observe("vm-7", {"runtime.powerState": "poweredOn"})  # no name in the change: kept
    assert index.named("web-0") == "vm-7"
    index.observe("vm-7", {"name": "web-0-old"})  # renamed
    assert (index.named("web-0"), index.named("web-0-old")) == (None, "vm-7")
    index.observe("vm-9", {"name": "web-1"})  # another VM with a name in use: the last report wins
    index.observe("vm-8", {}, removed=True)  # the old holder's removal leaves the new one
    assert index.named("web-1") == "vm-9"
    index.reset_reads()
    assert index.named("web-1") is None and index.named("web-0-old") is None
