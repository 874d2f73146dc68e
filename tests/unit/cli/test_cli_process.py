"""The ``banlieue`` console script as a process: exit codes and one-line errors (SPEC §5)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

import banlieue
from banlieue import cli
from banlieue.cmd import roles
from banlieue.options import Options, StartupError

BANLIEUE = Path(sys.executable).parent / "banlieue"


def run(args: list[str], env: dict[str, str] | None = None, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed console script with a clean BANLIEUE_*/KUBECONFIG environment."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("BANLIEUE_") and k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    if home is not None:
        base["HOME"] = str(home)
    return subprocess.run([str(BANLIEUE), *args], env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=30, check=False)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("banlieue: error: ")
    assert text in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_console_script_is_installed() -> None:
    assert BANLIEUE.is_file(), "pip install -e . creates the banlieue console script"


def test_version() -> None:
    proc = run(["--version"])
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"banlieue {banlieue.__version__}"


def test_help_lists_the_env_fallbacks() -> None:
    proc = run(["manager", "--help"])
    assert proc.returncode == 0
    for env in ("BANLIEUE_KUBECONFIG", "BANLIEUE_LEADER_ELECT", "BANLIEUE_VSPHERE_TASK_TIMEOUT"):
        assert env in " ".join(proc.stdout.split())


@pytest.mark.parametrize(
    ("args", "env", "text"),
    [
        (["manager", "--max-concurrent-reconciles", "0"], {},
         "banlieue: error: --max-concurrent-reconciles must be >= 1 (got 0)"),
        (["controller"], {"BANLIEUE_MAX_CONCURRENT_RECONCILES": "0"},
         "BANLIEUE_MAX_CONCURRENT_RECONCILES must be >= 1 (got 0)"),
        (["manager"], {"BANLIEUE_LEADER_ELECT": "yes please"}, "BANLIEUE_LEADER_ELECT must be true or false"),
        (["provider", "vsphere", "--vsphere-task-timeout", "0"], {}, "--vsphere-task-timeout must be"),
        (["manager", "--metrics-bind-address", "8080"], {}, "--metrics-bind-address must be host:port"),
        (["manager", "--log-level", "trace"], {}, "--log-level must be one of"),
        (["manager", "--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
        ([], {}, "missing command"),
        (["provider"], {}, "missing backend"),
    ],
    ids=["flag", "env", "env-bool", "timeout", "bind-address", "log-level", "unknown-flag", "no-command",
         "no-backend"],
)
def test_usage_error_is_one_line_exit_2(args: list[str], env: dict[str, str], text: str) -> None:
    assert_one_line_error(run(args, env), 2, text)


def test_crdgen_into_an_unwritable_place_is_one_line_exit_1(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert_one_line_error(run(["crdgen", "--out", str(blocker / "crd")]), 1, "crdgen: cannot write")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_api_server_is_one_line_exit_1(tmp_path: Path) -> None:
    """The contract the role wiring must keep: no API server -> one line, exit 1, fast."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{_closed_port()}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    proc = run(["manager", "--kubeconfig", str(kubeconfig), "--metrics-bind-address", "0",
                "--health-probe-bind-address", "0"], home=tmp_path)
    assert_one_line_error(proc, 1, "banlieue: error: ")


def test_missing_kubeconfig_env_is_one_line_exit_2_like_the_flag(tmp_path: Path) -> None:
    by_env = run(["manager"], {"KUBECONFIG": "/nonexistent"}, home=tmp_path)
    assert_one_line_error(by_env, 2, "banlieue: error: KUBECONFIG must be an existing kubeconfig file (got /nonexistent)")
    by_flag = run(["manager", "--kubeconfig", "/nonexistent"], home=tmp_path)
    assert_one_line_error(by_flag, 2, "banlieue: error: --kubeconfig must be an existing kubeconfig file (got /nonexistent)")


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ("myhost\n", "not a kubeconfig file (expected a YAML mapping with clusters, users, contexts)"),
        ("- a\n- b\n", "not a kubeconfig file"),
        ("a: [\n", "not valid YAML (line 2, column 1)"),
        ("clusters: []\n", "ConfigException: Invalid kube-config file. Expected key current-context"),
        (b"\xff\xfe", "cannot read it: UnicodeDecodeError"),
    ],
    ids=["plain-text", "yaml-list", "bad-yaml", "no-current-context", "binary"],
)
@pytest.mark.parametrize("source", ["flag", "env"])
def test_unusable_kubeconfig_file_is_one_line_exit_1(tmp_path: Path, content: str | bytes, text: str, source: str) -> None:
    path = tmp_path / "kubeconfig"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    args, env = (["manager", "--kubeconfig", str(path)], {}) if source == "flag" else (["manager"], {"KUBECONFIG": str(path)})
    proc = run(args, env, home=tmp_path)
    assert_one_line_error(proc, 1, f"banlieue: error: cannot load kubeconfig {path}")
    assert text in proc.stderr


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """main() configures process-wide logging onto this test's captured stderr; undo it after,
    so later tests do not log into a closed capture stream."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


@pytest.mark.usefixtures("restore_logging")
def test_main_turns_startup_error_into_one_line(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[tuple[str, Options]] = []

    async def failing(role: str, options: Options) -> int:
        seen.append((role, options))
        raise StartupError("cannot reach the API server at https://127.0.0.1:1:\nconnection refused")

    monkeypatch.setattr(roles, "run_role", failing)
    code = cli.main(["provider", "vsphere", "--log-format", "console"], {"KUBERNETES_SERVICE_HOST": "x"})
    assert code == 1
    assert seen[0][0] == "provider-vsphere"
    assert seen[0][1].log_format == "console"
    assert capsys.readouterr().err == (
        "banlieue: error: cannot reach the API server at https://127.0.0.1:1: connection refused\n"
    )


@pytest.mark.usefixtures("restore_logging")
def test_main_returns_the_role_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    async def graceful(role: str, options: Options) -> int:
        return 0 if role == "manager" and options.leader_elect else 3

    monkeypatch.setattr(roles, "run_role", graceful)
    assert cli.main(["manager", "--leader-elect"], {"KUBERNETES_SERVICE_HOST": "x"}) == 0
    assert cli.main(["manager"], {"KUBERNETES_SERVICE_HOST": "x"}) == 3
