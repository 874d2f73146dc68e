"""Logging: JSON lines with timestamp/level/logger, contextvars merged, secrets redacted."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from banlieue.runtime.log import REDACTED, configure_logging, get_logger, is_sensitive_key


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    root.handlers, root.level = handlers, level


def lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.strip()]


def test_json_lines_carry_timestamp_level_logger_and_context(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    log = get_logger("runtime.test")  # created before configure: lazy, picks up the config
    configure_logging("json", "info")
    with structlog.contextvars.bound_contextvars(controller="vm", reconcileID="r-1"):
        log.info("hello", count=3)
    log.debug("hidden at info")
    logging.getLogger("aiohttp.client").warning("from stdlib")
    out = lines(capsys.readouterr().err)
    assert len(out) == 2
    first = out[0]
    assert first["event"] == "hello" and first["count"] == 3
    assert first["level"] == "info" and first["logger"] == "runtime.test"
    assert first["controller"] == "vm" and first["reconcileID"] == "r-1"
    assert first["timestamp"].endswith("Z")
    assert out[1]["logger"] == "aiohttp.client" and out[1]["level"] == "warning"


def test_redaction_of_sensitive_keys(restore_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", "debug")
    get_logger("t").info(
        "creds",
        password="hunter2",
        token="abc",
        userData="#cloud-config",
        secretName="keep-me",
        spec={"bootstrap": {"user-data": "x", "dataSecretName": "keep"}, "items": [{"apiToken": "t"}]},
    )
    (entry,) = lines(capsys.readouterr().err)
    assert entry["password"] == REDACTED and entry["token"] == REDACTED and entry["userData"] == REDACTED
    assert entry["secretName"] == "keep-me"
    assert entry["spec"]["bootstrap"] == {"user-data": REDACTED, "dataSecretName": "keep"}
    assert entry["spec"]["items"] == [{"apiToken": REDACTED}]
    assert "hunter2" not in json.dumps(entry)


@pytest.mark.parametrize(
    ("key", "sensitive"),
    [
        ("password", True),
        ("Password", True),
        ("bearer_token", True),
        ("userData", True),
        ("user-data", True),
        ("clientSecret", True),
        ("secret", True),
        ("secretName", False),
        ("secretRef", False),
        ("name", False),
    ],
)
def test_is_sensitive_key(key: str, sensitive: bool) -> None:
    assert is_sensitive_key(key) is sensitive


def test_console_format_and_bad_arguments(restore_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("console", "warning")
    get_logger("t").warning("visible", token="abc")
    err = capsys.readouterr().err
    assert "visible" in err and "abc" not in err
    with pytest.raises(ValueError):
        configure_logging("json", "loud")
    with pytest.raises(ValueError):
        configure_logging("xml", "info")  # type: ignore[arg-type]
