"""The ``banlieue`` command: one executable, several roles."""

from __future__ import annotations

import argparse
import sys

from banlieue import __version__


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``banlieue`` console script; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="banlieue")
    parser.add_argument("--version", action="version", version=f"banlieue {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    crd = sub.add_parser("crdgen", help="write the CRDs to a directory")
    crd.add_argument("--out", default="config/crd")
    args = parser.parse_args(argv)
    if args.command == "crdgen":
        from banlieue.api.crdgen import write_crds

        write_crds(args.out)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
