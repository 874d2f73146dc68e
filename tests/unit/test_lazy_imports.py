"""banlieue.lazy_imports: the manager's modules and a real request through ``Client`` load none of
kubernetes_asyncio's generated API and model modules, and the library still behaves as without the
deferral for code that uses them. Each case runs in a fresh interpreter: the deferral is decided
by what was imported first."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

GENERATED = "sorted(m for m in sys.modules if m.startswith(('kubernetes_asyncio.client.models.', 'kubernetes_asyncio.client.api.')))"


def run(code: str) -> dict:
    """Run ``code`` in a fresh interpreter from the repository; it prints one JSON line last."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_manager_modules_and_a_request_load_no_generated_module(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    result = run(f"""
        import asyncio, json, sys
        from aiohttp import web
        import banlieue.cli, banlieue.cmd.roles, banlieue.cmd.dev
        from banlieue.reconcilers.vspheremachine import controller as _vm
        from banlieue.reconcilers.virtualmachine import controller as _v
        from banlieue.runtime.client import Client
        from banlieue.runtime.config import load_config

        async def main():
            seen = {{}}
            async def version(request):
                seen["authorization"] = request.headers.get("Authorization")
                return web.json_response({{"gitVersion": "v1.34.4"}})
            app = web.Application(); app.router.add_get("/version", version)
            runner = web.AppRunner(app); await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0); await site.start()
            port = site._server.sockets[0].getsockname()[1]
            open({str(kubeconfig)!r}, "w").write(json.dumps({{
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{{"name": "c", "cluster": {{"server": f"http://127.0.0.1:{{port}}"}}}}],
                "users": [{{"name": "u", "user": {{"token": "t0ken"}}}}],
                "contexts": [{{"name": "c", "context": {{"cluster": "c", "user": "u"}}}}]}}))
            cfg = await load_config({str(kubeconfig)!r})
            client = Client(cfg)
            body = await client.request("GET", "/version")
            await client.close(); await runner.cleanup()
            return body, seen
        body, seen = asyncio.run(main())
        print(json.dumps({{"body": body, "seen": seen, "generated": {GENERATED}}}))
    """)
    assert result["body"] == {"gitVersion": "v1.34.4"}
    assert result["seen"] == {"authorization": "Bearer t0ken"}
    assert result["generated"] == []


def test_code_using_the_generated_modules_gets_them() -> None:
    result = run(f"""
        import json, sys, importlib.metadata
        import banlieue.runtime.client
        before = {GENERATED}
        import kubernetes_asyncio
        from kubernetes_asyncio.client import V1ObjectMeta, CoreV1Api, ApiClient
        from kubernetes_asyncio.client.models import V1Pod
        from kubernetes_asyncio import client, watch
        import asyncio

        class Resp:
            data = json.dumps({{"metadata": {{"name": "q", "labels": {{"a": "b"}}}}}})

        async def roundtrip():  # ApiClient opens an aiohttp connector: it needs a running loop
            async with ApiClient() as api:
                return (api.sanitize_for_serialization(client.V1Pod(metadata=V1ObjectMeta(name="p"))),
                        api.deserialize(Resp(), "V1Pod"))
        wire, back = asyncio.run(roundtrip())
        print(json.dumps({{
            "before": before, "version": kubernetes_asyncio.__version__,
            "dist": importlib.metadata.version("kubernetes_asyncio"),
            "wire": wire, "back": [back.metadata.name, back.metadata.labels],
            "same_class": V1Pod is client.models.V1Pod is type(back),
            "api": CoreV1Api.__module__, "watch": watch.Watch.__name__,
            "star": "V1Pod" in client.__dict__}}))
    """)
    assert result["before"] == []
    assert result["version"] == result["dist"]
    assert result["wire"] == {"metadata": {"name": "p"}}
    assert result["back"] == ["q", {"a": "b"}]
    assert result["same_class"] is True
    assert result["api"] == "kubernetes_asyncio.client.api.core_v1_api"
    assert result["watch"] == "Watch"


def test_nothing_is_deferred_when_the_library_was_imported_first() -> None:
    result = run(f"""
        import json, sys
        import kubernetes_asyncio
        full = len({GENERATED})
        from banlieue.lazy_imports import defer_kubernetes_asyncio_models
        import banlieue.runtime.client
        print(json.dumps({{"full": full, "again": defer_kubernetes_asyncio_models(),
                           "getattr": "__getattr__" in vars(sys.modules["kubernetes_asyncio.client"])}}))
    """)
    assert result["full"] > 500
    assert result["again"] is False
    assert result["getattr"] is False


def test_a_name_the_library_does_not_have_is_an_attribute_error() -> None:
    result = run("""
        import json
        import banlieue
        import kubernetes_asyncio.client as client
        try:
            client.NoSuchThing
            outcome = "no error"
        except AttributeError as err:
            outcome = str(err)
        try:
            from kubernetes_asyncio.client import NoSuchThingEither  # noqa: F401
            imported = "no error"
        except ImportError as err:
            imported = type(err).__name__
        print(json.dumps({"outcome": outcome, "imported": imported}))
    """)
    assert result["outcome"] == "module 'kubernetes_asyncio.client' has no attribute 'NoSuchThing'"
    assert result["imported"] == "ImportError"
