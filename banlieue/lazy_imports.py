"""kubernetes_asyncio without its generated API and model modules until something asks for them.

Why: kubernetes_asyncio's package ``__init__`` imports every generated API class and model
(``kubernetes_asyncio/client/__init__.py``: 844 import lines, about 1,100 modules with
``client.api`` and ``client.models``), and ``kubernetes_asyncio/__init__.py`` imports ``client``,
so any import of the library loads them. banlieue talks to the API server with plain dicts and
uses only ``client.configuration.Configuration``, ``client.api_client.ApiClient`` (its aiohttp
REST client, default headers and token refresh) and ``config`` (kubeconfig, in-cluster, exec
plugins). The generated modules were about a third of the manager's resident memory: 94.5 MiB
after importing the manager's modules with them, 61.6 MiB without (kubernetes_asyncio 36.1.0,
Python 3.11; issue 22 compares the manager's peak RSS with CAPV's).

What: ``defer_kubernetes_asyncio_models()`` puts in ``sys.modules`` package modules named
``kubernetes_asyncio``, ``kubernetes_asyncio.client`` and ``kubernetes_asyncio.client.models``
whose ``__path__`` and ``__spec__`` are the installed packages' own, with nothing in them yet. Their
submodules (``client.configuration``, ``client.api_client``, ``client.rest``, ``config``, ...)
therefore import from the library's own files, unchanged. A name such a package lacks is looked
up on first use (PEP 562 module ``__getattr__``): a submodule of that name is imported; any other
name runs the library's own ``__init__.py`` in the package's namespace once, so
``from kubernetes_asyncio.client import V1Pod``, ``kubernetes_asyncio.watch.Watch`` or
``ApiClient.deserialize`` behave as without the deferral, at the full import's cost then. Nothing
of the library's code is copied or changed. It does nothing when ``kubernetes_asyncio`` is
imported already or is not installed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import threading
import types
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

DEFERRED = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.models")
"""The packages whose ``__init__`` runs only when a name it defines is asked for; parents first."""

_lock = threading.RLock()


def _spec(name: str) -> ModuleSpec | None:
    # find_spec of a dotted name imports its parent: the parents are deferred first, so this
    # finds the child's spec through the deferred parent's __path__ without running it.
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _reexports(spec: ModuleSpec) -> dict[str, tuple[str, str]]:
    """Names a package's ``__init__.py`` imports from one of its modules: name -> (module,
    attribute), from its top-level ``from <absolute module> import <name> [as <alias>]``
    statements (``import a.b as c`` too, as (``a.b``, ``""``)). Empty when the source cannot be read."""
    try:
        assert spec.origin is not None
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), spec.origin)
    except (AssertionError, OSError, SyntaxError, UnicodeDecodeError):
        return {}
    names: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = (alias.name, "")
    return names


def _completer(module: types.ModuleType, spec: ModuleSpec) -> Callable[[str], Any]:
    """The module ``__getattr__`` of a deferred package. A name its ``__init__`` imports from a
    module (``_reexports``) imports that module alone; a submodule of that name is imported;
    anything else runs the package's own ``__init__`` once. Then the name, or AttributeError as
    for any module lacking it."""
    completed = False
    reexports = _reexports(spec)

    def __getattr__(name: str) -> Any:
        nonlocal completed
        # No lock around these imports: the import system locks each module itself, and a lock
        # of ours held across an import could deadlock with a thread importing the other way.
        if not completed and name in reexports:
            source, attr = reexports[name]
            value = importlib.import_module(source)
            if attr:
                value = getattr(value, attr)
            setattr(module, name, value)
            return value
        if _spec(f"{module.__name__}.{name}") is not None:
            return importlib.import_module(f"{module.__name__}.{name}")
        # Any other name completes the package, dunders too (``__version__``, ``__all__``): a
        # probe that loads the generated modules costs memory, never a wrong answer.
        with _lock:
            if not completed:
                completed = True
                assert spec.loader is not None
                spec.loader.exec_module(module)  # the library's own __init__.py, in this namespace
        if name in module.__dict__:
            return module.__dict__[name]
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    return __getattr__


def defer_kubernetes_asyncio_models() -> bool:
    """Install the deferred ``kubernetes_asyncio`` packages (module docstring). Returns True when
    installed now, False when the library is imported already or not installed. Never raises."""
    with _lock:
        if DEFERRED[0] in sys.modules:
            return False
        installed: list[str] = []
        for name in DEFERRED:
            spec = _spec(name)
            if spec is None or spec.loader is None or spec.submodule_search_locations is None:
                for done in reversed(installed):  # leave the import system as it was
                    del sys.modules[done]
                return False
            module = importlib.util.module_from_spec(spec)
            module.__getattr__ = _completer(module, spec)  # type: ignore[method-assign]
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
            installed.append(name)
        return True
