"""banlieue's controller runtime: informer, cache, workqueue, controller, manager.

Follows client-go and controller-runtime semantics and names; knows nothing about VMs. The
public surface is re-exported here; each concept lives in the module named after it.
"""

from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.cache import Cache, Indexer
from banlieue.runtime.client import Client, retry_on_conflict
from banlieue.runtime.controller import Controller
from banlieue.runtime.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
)
from banlieue.runtime.event import DeletedFinalStateUnknown, Object, ResourceEventHandler
from banlieue.runtime.handler import (
    EnqueueRequestForObject,
    EnqueueRequestForOwner,
    EnqueueRequestsFromMapFunc,
)
from banlieue.runtime.informer import Informer
from banlieue.runtime.kinds import ResourceKind
from banlieue.runtime.leaderelection import LeaderElector
from banlieue.runtime.manager import Manager
from banlieue.runtime.queue import WorkQueue
from banlieue.runtime.rate_limiting_queue import RateLimitingQueue
from banlieue.runtime.reconcile import Reconciler, Request, Result, RetryError, TerminalError
from banlieue.runtime.recorder import EventRecorder

__all__ = [
    "AlreadyExists",
    "ApiError",
    "Cache",
    "Client",
    "Conflict",
    "Controller",
    "ControllerBuilder",
    "DeletedFinalStateUnknown",
    "EnqueueRequestForObject",
    "EnqueueRequestForOwner",
    "EnqueueRequestsFromMapFunc",
    "EventRecorder",
    "Gone",
    "Indexer",
    "Informer",
    "Invalid",
    "LeaderElector",
    "Manager",
    "NotFound",
    "Object",
    "RateLimitingQueue",
    "Reconciler",
    "Request",
    "ResourceEventHandler",
    "ResourceKind",
    "Result",
    "RetryError",
    "ServerError",
    "TerminalError",
    "TooManyRequests",
    "WorkQueue",
    "retry_on_conflict",
]
