"""Subcommands, flags and BANLIEUE_* fallbacks as parsed by banlieue.cmd.parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from banlieue.cmd.parser import CrdgenCommand, DevCommand, DevVmsCommand, RoleCommand, parse_command
from banlieue.options import Options, UsageError


@pytest.fixture
def isolated(tmp_path: Path) -> dict[str, Path]:
    """A home without ~/.kube/config and a missing service-account namespace file."""
    return {"home": tmp_path / "home", "sa_namespace_file": tmp_path / "no-such-file"}


def role(argv: list[str], env: dict[str, str], isolated: dict[str, Path]) -> RoleCommand:
    command = parse_command(argv, env, **isolated)
    assert isinstance(command, RoleCommand)
    return command


@pytest.mark.parametrize(
    ("argv", "expected_role"),
    [(["controller"], "controller"), (["provider", "vsphere"], "provider-vsphere"), (["manager"], "manager")],
)
def test_roles_with_defaults(argv: list[str], expected_role: str, isolated: dict[str, Path]) -> None:
    command = role(argv, {}, isolated)
    assert command.role == expected_role
    assert command.options == Options(
        kubeconfig=None, namespace=None, watch_filter=None, metrics_bind_address="127.0.0.1:8080",
        health_probe_bind_address=":8081", leader_elect=False, leader_election_namespace="default",
        max_concurrent_reconciles=32, log_format="json", log_level="info", vsphere_task_timeout=600.0,
    )


def test_every_flag(tmp_path: Path, isolated: dict[str, Path]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    command = role(
        ["manager", f"--kubeconfig={kubeconfig}", "--namespace", "team-a", "--watch-filter", "blue",
         "--metrics-bind-address", "127.0.0.1:9090", "--health-probe-bind-address=:9091", "--leader-elect",
         "--leader-election-namespace", "banlieue-system", "--max-concurrent-reconciles", "4",
         "--log-format", "console", "--log-level", "DEBUG", "--vsphere-task-timeout", "90.5"],
        {}, isolated,
    )
    assert command.options == Options(
        kubeconfig=str(kubeconfig), namespace="team-a", watch_filter="blue",
        metrics_bind_address="127.0.0.1:9090", health_probe_bind_address=":9091", leader_elect=True,
        leader_election_namespace="banlieue-system", max_concurrent_reconciles=4, log_format="console",
        log_level="debug", vsphere_task_timeout=90.5,
    )


def test_every_env_fallback(tmp_path: Path, isolated: dict[str, Path]) -> None:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text("apiVersion: v1\n")
    env = {
        "BANLIEUE_KUBECONFIG": str(kubeconfig), "BANLIEUE_NAMESPACE": "team-b", "BANLIEUE_WATCH_FILTER": "green",
        "BANLIEUE_METRICS_BIND_ADDRESS": "0", "BANLIEUE_HEALTH_PROBE_BIND_ADDRESS": "127.0.0.1:0",
        "BANLIEUE_LEADER_ELECT": "true", "BANLIEUE_LEADER_ELECTION_NAMESPACE": "leases",
        "BANLIEUE_MAX_CONCURRENT_RECONCILES": "7", "BANLIEUE_LOG_FORMAT": "console",
        "BANLIEUE_LOG_LEVEL": "warn", "BANLIEUE_VSPHERE_TASK_TIMEOUT": "30",
    }
    options = role(["provider", "vsphere"], env, isolated).options
    assert options == Options(
        kubeconfig=str(kubeconfig), namespace="team-b", watch_filter="green", metrics_bind_address="0",
        health_probe_bind_address="127.0.0.1:0", leader_elect=True, leader_election_namespace="leases",
        max_concurrent_reconciles=7, log_format="console", log_level="warning", vsphere_task_timeout=30.0,
    )


def test_flag_wins_over_env(isolated: dict[str, Path]) -> None:
    env = {"BANLIEUE_LEADER_ELECT": "true", "BANLIEUE_LOG_LEVEL": "error", "BANLIEUE_NAMESPACE": "team-b"}
    options = role(["controller", "--leader-elect=false", "--log-level", "info", "--namespace", ""],
                   env, isolated).options
    assert (options.leader_elect, options.log_level, options.namespace) == (False, "info", None)


def test_kubeconfig_falls_back_to_kubeconfig_env_then_in_cluster(isolated: dict[str, Path], tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("clusters: []\n")
    b.write_text("clusters: []\n")
    assert role(["manager"], {"KUBECONFIG": f"{a}:{b}"}, isolated).options.kubeconfig == f"{a}:{b}"
    with pytest.raises(UsageError, match=r"^KUBECONFIG must be an existing kubeconfig file \(got /x/a\)$"):
        role(["manager"], {"KUBECONFIG": "/x/a"}, isolated)
    # The flag wins: a broken KUBECONFIG is not read when --kubeconfig is given.
    assert role(["manager", "--kubeconfig", str(a)], {"KUBECONFIG": "/x/a"}, isolated).options.kubeconfig == str(a)
    in_cluster = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBECONFIG": ""}
    assert role(["manager"], in_cluster, isolated).options.kubeconfig is None


def test_kubeconfig_env_lists_several_files_flag_names_one(isolated: dict[str, Path], tmp_path: Path) -> None:
    """README (Configuration): KUBECONFIG may list several files, as kubectl allows (merged by
    kubernetes_asyncio's KubeConfigMerger); missing entries are skipped; a usage error (exit 2)
    only when none exists. ``--kubeconfig`` names one file."""
    a = tmp_path / "a"
    a.write_text("clusters: []\n")
    assert role(["manager"], {"KUBECONFIG": f"/x/gone:{a}"}, isolated).options.kubeconfig == str(a)
    with pytest.raises(UsageError, match=r"^KUBECONFIG must name an existing kubeconfig file \(got /x/a:/x/b\)$"):
        role(["manager"], {"KUBECONFIG": "/x/a:/x/b"}, isolated)
    with pytest.raises(UsageError, match=r"^--kubeconfig must be an existing kubeconfig file"):
        role(["manager", "--kubeconfig", f"{a}:{a}"], {}, isolated)


def test_leader_election_namespace_defaults_to_pod_namespace(tmp_path: Path) -> None:
    sa_file = tmp_path / "namespace"
    sa_file.write_text("banlieue-system")
    command = parse_command(["manager"], {}, home=tmp_path, sa_namespace_file=sa_file)
    assert isinstance(command, RoleCommand)
    assert command.options.leader_election_namespace == "banlieue-system"


def test_controller_has_no_vsphere_flag(isolated: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match="unrecognized arguments: --vsphere-task-timeout"):
        parse_command(["controller", "--vsphere-task-timeout", "5"], {}, **isolated)


def test_crdgen() -> None:
    assert parse_command(["crdgen", "--out", "/tmp/crds"], {}) == CrdgenCommand(out="/tmp/crds")
    assert parse_command(["crdgen"], {}) == CrdgenCommand(out="config/crd")


def test_dev_defaults_and_flags() -> None:
    command = parse_command(["dev"], {})
    assert isinstance(command, DevCommand)
    dev = command.dev
    assert (dev.exit_when_ready, dev.state_dir, dev.api_port, dev.vcsim_port) == (False, Path(".banlieue"), 0, 0)
    assert dev.vcsim_args == ()
    assert dev.options.log_format == "console"
    assert dev.options.metrics_bind_address == "127.0.0.1:8080"
    assert dev.options.kubeconfig is None and dev.options.leader_elect is False

    command = parse_command(
        ["dev", "--exit-when-ready", "--state-dir", "/tmp/st", "--api-port", "6443", "--vcsim-port=8989",
         "--metrics-bind-address", "127.0.0.1:0", "--log-format", "json",
         "--vcsim-arg=-method-delay=CloneVM_Task=5000,PowerOnVM_Task=10", "--vcsim-arg=--autostart"],
        {"BANLIEUE_MAX_CONCURRENT_RECONCILES": "3"},
    )
    assert isinstance(command, DevCommand)
    dev = command.dev
    assert (dev.exit_when_ready, dev.state_dir, dev.api_port, dev.vcsim_port) == (True, Path("/tmp/st"), 6443, 8989)
    assert (dev.options.metrics_bind_address, dev.options.log_format) == ("127.0.0.1:0", "json")
    assert dev.options.max_concurrent_reconciles == 3
    # Passed through in order (bin/vcsim's own flag parser checks them).
    assert dev.vcsim_args == ("-method-delay=CloneVM_Task=5000,PowerOnVM_Task=10", "--autostart")
    assert dev.keep_state is False


def test_dev_keep_state_flag_and_variable() -> None:
    for argv, env in ((["dev", "--keep-state"], {}), (["dev"], {"BANLIEUE_KEEP_STATE": "true"})):
        command = parse_command(argv, env)
        assert isinstance(command, DevCommand) and command.dev.keep_state is True, (argv, env)


def test_dev_vms_state_dir_from_its_flag_then_dev_s_then_the_environment() -> None:
    assert parse_command(["dev", "vms"], {}) == DevVmsCommand(Path(".banlieue"))
    assert parse_command(["dev", "vms", "--vcenter", "vcenter-a", "-o", "json", "--state-dir", "/s"], {}) == \
        DevVmsCommand(Path("/s"), "vcenter-a", "json")
    assert parse_command(["dev", "--state-dir", "/d", "vms"], {}) == DevVmsCommand(Path("/d"))
    assert parse_command(["dev", "vms"], {"BANLIEUE_STATE_DIR": "/e"}) == DevVmsCommand(Path("/e"))
    with pytest.raises(UsageError, match="invalid choice: 'yaml'"):
        parse_command(["dev", "vms", "-o", "yaml"], {})


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {}, "missing command"),
        (["provider"], {}, "missing backend: banlieue provider vsphere"),
        (["provider", "hyperv"], {}, "invalid choice: 'hyperv'"),
        (["manager", "--max-concurrent-reconciles", "0"], {}, "--max-concurrent-reconciles must be >= 1 (got 0)"),
        (["manager"], {"BANLIEUE_LEADER_ELECT": "sometimes"}, "BANLIEUE_LEADER_ELECT must be true or false"),
        (["manager", "--log-format", "xml"], {}, "--log-format must be one of json, console (got xml)"),
        (["manager", "--kubeconfig", "/nonexistent/kc"], {}, "--kubeconfig must be an existing kubeconfig file"),
        (["manager", "--watch-filter", "a b"], {}, "--watch-filter must be a valid label value"),
        (["dev", "--api-port", "70000"], {}, "--api-port must be a port number"),
        (["dev", "--state-dir", ""], {}, "--state-dir must be a directory path (got '')"),
        (["dev", "--vcsim-arg=method-delay=5"], {}, "--vcsim-arg: 'method-delay=5' must be a simulator flag"),
        (["manager", "--vsphere-task-timeout", "99999999999999999999"], {},
         "--vsphere-task-timeout must be a number of seconds from 1 to 86400"),
        (["manager", "--secret-resync-period", "0.0001"], {},
         "--secret-resync-period must be a number of seconds from 1 to 86400"),
        (["manager", "--vsphere-task-timeout", "nan"], {}, "--vsphere-task-timeout must be a number of seconds from 1 to 86400"),
    ],
    ids=["no-command", "no-backend", "unknown-backend", "zero-workers", "bad-env-bool", "bad-log-format",
         "missing-kubeconfig", "bad-watch-filter", "bad-port", "empty-state-dir", "vcsim-arg-not-a-flag",
         "task-timeout-huge", "resync-tiny", "task-timeout-nan"],
)
def test_usage_errors(argv: list[str], env: dict[str, str], message: str, isolated: dict[str, Path]) -> None:
    with pytest.raises(UsageError) as err:
        parse_command(argv, env, **isolated)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
