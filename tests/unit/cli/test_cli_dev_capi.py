"""``banlieue dev --capi`` on the command line: it implies the real API server, and refuses the
API-server double when that was asked for (flag or BANLIEUE_APISERVER)."""

from __future__ import annotations

import pytest

from banlieue.cmd.parser import DevCommand, parse_command
from banlieue.options import UsageError


def test_capi_implies_the_real_apiserver() -> None:
    command = parse_command(["dev", "--capi"], {})
    assert isinstance(command, DevCommand)
    assert (command.dev.capi, command.dev.apiserver) == (True, "real")
    plain = parse_command(["dev"], {})
    assert isinstance(plain, DevCommand) and (plain.dev.capi, plain.dev.apiserver) == (False, "double")
    from_env = parse_command(["dev"], {"BANLIEUE_CAPI": "true"})
    assert isinstance(from_env, DevCommand) and (from_env.dev.capi, from_env.dev.apiserver) == (True, "real")


@pytest.mark.parametrize(("argv", "env"), [(["dev", "--capi", "--apiserver", "double"], {}),
                                           (["dev", "--capi"], {"BANLIEUE_APISERVER": "double"})])
def test_capi_with_the_double_asked_for_is_a_usage_error(argv: list[str], env: dict[str, str]) -> None:
    with pytest.raises(UsageError, match=r"^--capi needs --apiserver real \(CAPI's webhooks and CRD conversion need a real kube-apiserver\)$"):
        parse_command(argv, env)
