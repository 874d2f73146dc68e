"""Value parsers and flag/env precedence of banlieue.options (SPEC §5)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from banlieue.options import (
    FlagSpec,
    Options,
    UsageError,
    choice,
    default_kubeconfig,
    default_leader_election_namespace,
    parse_bool,
    parse_label_value,
    parse_namespace,
    parse_port,
    parse_positive_int,
    parse_seconds,
    parse_workers,
    resolve,
    split_bind_address,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (":8080", ("", 8080)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("localhost:9443", ("localhost", 9443)),
        ("[::1]:8081", ("::1", 8081)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
        ("0", None),
    ],
    ids=["all-interfaces", "free-port", "hostname", "ipv6", "max-port", "zero-disables"],
)
def test_split_bind_address_accepts(value: str, expected: tuple[str, int] | None) -> None:
    assert split_bind_address(value) == expected


@pytest.mark.parametrize(
    "value",
    ["", "8080", ":", ":http", ":65536", "host:-1", "a b:80", "[::1:80", "[127.0.0.1]:80", ":80 "],
)
def test_split_bind_address_rejects(value: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        split_bind_address(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("True", True), ("1", True), ("yes", True), ("false", False), ("FALSE", False),
     ("0", False), ("no", False)],
)
def test_parse_bool(value: str, expected: bool) -> None:
    assert parse_bool(value) is expected


@pytest.mark.parametrize("value", ["", "maybe", "2", "on?"])
def test_parse_bool_rejects(value: str) -> None:
    with pytest.raises(ValueError, match="true or false"):
        parse_bool(value)


def test_parse_positive_int() -> None:
    assert parse_positive_int("1") == 1
    assert parse_positive_int("64") == 64
    with pytest.raises(ValueError, match="must be >= 1"):
        parse_positive_int("0")
    with pytest.raises(ValueError, match="must be >= 1"):
        parse_positive_int("-3")
    with pytest.raises(ValueError, match="integer"):
        parse_positive_int("2.5")


@pytest.mark.parametrize("value", [" 4", "4 ", "1_000", "+5", "0x10", "\u0663", ""])
def test_parse_positive_int_takes_ascii_digits_only(value: str) -> None:
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        parse_positive_int(value)


def test_parse_workers_is_bounded() -> None:
    assert parse_workers("1024") == 1024
    with pytest.raises(ValueError, match="must be <= 1024"):
        parse_workers("99999999999999999999")
    with pytest.raises(ValueError, match="must be >= 1"):
        parse_workers("0")


def test_parse_port() -> None:
    assert parse_port("0") == 0
    assert parse_port("6443") == 6443
    for bad in ("-1", "65536", "x", ""):
        with pytest.raises(ValueError, match="port number"):
            parse_port(bad)


def test_parse_seconds() -> None:
    assert parse_seconds("600") == 600.0
    assert parse_seconds("0.5") == 0.5
    for bad in ("0", "-1", "nan", "inf", "ten"):
        with pytest.raises(ValueError, match="seconds > 0"):
            parse_seconds(bad)


def test_parse_namespace_is_an_rfc1123_label() -> None:
    assert parse_namespace("banlieue-system") == "banlieue-system"
    assert parse_namespace("") is None
    for bad in ("Banlieue", "-x", "x-", "a.b", "a" * 64):
        with pytest.raises(ValueError, match="namespace name"):
            parse_namespace(bad)


def test_parse_label_value() -> None:
    assert parse_label_value("team-a_1.x") == "team-a_1.x"
    assert parse_label_value("") is None
    for bad in ("-a", "a b", "a/b", "a" * 64):
        with pytest.raises(ValueError, match="label value"):
            parse_label_value(bad)


def test_choice_is_case_insensitive_with_aliases() -> None:
    level = choice("debug", "info", "warning", "error", aliases={"warn": "warning"})
    assert level("INFO") == "info"
    assert level("warn") == "warning"
    with pytest.raises(ValueError, match="one of debug, info, warning, error"):
        level("trace")


SPEC = FlagSpec("--max-concurrent-reconciles", parse_positive_int, "10", "workers")


def test_flag_spec_names_dest_and_env() -> None:
    assert SPEC.dest == "max_concurrent_reconciles"
    assert SPEC.env == "BANLIEUE_MAX_CONCURRENT_RECONCILES"


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [
        ("3", {"BANLIEUE_MAX_CONCURRENT_RECONCILES": "5"}, 3),
        (None, {"BANLIEUE_MAX_CONCURRENT_RECONCILES": "5"}, 5),
        (None, {}, 10),
        (None, {"BANLIEUE_MAX_CONCURRENT_RECONCILES": ""}, 10),
    ],
    ids=["flag-wins-over-env", "env-wins-over-default", "default", "empty-env-is-unset"],
)
def test_resolve_precedence(flag: str | None, env: dict[str, str], expected: int) -> None:
    assert resolve(SPEC, flag, env) == expected


def test_resolve_errors_name_the_source_and_value() -> None:
    with pytest.raises(UsageError) as flag_err:
        resolve(SPEC, "0", {})
    assert str(flag_err.value) == "--max-concurrent-reconciles must be >= 1 (got 0)"
    with pytest.raises(UsageError) as env_err:
        resolve(SPEC, None, {"BANLIEUE_MAX_CONCURRENT_RECONCILES": "many"})
    assert str(env_err.value) == "BANLIEUE_MAX_CONCURRENT_RECONCILES must be an integer >= 1 (got many)"
    # A valid flag hides a broken env value: the flag wins, the env is never read.
    assert resolve(SPEC, "2", {"BANLIEUE_MAX_CONCURRENT_RECONCILES": "many"}) == 2


def test_resolve_quotes_blank_values() -> None:
    with pytest.raises(UsageError, match=r"\(got ' '\)"):
        resolve(SPEC, " ", {})


def test_default_kubeconfig_order(tmp_path: Path) -> None:
    home = tmp_path / "home"
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("clusters: []\n")
    b.write_text("clusters: []\n")
    assert default_kubeconfig({"KUBECONFIG": f"{a}:{b}"}, home) == f"{a}:{b}"
    # Missing entries of a list are dropped (client-go's loading rules skip them).
    assert default_kubeconfig({"KUBECONFIG": f"{tmp_path / 'gone'}:{b}"}, home) == str(b)
    assert default_kubeconfig({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, home) is None
    assert default_kubeconfig({}, home) is None
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("apiVersion: v1\n")
    assert default_kubeconfig({}, home) == str(home / ".kube" / "config")
    # In-cluster wins over ~/.kube/config, as in controller-runtime's GetConfig.
    assert default_kubeconfig({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, home) is None


def test_kubeconfig_env_is_checked_like_the_flag(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as one:
        default_kubeconfig({"KUBECONFIG": "/nonexistent"}, tmp_path)
    assert str(one.value) == "KUBECONFIG must be an existing kubeconfig file (got /nonexistent)"
    with pytest.raises(UsageError) as several:
        default_kubeconfig({"KUBECONFIG": f"{tmp_path / 'x'}:{tmp_path / 'y'}"}, tmp_path)
    assert str(several.value).startswith("KUBECONFIG must name an existing kubeconfig file (got ")
    with pytest.raises(UsageError):
        default_kubeconfig({"KUBECONFIG": str(tmp_path)}, tmp_path)  # a directory is not a file


def test_default_leader_election_namespace(tmp_path: Path) -> None:
    sa_file = tmp_path / "namespace"
    assert default_leader_election_namespace(sa_file) == "default"
    sa_file.write_text("banlieue-system\n")
    assert default_leader_election_namespace(sa_file) == "banlieue-system"


def test_options_are_frozen_with_spec_defaults() -> None:
    options = Options()
    # /metrics on loopback unless asked otherwise (issue 23, docs/security.md).
    assert (options.metrics_bind_address, options.health_probe_bind_address) == ("127.0.0.1:8080", ":8081")
    assert options.vsphere_task_timeout == 600.0
    assert options.metrics_listen == ("127.0.0.1", 8080)
    assert options.secret_resync_period == 300.0 and options.development_allow_http_endpoints is False
    assert Options(metrics_bind_address="0").metrics_listen is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.log_level = "debug"  # type: ignore[misc]
