"""The ``banlieue`` command: argument parsing, logging setup and the per-role entry points.

``banlieue.cli:main`` is the console script; it parses with :mod:`banlieue.cmd.parser`, sets up
logging with :mod:`banlieue.runtime.log`, and dispatches to :mod:`banlieue.cmd.roles` (controller,
provider vsphere, manager) or :mod:`banlieue.cmd.dev` (``banlieue dev``), both imported lazily so
that ``--help``, ``--version`` and ``crdgen`` stay fast and do not import the runtime.
"""
