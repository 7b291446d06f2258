"""Draws the chart's Grafana dashboard from a real run, for docs/.

    python3 render.py PROMETHEUS_URL START END OUT.png [NAMESPACE] [CAPTION]

Every panel's own PromQL (charts/mining-operator/dashboards/mining-operator.json,
`$namespace` and `$__rate_interval` filled in as Grafana would) is evaluated by
the Prometheus that scraped the run (`/api/v1/query_range`), and the results
are drawn in the dashboard's own grid. Grafana is not available offline here,
so matplotlib draws the panels; the numbers are Prometheus's.
"""
import json
import re
import sys
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

DASHBOARD = Path(__file__).resolve().parents[3] / "charts/mining-operator/dashboards/mining-operator.json"
# Grafana's $__rate_interval: max(4 × scrape interval, step + scrape interval);
# the run is scraped every 5 s and drawn with a 5 s step.
SCRAPE, STEP = 5, 5
RATE_INTERVAL = f"{max(4 * SCRAPE, STEP + SCRAPE)}s"
UNITS = {"s": "seconds", "reqps": "per second", "short": ""}


def query_range(prometheus: str, expr: str, start: float, end: float) -> list[dict]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": STEP})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}", timeout=30) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise SystemExit(f"{expr}: {body}")
    return body["data"]["result"]


def only_namespace(prometheus: str, start: float, end: float) -> str:
    found = query_range(prometheus, "group by (namespace) (mining_operator_leader)", start, end)
    names = sorted({series["metric"].get("namespace", "") for series in found})
    if len(names) != 1:
        raise SystemExit(f"name the release namespace, one of {names}")
    return names[0]


def legend(template: str, labels: dict) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template or "")


def main() -> None:
    prometheus, start, end, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    namespace = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else only_namespace(prometheus, start, end)
    caption = sys.argv[6] if len(sys.argv) > 6 else "a real run"
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    # Grafana's grid: 24 columns, rows of 30 px; here 0.36 inch a row.
    width, height = 16.0, rows * 0.36 + 0.8
    figure = plt.figure(figsize=(width, height), dpi=80)
    figure.suptitle(caption, fontsize=11, y=1 - 0.25 / height)
    for panel in panels:
        g = panel["gridPos"]
        left, top = g["x"] / 24 * width + 0.7, g["y"] * 0.36 + 0.8 + 0.3
        box_width, box_height = g["w"] / 24 * width - 0.95, g["h"] * 0.36 - 0.75
        axes = figure.add_axes(
            (left / width, 1 - (top + box_height) / height, box_width / width, box_height / height)
        )
        axes.set_title(panel["title"], fontsize=10, loc="left")
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        axes.set_ylabel(UNITS.get(unit, unit), fontsize=8)
        drawn = 0
        for target in panel["targets"]:
            expr = target["expr"].replace("$namespace", namespace).replace("$__rate_interval", RATE_INTERVAL)
            for series in query_range(prometheus, expr, start, end):
                # Steps without a sample stay gaps, as Grafana draws them.
                sampled = {round(float(t)): float(v) for t, v in series["values"]}
                steps = range(round(start), round(end) + 1, STEP)
                times = [datetime.fromtimestamp(t, timezone.utc) for t in steps]
                values = [sampled.get(t, float("nan")) for t in steps]
                axes.plot(times, values, linewidth=1.2, label=legend(target.get("legendFormat"), series["metric"]))
                drawn += 1
        if drawn == 0:
            axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes, color="grey")
        else:
            axes.legend(fontsize=7, loc="upper left", ncol=2 if drawn > 4 else 1, framealpha=0.6)
        axes.set_xlim(datetime.fromtimestamp(start, timezone.utc), datetime.fromtimestamp(end, timezone.utc))
        axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        axes.tick_params(labelsize=7)
        axes.grid(alpha=0.3)
        axes.set_ylim(bottom=0)
    figure.savefig(out)
    print(f"wrote {out}: {len(panels)} panels, namespace {namespace}")


if __name__ == "__main__":
    main()
