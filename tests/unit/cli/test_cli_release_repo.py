"""hack/release.sh's clusterctl side: the image written in the canonical form clusterctl requires,
and ``REPO_DIR`` laying the release out as a clusterctl local repository with its configuration.
(tests/capi/test_clusterctl.py runs the real clusterctl on it.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with built-in kustomize) not installed")


def release(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "hack/release.sh")], env={**os.environ, "OUT_DIR": str(tmp_path / "out"), **env},
                          capture_output=True, text=True, timeout=60, check=False)


def image_of(components: Path) -> str:
    [deployment] = [d for d in yaml.safe_load_all(components.read_text()) if d and d["kind"] == "Deployment"]
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


@pytest.mark.parametrize(("given", "written"), [
    ("banlieue:v0.1.0", "docker.io/library/banlieue:v0.1.0"),
    ("myorg/banlieue:v0.2.0", "docker.io/myorg/banlieue:v0.2.0"),
    ("registry.example/team/banlieue:v0.1.0", "registry.example/team/banlieue:v0.1.0"),
    ("localhost:5000/banlieue:v0.1.0-rc.1", "localhost:5000/banlieue:v0.1.0-rc.1"),
    ("localhost/banlieue:dev", "localhost/banlieue:dev"),
])
def test_image_is_written_canonical(tmp_path: Path, given: str, written: str) -> None:
    proc = release(tmp_path, BANLIEUE_IMAGE=given)
    assert proc.returncode == 0, proc.stderr
    assert image_of(tmp_path / "out" / "infrastructure-components.yaml") == written


def test_repo_dir_is_a_clusterctl_local_repository(tmp_path: Path) -> None:
    proc = release(tmp_path, REPO_DIR=str(tmp_path / "repo"), BANLIEUE_IMAGE="registry.example/banlieue:v0.1.3")
    assert proc.returncode == 0, proc.stderr
    version_dir = tmp_path / "repo" / "infrastructure-banlieue" / "v0.1.3"
    templates = sorted(p.name for p in (ROOT / "templates").glob("*.yaml"))
    assert sorted(p.name for p in version_dir.iterdir()) == sorted(["infrastructure-components.yaml", "metadata.yaml", *templates])
    assert not (tmp_path / "out").exists()  # OUT_DIR is ignored with REPO_DIR
    config = yaml.safe_load((tmp_path / "repo" / "clusterctl.yaml").read_text())
    assert config == {"providers": [{"name": "banlieue", "type": "InfrastructureProvider",
                                     "url": f"file://{version_dir}/infrastructure-components.yaml"}],
                      "CLUSTERCTL_DISABLE_VERSIONCHECK": "true"}
