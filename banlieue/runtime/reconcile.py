"""Reconcile types: controller-runtime ``pkg/reconcile`` (Request, Result, Reconciler,
TerminalError), plus ``RetryError``.

How the controller treats what a reconciler returns or raises (``cr:pkg/internal/controller``):

| reconcile outcome                          | queue action                        | result label   |
|--------------------------------------------|-------------------------------------|----------------|
| raises an exception (not terminal)         | add_rate_limited                    | error          |
| raises ``RetryError`` (expected; no trace) | add_rate_limited                    | error          |
| raises ``TerminalError`` (or one in chain) | nothing: no requeue, no forget      | error          |
| ``Result(requeue_after=s)``, s > 0         | forget, then add_after(s)           | requeue_after  |
| ``Result(requeue=True)``                   | add_rate_limited                    | requeue        |
| ``Result()``                               | forget                              | success        |
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Request:
    """The key of one reconcile: the object's ``namespace`` ("" for cluster-scoped) and ``name``.

    Hashable and ordered; it is the work queue's dedup key (cr ``reconcile.Request``).
    """

    namespace: str
    name: str

    def __str__(self) -> str:
        """``namespace/name``, or ``name`` for cluster-scoped objects (client-go key format)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def from_key(cls, key: str) -> Request:
        """Parse a client-go key ``namespace/name`` or ``name`` (cluster-scoped)."""
        namespace, sep, name = key.partition("/")
        return cls(namespace, name) if sep else cls("", namespace)


@dataclass(frozen=True, slots=True)
class Result:
    """What a successful reconcile asks for next (cr ``reconcile.Result``).

    ``requeue_after``: seconds; when > 0 the request is reconciled again after that delay and its
    backoff is reset. ``requeue=True`` (deprecated in controller-runtime) requeues through the rate
    limiter, which counts as a failure for backoff. ``requeue_after`` wins when both are set.
    """

    requeue: bool = False
    requeue_after: float | None = None

    def is_zero(self) -> bool:
        """True when nothing is asked for (the plain success case)."""
        return not self.requeue and not self.requeue_after


class TerminalError(Exception):
    """A reconcile error that retrying cannot fix (cr ``reconcile.TerminalError``).

    Raise it (``raise TerminalError("bad spec") from err``) to record the failure without a
    requeue: the controller counts it in ``reconcile_errors_total`` and
    ``terminal_reconcile_errors_total`` and does not call ``forget``, so the backoff state stays.
    """


class RetryError(Exception):
    """A reconcile error raised on purpose to be retried with back-off, whose cause the
    reconciler has already reported on the object (a condition with a reason and message): the
    controller logs "Reconciler error" with its message but without a traceback (in Go a returned
    error carries no stack; a Python traceback here would only show the ``raise``)."""


def is_terminal(exc: BaseException) -> bool:
    """Whether ``exc`` is terminal: a ``TerminalError`` itself, one in its explicit ``__cause__``
    chain, or (for exception groups) any member that is terminal. Mirrors Go's
    ``errors.Is(err, &terminalError{})``, which walks wrapped and joined errors."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, TerminalError):
            return True
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        if current.__cause__ is not None:
            todo.append(current.__cause__)
    return False


class Reconciler(Protocol):
    """Drives the object named by a ``Request`` towards its desired state (cr ``Reconciler``).

    Return a ``Result``; raise to be retried with backoff; raise ``TerminalError`` to stop
    retrying. Must be idempotent: it is called again for the same request at any time.
    """

    async def reconcile(self, request: Request) -> Result: ...


class Func:
    """Adapts an ``async def fn(request) -> Result`` to the ``Reconciler`` protocol (cr
    ``reconcile.Func``)."""

    def __init__(self, fn: Callable[[Request], Awaitable[Result]]) -> None:
        self.fn = fn

    async def reconcile(self, request: Request) -> Result:
        return await self.fn(request)
