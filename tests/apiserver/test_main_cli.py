"""``python -m banlieue.testing.apiserver``: bad flags and unusable addresses give one error line,
never a traceback (bad flags: argparse's usage + ``error:`` line, exit 2; cannot listen: exit 1)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from banlieue.testing.apiserver.__main__ import main

PROG = "python -m banlieue.testing.apiserver"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "banlieue.testing.apiserver", *args], capture_output=True,
                          text=True, timeout=30, check=False)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "99999"], "argument --port: must be a port number 0-65535, got 99999"),
        (["--port", "-1"], "argument --port: must be a port number 0-65535, got -1"),
        (["--port", "http"], "argument --port: must be a port number 0-65535, got 'http'"),
        (["--crd-dir", "/nonexistent"], "argument --crd-dir: must be an existing directory, got '/nonexistent'"),
        (["--bookmark-interval", "0"], "argument --bookmark-interval: must be a number of seconds > 0, got 0"),
        (["--bookmark-interval", "-1"], "argument --bookmark-interval: must be a number of seconds > 0, got -1"),
        (["--bookmark-interval", "nan"], "argument --bookmark-interval: must be a number of seconds > 0, got nan"),
        (["--request-log-size", "abc"], "argument --request-log-size: must be an integer >= 1, got 'abc'"),
        (["--request-log-size", "0"], "argument --request-log-size: must be >= 1, got 0"),
    ],
    ids=["port-too-big", "port-negative", "port-not-a-number", "crd-dir-missing", "bookmark-zero",
         "bookmark-negative", "bookmark-nan", "log-size-not-a-number", "log-size-zero"],
)
def test_bad_flag_is_usage_and_one_error_line_exit_2(argv: list[str], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ")
    assert err.splitlines()[-1] == f"{PROG}: error: {message}"


def test_crd_dir_file_is_not_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    crd = tmp_path / "crd.yaml"
    crd.write_text("{}\n")
    with pytest.raises(SystemExit):
        main(["--crd-dir", str(crd)])
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"must be an existing directory, got '{crd}'")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another socket is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_port_in_use_is_one_line_exit_1(busy_port: int) -> None:
    proc = run("--port", str(busy_port))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"{PROG}: error: cannot listen on 127.0.0.1:{busy_port}: Address already in use\n"
    assert proc.stdout == ""


def test_unknown_host_is_one_line_exit_1() -> None:
    proc = run("--host", "no-such-host.invalid")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith(f"{PROG}: error: cannot listen on no-such-host.invalid:0: ")


def test_out_of_range_port_as_a_process_has_no_traceback() -> None:
    proc = run("--port", "99999")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == f"{PROG}: error: argument --port: must be a port number 0-65535, got 99999"
    assert "Traceback" not in proc.stderr
