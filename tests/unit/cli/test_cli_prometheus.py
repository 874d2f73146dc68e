"""config/prometheus: the alert rules, the ServiceMonitor and the Grafana dashboard.

Every metric name an alert or panel queries must be one banlieue actually exports (read from
prometheus_client's registry after importing the modules that define them), so a renamed metric
breaks this test instead of silently emptying a dashboard.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

import banlieue.backends.vsphere.metrics
import banlieue.reconcilers.metrics
import banlieue.runtime.metrics  # noqa: F401  (registers the controller-runtime metrics)

ROOT = Path(__file__).resolve().parents[3]
PROMETHEUS = ROOT / "config/prometheus"
PROMTOOL = shutil.which("promtool")

# Exported by Prometheus itself for every scrape target.
SYNTHETIC = {"up"}
# Named in this config ahead of their definition (none at the moment). Once registered, a name
# is checked like any other; drop it from here then.
PENDING: set[str] = set()

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
             "bool", "offset", "le"}


def exported_metric_names() -> set[str]:
    """Sample names of every metric registered in-process (``_total``, ``_bucket``... included).

    prometheus_client keeps them in ``_names_to_collectors`` (what its duplicate check uses);
    the public ``collect()`` only yields metrics that already have labelled children.
    """
    return set(REGISTRY._names_to_collectors)


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords and labels removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)                 # string literals
    text = re.sub(r"\{[^}]*\}", "", text)                         # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)                        # ranges, subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b(?!\s*\()", text))
    return {n for n in names if n not in _KEYWORDS}


def load_rules() -> dict[str, Any]:
    [rule] = list(yaml.safe_load_all((PROMETHEUS / "rules.yaml").read_text()))
    return rule  # type: ignore[no-any-return]


def all_alerts() -> list[dict[str, Any]]:
    return [r for group in load_rules()["spec"]["groups"] for r in group["rules"]]


def dashboard() -> dict[str, Any]:
    return json.loads((PROMETHEUS / "dashboard.json").read_text())  # type: ignore[no-any-return]


def test_promql_metric_names_extraction() -> None:
    expr = ('histogram_quantile(0.99, sum by (controller, le) (rate(x_bucket{job=~"$job", a="b{c}"}'
            '[$__rate_interval]))) / clamp_min(sum without (pod) (y_total offset 5m), 1e-9) > 0 and on (name) z')
    assert promql_metric_names(expr) == {"x_bucket", "y_total", "z"}


def test_rules_are_a_prometheus_rule_with_runbooks() -> None:
    rule = load_rules()
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    alerts = all_alerts()
    names = [a["alert"] for a in alerts]
    assert len(names) == len(set(names))
    assert {"BanlieueReconcileErrors", "BanlieueWorkQueueDepthGrowing", "BanlieueVCenterErrors",
            "BanlieueVCenterNoSession", "BanlieueVirtualMachinesNotReady", "BanlieueLeaderAbsent"} <= set(names)
    operations = (ROOT / "docs/operations.md").read_text()
    for alert in alerts:
        assert alert["labels"]["severity"] in {"warning", "critical"}
        assert {"summary", "description", "runbook"} <= alert["annotations"].keys()
        anchor = alert["annotations"]["runbook"].split("#", 1)[1]
        # GitHub's heading anchors: "### BanlieueLeaderAbsent" -> #banlieueleaderabsent.
        assert f"### {alert['alert']}" in operations and anchor == alert["alert"].lower()
        assert 'job="banlieue-manager-metrics"' in alert["expr"], "scope to banlieue's own series"


def test_every_queried_metric_is_exported() -> None:
    known = exported_metric_names() | SYNTHETIC | PENDING
    assert "controller_runtime_reconcile_errors_total" in known  # the registry was read
    used: dict[str, str] = {}
    for alert in all_alerts():
        used.update(dict.fromkeys(promql_metric_names(alert["expr"]), alert["alert"]))
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            used.update(dict.fromkeys(promql_metric_names(target["expr"]), panel["title"]))
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            metric = re.match(r"label_values\(([a-zA-Z_:][\w:]*)", variable["query"]["query"])
            assert metric is not None
            used[metric.group(1)] = variable["name"]
    unknown = {name: where for name, where in used.items() if name not in known}
    assert not unknown


def test_dashboard_shape() -> None:
    board = dashboard()
    assert board["uid"] == "banlieue-overview"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"] for p in board["panels"]).lower()
    for topic in ("reconcile", "queue depth", "queue latency", "workers", "vsphere request", "by phase"):
        assert topic in titles
    for panel in board["panels"]:
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        for target in panel.get("targets", []):
            assert target["expr"].count("(") == target["expr"].count(")")
            assert 'job=~"$job"' in target["expr"]


def test_service_monitor_matches_the_metrics_service() -> None:
    [monitor] = list(yaml.safe_load_all((PROMETHEUS / "servicemonitor.yaml").read_text()))
    [service] = list(yaml.safe_load_all((ROOT / "config/manager/service.yaml").read_text()))
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [service["spec"]["ports"][0]["name"]]
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    # The Deployment serves /metrics over HTTPS to bearer tokens allowed `get /metrics`.
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["bearerTokenFile"].endswith("/serviceaccount/token")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")
def test_promtool_checks_and_unit_tests_the_rules(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(load_rules()["spec"]))
    shutil.copy(Path(__file__).parent / "data/alerts_test.yaml", tmp_path / "alerts_test.yaml")
    check = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "rules.yaml")],
                           capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "alerts_test.yaml")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert test.returncode == 0, test.stdout + test.stderr
