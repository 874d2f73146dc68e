"""``banlieue dev``: API-server double + vcsim + manager on 127.0.0.1, for ``make dev``.

PLACEHOLDER — another helper replaces :func:`main`. Contract for that implementation:

* ``args`` carries ``exit_when_ready``, ``state_dir`` (kubeconfig, logs, simulator state),
  ``api_port``/``vcsim_port`` (0 = a free port, 127.0.0.1 only) and ``options``, the embedded
  manager's :class:`banlieue.options.Options` (``kubeconfig`` is ``None``: dev writes its own
  into ``state_dir`` and passes ``dataclasses.replace(options, kubeconfig=...)``).
* Return the exit code; with ``exit_when_ready`` return 0 once the samples are Ready.
* Raise :class:`banlieue.options.StartupError` (one line, exit 1) when it cannot start, e.g.
  the vcsim binary is missing ("run make vcsim").
* Every child process and port is released on exit, including on SIGINT/SIGTERM.
"""

from __future__ import annotations

from banlieue.options import DevOptions, StartupError


def main(args: DevOptions) -> int:
    """Run the dev environment until interrupted (or until ready); returns the exit code."""
    # NOT IMPLEMENTED: replaced by the helper that builds the dev environment.
    raise StartupError("banlieue dev is not implemented yet")
