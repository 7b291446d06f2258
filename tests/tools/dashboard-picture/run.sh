#!/usr/bin/env bash
# Draws docs/dashboard.png from a real run: a Prometheus scrapes the chart's
# operator and frontend Pods every 5 s while chaos-bench installs the
# chart and mines through it, killing operator Pods, frontend Pods and the node
# agent; then render.py evaluates each dashboard panel's own PromQL on it.
#
#   tests/tools/dashboard-picture/run.sh [WORKFLOWS] [CHAOS_SECONDS] [KILLS_EACH]
#
# Needs the local cluster in $KUBECONFIG (tests/cluster/cluster.sh up) with the
# images built; installs Debian's prometheus and matplotlib (into a cache) if
# missing. Not part of the suite: the picture is a document, not a test.
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=tests/tools/dashboard-picture
log() { printf '[dashboard] %s\n' "$*" >&2; }

export MINING_CLUSTER_LOCAL="${MINING_CLUSTER_LOCAL:-1}"  # chaos-bench restarts its node agent too
: "${KUBECONFIG:?the local cluster: export KUBECONFIG=\$(tests/cluster/cluster.sh kubeconfig)}"
command -v prometheus >/dev/null || { log "apt-get install prometheus"; apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
pydeps="${PLOT_DEPS:-/var/cache/mining-operator/tools/pyplot}"
if ! PYTHONPATH="$pydeps" python3 -c 'import matplotlib' 2>/dev/null; then
  log "pip install matplotlib into $pydeps"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --target "$pydeps" matplotlib
fi

work=$(mktemp -d)
port=19090
# Debian's Prometheus is built without Kubernetes discovery, so a loop does
# what it would: every 2 s the chart's Pods, on the port each serves /metrics
# on (the operator's "http", the frontend's "metrics"), become file_sd targets
# labelled with their namespace and Pod.
discover() {
  while true; do
    kubectl get pods --all-namespaces -l app.kubernetes.io/name=mining-operator -o json 2>/dev/null | python3 -c '
import json, os, sys
wanted = {"operator": "http", "frontend": "metrics"}
targets = []
for pod in json.load(sys.stdin)["items"]:
    # A failed Pod keeps its podIP in its status while the node hands the
    # address to a new Pod: only running ones are what the address serves.
    running = pod.get("status", {}).get("phase") == "Running" and "deletionTimestamp" not in pod["metadata"]
    ip = pod["status"].get("podIP") if running else None
    port_name = wanted.get(pod["metadata"].get("labels", {}).get("app.kubernetes.io/component"))
    for container in pod["spec"]["containers"] if ip and port_name else []:
        for port in container.get("ports", []):
            if port.get("name") == port_name:
                address = ip + ":" + str(port["containerPort"])
                targets.append({"targets": [address],
                                "labels": {"namespace": pod["metadata"]["namespace"], "pod": pod["metadata"]["name"]}})
path = sys.argv[1]
with open(path + ".tmp", "w") as out:
    json.dump(targets, out)
os.replace(path + ".tmp", path)
' "$work/targets.json" || true
    sleep 2
  done
}
echo '[]' >"$work/targets.json"
cat >"$work/prometheus.yml" <<YAML
global: {scrape_interval: 5s, scrape_timeout: 4s, evaluation_interval: 5s}
scrape_configs:
  - job_name: mining-operator
    file_sd_configs: [{files: ["$work/targets.json"], refresh_interval: 5s}]
YAML
discover &
discoverer=$!
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$port" >"$work/prometheus.log" 2>&1 &
prom=$!
trap 'kill $prom $discoverer 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 50); do curl -fsS "127.0.0.1:$port/-/ready" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "127.0.0.1:$port/-/ready" >/dev/null || { cat "$work/prometheus.log" >&2; exit 1; }

start=$(date +%s)
log "chaos-bench ${1:-120} ${2:-60} ${3:-2}, scraped by Prometheus on :$port"
cargo run --quiet --release -p cluster-tests --bin chaos-bench -- "${1:-120}" "${2:-60}" "${3:-2}"
end=$(date +%s)
scraped=$(curl -fsS -G "127.0.0.1:$port/api/v1/query" --data-urlencode "query=count(count_over_time(up[1h]))" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["result"][0]["value"][1])')
log "run over ($((end - start)) s); $scraped Pods were scraped"
caption="mining-operator dashboard, $(date -u -d "@$start" '+%Y-%m-%d %H:%M') UTC: chaos-bench ${1:-120} workflows; operator Pods, frontend Pods and the node agent killed ${3:-2}× each in ${2:-60} s"
PYTHONPATH="$pydeps" python3 "$here/render.py" "http://127.0.0.1:$port" "$start" "$end" docs/dashboard.png "" "$caption"
if [ -n "${KEEP_PROMETHEUS:-}" ]; then
  log "Prometheus stays at http://127.0.0.1:$port (run $start to $end) until interrupted"
  wait "$prom"
fi
