"""The ``banlieue`` console script: one executable, several roles (SPEC §4-§5).

Exit codes: 0 success; 1 the process could not start or failed (:class:`StartupError`, one line
on stderr); 2 invalid usage (bad flag or ``BANLIEUE_*`` value, including a ``--kubeconfig`` or
``KUBECONFIG`` that names no existing file; one line on stderr, as argparse does); 130 interrupted before the runtime installed its own signal handling; 141 the reader of stdout went
away (``| head``), quietly, as a shell reports a process SIGPIPE killed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence

from banlieue.options import StartupError, UsageError, env_from_os


def _fail(message: str, code: int) -> int:
    # One line, whatever the exception text holds: log collectors and humans both read it.
    print(f"banlieue: error: {' '.join(message.split())}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Entry point of the ``banlieue`` console script; returns the process exit code.

    ``argv`` defaults to ``sys.argv[1:]`` and ``env`` to ``os.environ`` (tests pass their own).
    """
    from banlieue.cmd.parser import CrddocCommand, CrdgenCommand, DevCommand, DevVmsCommand, parse_command

    try:
        command = parse_command(sys.argv[1:] if argv is None else argv, env_from_os() if env is None else env)
    except UsageError as err:
        return _fail(str(err), 2)
    try:
        if isinstance(command, CrdgenCommand):
            from banlieue.cmd import crdgen

            return crdgen.run(command.out, rbac_out=command.rbac_out, admission_out=command.admission_out,
                              namespaced_rbac_out=command.namespaced_rbac_out)
        if isinstance(command, CrddocCommand):
            from banlieue.cmd import crddoc

            return crddoc.run(command.out)
        if isinstance(command, DevVmsCommand):
            from banlieue.cmd import devvms

            code = devvms.main(command.state_dir, command.vcenter, command.output)
            sys.stdout.flush()  # here, where a reader gone away is handled, not at interpreter exit
            return code
        from banlieue.runtime.log import configure_logging

        if isinstance(command, DevCommand):
            from banlieue.cmd import dev

            configure_logging(command.dev.options.log_format, command.dev.options.log_level)
            return dev.main(command.dev)
        from banlieue.cmd.roles import run_role

        configure_logging(command.options.log_format, command.options.log_level)
        return asyncio.run(run_role(command.role, command.options))
    except StartupError as err:
        return _fail(str(err), 1)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()


SIGPIPE_EXIT = 128 + 13
"""Exit status of a command whose reader went away (``banlieue dev vms | head``): what a shell
reports for a process SIGPIPE killed, as it does for kubectl and other Go CLIs."""


def _reader_gone() -> int:
    # Python ignores SIGPIPE and raises instead; the reader (head, less) has what it wanted, so
    # this is no error to print. stdout is pointed at /dev/null so that the interpreter's final
    # flush of the buffered rest does not fail again with "Exception ignored ... BrokenPipeError"
    # (the recipe of the Python docs, "Note on SIGPIPE").
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return SIGPIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
