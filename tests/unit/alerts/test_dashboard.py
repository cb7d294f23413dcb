"""The three-layer Grafana dashboard (deploy/grafana): built from one source with Grafana's own
builder library, its queries valid PromQL for the real promtool."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import yaml

from tests.scripts import load_script
from tests.skips import needs_package

GRAFANA = Path(__file__).parents[3] / "deploy" / "grafana"


def source() -> ModuleType:
    return load_script("deploy/grafana/dashboard.py")


def test_the_shipped_dashboard_is_the_generated_one() -> None:
    shipped = json.loads((GRAFANA / "inferchaos-dashboard.json").read_text())
    assert shipped == source().build(), (
        "deploy/grafana/inferchaos-dashboard.json is stale: run "
        ".venv/bin/python deploy/grafana/dashboard.py > deploy/grafana/inferchaos-dashboard.json"
    )


def test_one_row_per_layer_linked_by_replica_and_node_with_the_alerts_annotated() -> None:
    board = source().build()
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["vLLM", "Ray", "Kubernetes and the device"]
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "replica", "node"]
    (alerts,) = board["annotations"]["list"]
    assert alerts["expr"].startswith("ALERTS{") and 'alertstate="firing"' in alerts["expr"]
    panels = [p for p in board["panels"] if p["type"] != "row"]
    vllm = panels[: next(i for i, p in enumerate(panels) if p["title"] == "Ray nodes alive")]
    assert vllm and all('pod=~"$replica"' in p["targets"][0]["expr"] for p in vllm)


@needs_package("prometheus", shutil.which("promtool"), "the distribution's prometheus (promtool)")
def test_every_query_is_promql_the_real_promtool_accepts(tmp_path: Path) -> None:
    board = source().build()
    exprs = [p["targets"][0]["expr"] for p in board["panels"] if p["type"] != "row"]
    exprs.append(board["annotations"]["list"][0]["expr"])
    # Grafana fills in its variables before Prometheus sees a query.
    filled = [
        e.replace("$__rate_interval", "1m").replace("$replica", ".*").replace("$node", ".*") for e in exprs
    ]
    rules = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": f"q:{i}", "expr": e} for i, e in enumerate(filled)]}
        ]
    }
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump(rules))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
