"""A counting HTTPS proxy in front of one vcsim, for ``bench/capv.py``: every request a provider
sends to "vCenter" goes through it and is logged as one line ``<unix time>\\t<method>`` to
``--log`` (flushed every 0.5 s), where ``<method>`` is the SOAP operation (the first element of the
envelope's Body, e.g. ``CloneVM_Task``, ``RetrievePropertiesEx``) or, for vAPI REST, ``REST <verb>
<path>`` with digits and ids reduced (``/api/session``, ``/rest/com/vmware/cis/tagging/...``) and
the old vAPI's ``~action`` query kept (``REST POST /rest/com/vmware/cis/session?~action=get``).

    .venv/bin/python bench/soap_proxy.py --upstream https://127.0.0.1:PORT --ca CA.pem \\
        --cert SERVER.pem --key SERVER-KEY.pem --listen-port 0 --port-file F --log F

It serves TLS with vcsim's own certificate (so a client that pins vcsim's thumbprint or CA accepts
the proxy) on 127.0.0.1 only, and dials only the given upstream, which must be on loopback (the
network rule). The port is written to ``--port-file`` once listening. Exit on SIGTERM/SIGINT.

With ``--task-log F``, every task a ``*_Task`` operation started is also logged to ``F`` as
``<unix time>\t<operation>\t<task moref>`` once vcsim answered (``bench/capv.py`` follows those
tasks to count how many run at once).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import ipaddress
import re
import signal
import ssl
import sys
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

import aiohttp
from aiohttp import web

BODY_OP = re.compile(rb"<(?:[\w-]+:)?Body\b[^>]*>\s*<(?:[\w-]+:)?([A-Za-z_][\w]*)")
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host", "upgrade"})
OBJ_TYPE = re.compile(rb"<(?:[\w-]+:)?obj\b[^>]*\btype=\"(\w+)\"")
TASK_REF = re.compile(rb"<(?:[\w-]+:)?returnval\b[^>]*\btype=\"Task\"[^>]*>\s*([\w.-]+)\s*<")
ID_SEGMENT = re.compile(r"/(?:[0-9a-f-]{8,}|[\w:-]*\d[\w:.-]*)(?=/|$)")


def operation(method: str, path: str, body: bytes, query: Mapping[str, str] | None = None) -> str:
    """The counted name of one request: the SOAP operation for ``POST /sdk``, else ``REST <verb>
    <path>`` with id-like segments replaced by ``/{id}`` (so counts group by endpoint)."""
    query = query or {}
    if path.startswith("/sdk") and method == "POST":
        m = BODY_OP.search(body[:4096])
        return m.group(1).decode() if m else "SOAP?"
    # The old vAPI endpoints name the operation in the query: POST .../session is a login,
    # POST .../session?~action=get a check of the current session.
    action = f"?~action={query['~action']}" if "~action" in query else ""
    return f"REST {method} {ID_SEGMENT.sub('/{id}', path)}{action}"


def detail(op: str, body: bytes) -> str:
    """For a PropertyCollector read (``RetrievePropertiesEx``), the type of the first object it
    names (``Task``: a task poll; ``VirtualMachine``: a VM read; ``Folder``: a traversal from the
    root, i.e. a scan); "" otherwise. Logged as a third column, so counts by method are unchanged."""
    if op != "RetrievePropertiesEx":
        return ""
    m = OBJ_TYPE.search(body)
    return m.group(1).decode() if m else "?"


def task_ref(payload: bytes, encoding: str) -> str:
    """The moref of the Task a ``*_Task`` operation answered (``task-123``), "" if none (a fault)."""
    if encoding == "gzip":
        payload = gzip.decompress(payload)
    elif encoding:
        return ""
    m = TASK_REF.search(payload)
    return m.group(1).decode() if m else ""


async def serve(args: argparse.Namespace, log: TextIO, tasks: TextIO | None = None) -> None:
    upstream = args.upstream.rstrip("/")
    host = urllib.parse.urlsplit(upstream).hostname or ""
    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"soap_proxy: upstream {upstream} is not on loopback (network rule)")
    client_ctx = ssl.create_default_context(cafile=args.ca)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(args.cert, args.key)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=client_ctx),
                                    timeout=aiohttp.ClientTimeout(total=None, sock_read=None), auto_decompress=False)

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        op = operation(request.method, request.path, body, request.query)
        extra = detail(op, body)
        log.write(f"{time.time():.3f}\t{op}" + (f"\t{extra}" if extra else "") + "\n")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        async with session.request(request.method, upstream + request.path_qs, data=body, headers=headers,
                                   allow_redirects=False) as up:
            payload = await up.read()
            if tasks is not None and op.endswith("_Task") and up.status == 200:
                ref = task_ref(payload, up.headers.get("Content-Encoding", ""))
                if ref:
                    tasks.write(f"{time.time():.3f}\t{op}\t{ref}\n")
            out = web.Response(status=up.status, body=payload)
            for k, v in up.headers.items():
                if k.lower() not in HOP_HEADERS:
                    out.headers.add(k, v)
            if "Content-Encoding" in up.headers:
                out.headers["Content-Encoding"] = up.headers["Content-Encoding"]
            return out

    app = web.Application(client_max_size=64 << 20)
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.listen_port, ssl_context=server_ctx, backlog=1024)
    await site.start()
    port = runner.addresses[0][1]
    await asyncio.to_thread(Path(args.port_file).write_text, str(port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def flusher() -> None:
        while True:
            await asyncio.sleep(0.5)
            log.flush()
            if tasks is not None:
                tasks.flush()

    task = asyncio.create_task(flusher())
    await stop.wait()
    task.cancel()
    log.flush()
    if tasks is not None:
        tasks.flush()
    await runner.cleanup()
    await session.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/soap_proxy.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help="vcsim base URL, https://127.0.0.1:PORT")
    p.add_argument("--ca", required=True, help="CA bundle that signed vcsim's certificate")
    p.add_argument("--cert", required=True, help="certificate to serve (vcsim's server.pem)")
    p.add_argument("--key", required=True, help="its key (vcsim's server-key.pem)")
    p.add_argument("--listen-port", type=int, default=0)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--task-log", help="also log '<time>\\t<operation>\\t<task moref>' for every task a *_Task operation started")
    args = p.parse_args(argv)
    # Checked before anything is opened or started: one line and exit 2 (the network rule: loopback only).
    parts = urllib.parse.urlsplit(args.upstream)
    try:
        loopback = parts.scheme == "https" and ipaddress.ip_address(parts.hostname or "").is_loopback and 0 < (parts.port or 443) < 65536
    except ValueError:
        loopback = False
    if not loopback:
        p.error(f"--upstream {args.upstream!r}: give https://<loopback IP>:<port> (the network rule: loopback only)")
    for flag, path in (("--ca", args.ca), ("--cert", args.cert), ("--key", args.key)):
        if not Path(path).is_file():
            p.error(f"{flag} {path}: no such file")
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(Path(args.log).open("a", buffering=1 << 16))
        tasks = stack.enter_context(Path(args.task_log).open("a", buffering=1 << 16)) if args.task_log else None
        asyncio.run(serve(args, log, tasks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
