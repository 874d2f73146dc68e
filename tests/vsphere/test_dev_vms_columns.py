"""``banlieue dev vms`` against vcsim (new-user finding): a NIC on a distributed port group shows
the port group's name (``DC0_DVPG0``), not its key (``dvportgroup-12``), and each VM its CPUs and
memory, in the text and the JSON output."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
from pathlib import Path

from banlieue.testing.vcsim import VcsimProcess


def _dev_vms(vcsim: VcsimProcess, tmp_path: Path, *args: str) -> str:
    state = tmp_path / "state"
    (state / "vcsim-vcenter-a").mkdir(parents=True, exist_ok=True)
    shutil.copy(vcsim.workdir / "info.json", state / "vcsim-vcenter-a" / "info.json")
    with (state / "dev.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the running dev holds it
        done = subprocess.run([sys.executable, "-m", "banlieue.cli", "dev", "vms", "--state-dir", str(state), *args],
                              capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_port_group_names_and_cpu_memory_are_shown(vcsim: VcsimProcess, tmp_path: Path) -> None:
    text = _dev_vms(vcsim, tmp_path)
    # vcsim's own VMs sit on the distributed port groups of their datacenters.
    assert "network DC0_DVPG0" in text and "network DC1_DVPG0" in text, text
    assert "dvportgroup" not in text, text
    line = next(ln for ln in text.splitlines() if ln.startswith("  DC0_C0_RP0_VM0 "))
    assert "  cpus=1  memory=32MiB  " in line, line
    records = json.loads(_dev_vms(vcsim, tmp_path, "-o", "json"))
    vm0 = next(r for r in records if r["name"] == "DC0_C0_RP0_VM0")
    assert (vm0["cpus"], vm0["memoryMiB"]) == (1, 32)
    assert [n["network"] for n in vm0["nics"]] == ["DC0_DVPG0"]
