"""The Grafana dashboard (cluster/grafana/lorekeeper-dashboard.json, shipped by the chart as a ConfigMap):
a well-formed dashboard whose every query names a metric Lorekeeper exports, with that metric's labels,
and which covers ingestion, search, the narrator, the gate, the HTTP API and MCP."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.packages import PACKAGES
from tests.unit import deploy_checks as deploy

pytestmark = pytest.mark.unit

DASHBOARD = deploy.ROOT / "cluster" / "grafana" / "lorekeeper-dashboard.json"
CHART = deploy.ROOT / "helm" / "lorekeeper"
CHART_DASHBOARD = CHART / "dashboards" / "lorekeeper.json"
# Where the code defines its Prometheus metrics.

# The metrics the serving and search work export under these names and labels (the contract of the
# dashboard with them); where the code already defines one, its type must agree.
CONTRACT: dict[str, tuple[str, frozenset[str]]] = {
    "lorekeeper_search_duration_seconds": ("histogram", frozenset({"search_type"})),
    "lorekeeper_rerank_duration_seconds": ("histogram", frozenset({"model"})),
    "lorekeeper_narrator_time_to_first_token_seconds": ("histogram", frozenset()),
    "lorekeeper_narrator_output_tokens_total": ("counter", frozenset({"model"})),
    "lorekeeper_narrator_requests_total": ("counter", frozenset({"status"})),
    "lorekeeper_gate_decisions_total": ("counter", frozenset({"decision", "authority"})),
    "lorekeeper_http_requests_total": ("counter", frozenset({"route", "status"})),
    "lorekeeper_http_request_duration_seconds": ("histogram", frozenset({"route"})),
    "lorekeeper_mcp_tool_invocations_total": ("counter", frozenset({"tool", "status"})),
    "lorekeeper_mcp_tool_duration_seconds": ("histogram", frozenset({"tool"})),
    # the ingest contract's (../shared/docs/ingest-contract.md, "Metrics")
    "lorekeeper_ingest_jobs_total": ("counter", frozenset({"status"})),
    "lorekeeper_ingest_duration_seconds": ("histogram", frozenset({"library_type"})),
    "lorekeeper_chunks_created_total": ("counter", frozenset({"library_type"})),
    "lorekeeper_concepts_extracted_total": ("counter", frozenset()),
    "lorekeeper_embeddings_generated_total": ("counter", frozenset({"model"})),
    "lorekeeper_embedding_duration_seconds": ("histogram", frozenset({"model"})),
    "lorekeeper_search_results_total": ("counter", frozenset({"search_type"})),
    "lorekeeper_graph_query_duration_seconds": ("histogram", frozenset({"query_type"})),
    "lorekeeper_s3_operations_total": ("counter", frozenset({"operation", "status"})),
}
# What the scrape of Ray's export really carries (tests/unit/test_ingest_events.py scrapes it after a real
# ingest): Ray names our metrics ray_<name>, which the chart's ServiceMonitor renames back to <name>.
RAY_EXPORT_RELABEL = {"sourceLabels": ["__name__"], "regex": "ray_(lorekeeper_.+)", "targetLabel": "__name__"}
# Labels Prometheus adds when it scrapes (target labels of the ServiceMonitor) and the buckets' le.
SCRAPE_LABELS = frozenset({"namespace", "pod", "service", "instance", "job", "container", "endpoint"}) | frozenset(
    {"Component", "NodeAddress", "SessionName", "Version", "WorkerId"}  # Ray's export adds these
)
# What the dashboard must show (the issue's list): each group needs at least one of its metrics.
REQUIRED = {
    "ingest throughput": {"lorekeeper_chunks_created_total", "lorekeeper_embeddings_generated_total"},
    "ingest job states": {"lorekeeper_ingest_jobs_total"},
    "search latency": {"lorekeeper_search_duration_seconds"},
    "rerank latency": {"lorekeeper_rerank_duration_seconds"},
    "narrator time to first token": {"lorekeeper_narrator_time_to_first_token_seconds"},
    "narrator throughput": {"lorekeeper_narrator_output_tokens_total"},
    "narrator outcomes": {"lorekeeper_narrator_requests_total"},
    "gate decisions": {"lorekeeper_gate_decisions_total"},
    "http": {"lorekeeper_http_requests_total", "lorekeeper_http_request_duration_seconds"},
    "mcp": {"lorekeeper_mcp_tool_invocations_total", "lorekeeper_mcp_tool_duration_seconds"},
}
_KINDS = {"Counter": "counter", "Histogram": "histogram", "Gauge": "gauge", "Summary": "summary"}
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


@cache
def code_metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """name → (type, labels) of every prometheus_client metric the code constructs."""
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for package in PACKAGES:
        for path in sorted((deploy.ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if func not in _KINDS or not node.args:
                    continue
                name = node.args[0]
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    continue  # collections.Counter and the like
                labels_node = node.args[2] if len(node.args) > 2 else None
                for keyword in node.keywords:
                    if keyword.arg == "labelnames":
                        labels_node = keyword.value
                labels = frozenset(ast.literal_eval(labels_node)) if labels_node is not None else frozenset()
                found[name.value] = (_KINDS[func], labels)
    return found


@cache
def known_metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """The contract's metrics, with the code's definition winning where there is one."""
    return {**CONTRACT, **code_metrics()}


def series_names() -> dict[str, str]:
    """Every series name a query may use → the metric it belongs to."""
    names = {}
    for metric, (kind, _) in known_metrics().items():
        names[metric] = metric
        for suffix in _SUFFIXES.get(kind, ()):
            names[metric + suffix] = metric
    return names


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["query"]["query"]


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_RANGE = re.compile(r"\[[^\]]*\]")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_LABEL_VALUES = re.compile(r"^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_]\w*)\s*\)$")


def metric_problems(expr: str) -> list[str]:
    """Unknown series, labels a metric does not have, and unbalanced brackets in one query."""
    found = []
    names = series_names()
    label_values = _LABEL_VALUES.match(expr)
    if label_values:
        series, label = label_values.groups()
        if series not in names:
            return [f"unknown metric {series}"]
        labels = known_metrics()[names[series]][1] | SCRAPE_LABELS
        return [] if label in labels else [f"{series} has no label {label}"]
    bare = _RANGE.sub("", _STRING.sub('""', expr))
    for opening, closing in ("()", "{}", "[]"):
        if _STRING.sub('""', expr).count(opening) != _STRING.sub('""', expr).count(closing):
            found.append(f"unbalanced {opening}{closing}")
    used_metrics = []
    for series, matchers in _SELECTOR.findall(bare):
        if series not in names:
            found.append(f"unknown metric {series}")
            continue
        metric = names[series]
        used_metrics.append(metric)
        allowed = known_metrics()[metric][1] | SCRAPE_LABELS
        found += [f"{series} has no label {label}" for label, _ in _MATCHER.findall(matchers) if label not in allowed]
    # a metric name used without a selector (no braces) is still a metric name
    for word in re.findall(r"\blorekeeper_[a-zA-Z0-9_:]*", bare):
        if word not in names:
            found.append(f"unknown metric {word}")
    allowed = SCRAPE_LABELS | {"le"} | {label for metric in used_metrics for label in known_metrics()[metric][1]}
    for grouping in _GROUPING.findall(bare):
        found += [
            f"grouping by unknown label {label}" for label in re.findall(r"\w+", grouping) if label not in allowed
        ]
    return sorted(set(found))


def metrics_of(expr: str) -> set[str]:
    names = series_names()
    return {names[word] for word in re.findall(r"\blorekeeper_[a-zA-Z0-9_:]*", expr) if word in names}


# -- the metric names ------------------------------------------------------------------------------------


def test_the_code_defines_metrics_and_agrees_with_the_contract() -> None:
    defined = code_metrics()
    # the ingest and store metrics are in the code already
    assert {"lorekeeper_ingest_jobs_total", "lorekeeper_chunks_created_total", "lorekeeper_s3_operations_total"} <= set(
        defined
    )
    for name, (kind, labels) in CONTRACT.items():
        if name in defined:
            assert defined[name][0] == kind, f"{name}: the code makes it a {defined[name][0]}, not a {kind}"
            assert labels <= defined[name][1], f"{name}: the code lacks the labels {set(labels - defined[name][1])}"


def test_the_checker_catches_wrong_names_and_labels() -> None:
    assert metric_problems('sum(rate(lorekeeper_http_request_total{namespace="x"}[5m]))') == [
        "unknown metric lorekeeper_http_request_total"
    ]
    assert metric_problems("sum by (model) (rate(lorekeeper_gate_decisions_total{}[5m]))") == [
        "grouping by unknown label model"
    ]
    assert metric_problems('rate(lorekeeper_gate_decisions_total{verdict="accepted"}[5m])') == [
        "lorekeeper_gate_decisions_total has no label verdict"
    ]
    assert metric_problems("rate(lorekeeper_ingest_jobs_total_bucket{}[5m])") == [
        "unknown metric lorekeeper_ingest_jobs_total_bucket"
    ]
    assert metric_problems("sum(rate(lorekeeper_ingest_jobs_total{}[5m])") == ["unbalanced ()"]
    assert metric_problems("label_values(lorekeeper_http_requests_total, namespace)") == []


# -- the dashboard ----------------------------------------------------------------------------------------


def test_every_query_names_a_known_metric_with_its_labels(dashboard: dict[str, Any]) -> None:
    problems = {where: metric_problems(expr) for where, expr in queries(dashboard)}
    assert {where: found for where, found in problems.items() if found} == {}


def test_the_dashboard_shows_what_the_issue_asks_for(dashboard: dict[str, Any]) -> None:
    shown = set().union(*(metrics_of(expr) for _, expr in queries(dashboard)))
    assert {need: metrics for need, metrics in REQUIRED.items() if not metrics & shown} == {}
    # every contract metric is on it
    assert set(CONTRACT) <= shown, set(CONTRACT) - shown


def test_the_dashboard_is_well_formed(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "lorekeeper-overview" and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] == "row":
            continue
        # every query goes to the chosen Prometheus and uses only the dashboard's own variables
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and panel.get("description"), panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval", "__range", "__interval"}
            assert used <= set(variables), (panel["title"], used)
            # every selector keeps to the chosen namespaces
            for _, matchers in _SELECTOR.findall(target["expr"]):
                assert 'namespace=~"$namespace"' in matchers, (panel["title"], target["expr"])


# -- in the chart ---------------------------------------------------------------------------------------


def test_the_chart_ships_the_same_dashboard() -> None:
    assert CHART_DASHBOARD.read_bytes() == DASHBOARD.read_bytes()


@pytest.mark.parametrize("enabled", [False, True])
def test_the_chart_renders_it_as_a_config_map_for_grafanas_sidecar(enabled: bool) -> None:
    values = yaml.safe_load((CHART / "ci" / "external-stores-values.yaml").read_text())
    values["metrics"]["grafanaDashboard"] = {"enabled": enabled, "namespace": "monitoring", "folder": "Lorekeeper"}
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values=values, name="lorekeeper", namespace="lore", is_install=True)
    maps = [
        doc
        for path, text in rendered.items()
        if path.endswith(".yaml")
        for doc in deploy.load_documents(text)
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "lorekeeper-dashboard"
    ]
    if not enabled:
        assert maps == []
        return
    (config_map,) = maps
    assert deploy.problems(config_map) == []
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Lorekeeper"}
    assert json.loads(config_map["data"]["lorekeeper.json"]) == json.loads(DASHBOARD.read_text())


def test_the_chart_scrapes_rays_export_under_the_projects_names() -> None:
    """Every process on Ray exports Lorekeeper's metrics through Ray's agent as ``ray_lorekeeper_*``; the
    ServiceMonitor renames them to the names the dashboard queries, and scrapes the API's own /metrics no
    more (its counts are in the export: scraping both would count each ingress twice)."""
    values = yaml.safe_load((CHART / "ci" / "external-stores-values.yaml").read_text())
    values["metrics"]["serviceMonitor"]["enabled"] = True
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values=values, name="lorekeeper", namespace="lore", is_install=True)
    (monitor,) = [
        doc
        for path, text in rendered.items()
        if path.endswith(".yaml")
        for doc in deploy.load_documents(text)
        if doc["kind"] == "ServiceMonitor"
    ]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    (rule,) = endpoint["metricRelabelings"]
    assert RAY_EXPORT_RELABEL.items() <= rule.items() and rule["replacement"] == "$1"
    assert re.fullmatch(rule["regex"], "ray_lorekeeper_chunks_created_total")
    assert not re.fullmatch(rule["regex"], "ray_serve_num_http_requests_total")
