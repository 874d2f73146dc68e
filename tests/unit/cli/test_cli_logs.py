"""Log setup: one JSON object per line for structlog and stdlib loggers alike, level filtering."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from banlieue.cmd.logs import configure_logging


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


def test_json_lines_from_structlog_and_stdlib() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    structlog.get_logger("banlieue.test").info("reconciled", controller="virtualmachine", name="web-1")
    structlog.get_logger("banlieue.test").debug("hidden at info")
    logging.getLogger("kubernetes_asyncio").warning("watch closed: %s", "410")
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(records) == 2
    assert records[0]["event"] == "reconciled"
    assert records[0]["controller"] == "virtualmachine"
    assert records[0]["level"] == "info"
    assert records[0]["timestamp"].endswith("Z")
    assert records[1] == {**records[1], "event": "watch closed: 410", "level": "warning",
                          "logger": "kubernetes_asyncio"}


def test_reconfigure_replaces_the_handler_and_level() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("json", "info", stream=first)
    configure_logging("console", "debug", stream=second)
    structlog.get_logger("banlieue.test").debug("now visible", key="v")
    assert first.getvalue() == ""
    line = second.getvalue()
    assert "now visible" in line and "key" in line
    assert not line.lstrip().startswith("{")


def test_exceptions_stay_json() -> None:
    out = io.StringIO()
    configure_logging("json", "error", stream=out)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        structlog.get_logger("banlieue.test").exception("reconcile failed")
    record = json.loads(out.getvalue())
    assert record["event"] == "reconcile failed"
    assert "RuntimeError: boom" in record["exception"]
