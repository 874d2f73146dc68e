"""Prometheus metrics of the vSphere adapter, defined once per process.

Labels: ``provider`` is the Provider (``namespace/name``) whose session made the request (two
Providers on one vCenter are told apart; the endpoint is in the Provider's ``spec.connection``
and in the logs' ``vcenter`` key), ``method`` the SOAP method's WSDL name
(``RetrievePropertiesEx``, ``CloneVM_Task``, ...), ``outcome`` one of ``success``, ``fault``
(the server answered with a SOAP fault) or ``error`` (no answer: connection, TLS, timeout).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter(
    "banlieue_vsphere_requests_total",
    "SOAP requests sent to vCenter, by method and outcome.",
    ["provider", "method", "outcome"],
)
REQUEST_DURATION = Histogram(
    "banlieue_vsphere_request_duration_seconds",
    "SOAP request latency in seconds (long polls included).",
    ["provider", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
)
SESSIONS = Gauge(
    "banlieue_vsphere_sessions",
    "Logged-in vCenter sessions held by this process.",
    ["provider"],
)
TASKS_IN_FLIGHT = Gauge(
    "banlieue_vsphere_tasks_in_flight",
    "vSphere tasks this process is waiting for.",
    ["provider"],
)
