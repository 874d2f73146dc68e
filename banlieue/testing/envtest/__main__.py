"""``python -m banlieue.testing.envtest up --dir DIR [--port N]``: start envtest, print one line when
ready, run until SIGTERM/SIGINT, then stop everything and remove what was written into DIR. A
failure is one line on stderr naming the log to read, exit status 1."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import EnvtestError, up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m banlieue.testing.envtest",
                                     description="A real kube-apiserver + etcd + kube-controller-manager on loopback.")
    sub = parser.add_subparsers(dest="command", required=True)
    up_cmd = sub.add_parser("up", help="start, print one line when ready, run until SIGTERM/SIGINT")
    up_cmd.add_argument("--dir", required=True, type=Path, help="directory for the kubeconfig, certificates, data, logs")
    up_cmd.add_argument("--port", type=int, default=0, help="kube-apiserver's port on 127.0.0.1 (default: a free one)")
    args = parser.parse_args(argv)
    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.monotonic()
    try:
        env = up(args.dir, port=args.port)
    except EnvtestError as err:
        print(f"envtest: {err}", file=sys.stderr)
        return 1
    print(f"envtest ready in {time.monotonic() - started:.1f} s: {env.url} kubeconfig={env.kubeconfig_path}",
          flush=True)
    try:
        while not stop:
            for proc in env.procs:
                if proc.process.poll() is not None:
                    print(f"envtest: {proc.name} exited with status {proc.process.returncode}; see {proc.log}",
                          file=sys.stderr)
                    env.stop(keep_logs=True)
                    return 1
            time.sleep(0.5)
    finally:
        env.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
