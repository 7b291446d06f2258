#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, without Docker:
# etcd + kube-apiserver + kube-controller-manager (Job, GC, TTL, namespace, ResourceQuota,
# service-account, Deployment, Endpoints, ClusterRole aggregation controllers) + a private image
# registry (TLS, htpasswd; 127.0.0.1:15443+slot) + our node agent as the kubelet (Pod IPs added to
# lo from 10.244.0.0/16, httpGet probes, image pulls from that registry with Pods' pull secrets).
#
#   cluster.sh up          start everything with fresh state (no-op when already up)
#   cluster.sh down        stop exactly what `up` started, by pid, and remove its state
#   cluster.sh kubeconfig  print the kubeconfig path
#   cluster.sh status      say whether it is up, or which component is not running
#   cluster.sh restart-agent  SIGKILL the node agent and start it again (for tests)
#
# Pods run the images in podman's store (`make images BINARIES=prebuilt`),
# or pulled into it from the cluster's registry; only the test doubles
# (fake miners, a shell, the helm test's curl) are host programs mapped to
# image names.
#
# Several clusters can run on one machine side by side: MINING_CLUSTER_SLOT
# (0-9, default 0; tests/run.sh uses 1, `make demo` 0) picks each one's state
# directory, ports, Pod CIDR 10.(244+slot).0.0/16 and Service CIDR
# 10.(96+slot).0.0/16, and `down` removes only its own addresses.
# Environment: MINING_CLUSTER_CACHE (binaries, default /var/cache/mining-operator),
# MINING_CLUSTER_STATE (runtime state, default /tmp/mining-operator-cluster,
# with -SLOT for slots above 0), MINING_CLUSTER_API_PORT (16443+slot),
# MINING_CLUSTER_ETCD_PORT (23790+20*slot).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE="${MINING_CLUSTER_CACHE:-/var/cache/mining-operator}"
SLOT="${MINING_CLUSTER_SLOT:-0}"
case "$SLOT" in [0-9]) ;; *) echo "MINING_CLUSTER_SLOT must be 0-9, not $SLOT" >&2; exit 2 ;; esac
if [ "$SLOT" = 0 ]; then DEFAULT_STATE=/tmp/mining-operator-cluster; else DEFAULT_STATE=/tmp/mining-operator-cluster-$SLOT; fi
STATE="${MINING_CLUSTER_STATE:-$DEFAULT_STATE}"
BIN="$CACHE/bin"
API_PORT="${MINING_CLUSTER_API_PORT:-$((16443 + SLOT))}"
ETCD_PORT="${MINING_CLUSTER_ETCD_PORT:-$((23790 + 20 * SLOT))}"
KUBELET_PORT=$((10250 + SLOT))
POD_PREFIX="10.$((244 + SLOT))"
SERVICE_PREFIX="10.$((96 + SLOT))"
ETCD_PEER_PORT=$((ETCD_PORT + 10))
KUBECONFIG_PATH="$STATE/kubeconfig"
NODE_NAME="${MINING_CLUSTER_NODE:-local-node}"
# A private registry (Debian's docker-registry, the CNCF Distribution
# registry): TLS with a certificate of its own, htpasswd authentication, no
# anonymous pulls. The node agent pulls from it with Pods' pull secrets
# (tests/node-agent/src/pull.rs); tests push to it with the credentials in
# $STATE/registry/credentials (tests/cluster-tests/src/registry.rs).
REGISTRY_PORT=$((15443 + SLOT))
REGISTRY_HOST="127.0.0.1:$REGISTRY_PORT"
# Components in start order; `down` stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager registry node-agent)

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

pid_alive() { [ -f "$STATE/$1.pid" ] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }

api_answers() {
  [ -f "$KUBECONFIG_PATH" ] && kubectl --kubeconfig "$KUBECONFIG_PATH" get --raw /readyz --request-timeout=3s >/dev/null 2>&1
}

is_up() {
  for c in "${COMPONENTS[@]}"; do pid_alive "$c" || return 1; done
  api_answers
}

# wait_for DESCRIPTION SECONDS COMMAND...: polls the command until it succeeds.
wait_for() {
  local what=$1 seconds=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      log "timed out after ${seconds}s waiting for $what; last log lines:"
      tail -n 20 "$STATE"/logs/*.log >&2 || true
      return 1
    fi
    sleep 0.5
  done
}

start() { # start NAME COMMAND...: runs in its own session, logs to logs/NAME.log
  local name=$1; shift
  setsid "$@" >"$STATE/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$STATE/$name.pid"
  log "started $name (pid $!)"
}

target_dir() {
  (cd "$ROOT" && cargo metadata --format-version 1 --no-deps 2>/dev/null) \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])'
}

stop_pid() { # stop_pid PID: TERM, then KILL after 10 s
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

start_agent() { # start_agent RELEASE_DIR (where node-agent and the components' binaries are)
  echo "$1" >"$STATE/node-agent.args"
  # The chart's images come from podman's store; its `helm test` image runs
  # the host's curl.
  start node-agent env KUBECONFIG="$KUBECONFIG_PATH" RUST_LOG="${NODE_AGENT_LOG:-info}" "$1/node-agent" \
    --node-name "$NODE_NAME" --state-dir "$STATE/agent" --pod-cidr "$POD_PREFIX.0.0/16" \
    --kubelet-port "$KUBELET_PORT" --kubelet-certificate "$STATE/kubelet.crt" --kubelet-key "$STATE/kubelet.key" \
    --api-server "https://127.0.0.1:$API_PORT" --api-server-ca "$STATE/certs/apiserver.crt" \
    --image "curlimages/curl=$(command -v curl || echo /usr/bin/curl)" \
    --image "local/shell=/bin/sh" \
    --image "local/forger=$HERE/fake-miners/forge-result.sh" --image "local/failing-miner=$HERE/fake-miners/fail.sh" \
    --image "local/oversize-nonce=$HERE/fake-miners/oversize-nonce.sh" --image "local/non-minimal=$HERE/fake-miners/non-minimal.sh" \
    --image "local/patient=$HERE/fake-miners/patient.sh" \
    --registry-certs "$STATE/certs.d"
}

registry_answers() { # 401: up, and refusing anonymous clients
  [ "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$STATE/registry/trust/ca.crt" "https://$REGISTRY_HOST/v2/")" = 401 ]
}

start_registry() {
  local dir="$STATE/registry" password
  mkdir -p "$dir"/{data,tls,trust} "$STATE/certs.d/$REGISTRY_HOST"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/tls/registry.key" -out "$dir/tls/registry.crt" \
    -days 30 -subj "/CN=$REGISTRY_HOST" -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
  # Who trusts it: pushers (podman --cert-dir, helm --ca-file) and the node.
  cp "$dir/tls/registry.crt" "$dir/trust/ca.crt"
  cp "$dir/tls/registry.crt" "$STATE/certs.d/$REGISTRY_HOST/ca.crt"
  password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  htpasswd -Bbn puller "$password" >"$dir/htpasswd" 2>/dev/null
  (umask 077 && printf 'puller:%s\n' "$password" >"$dir/credentials")
  echo "$REGISTRY_HOST" >"$dir/host"
  cat >"$dir/config.yml" <<CONFIG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: $REGISTRY_HOST
  tls:
    certificate: $dir/tls/registry.crt
    key: $dir/tls/registry.key
auth:
  htpasswd:
    realm: mining-operator-test-registry
    path: $dir/htpasswd
CONFIG
  start registry docker-registry serve "$dir/config.yml"
  wait_for "the registry at $REGISTRY_HOST" 30 registry_answers || die "the registry did not start"
}

# Kills the node agent with SIGKILL (its pods' processes live on, as containers
# outlive a crashed kubelet) and starts it again.
# The old process is gone (its ports with it) before the new one starts, and
# a new one that dies at once (a port still held, say) is started again, up to
# three times, or the restart fails saying so.
cmd_restart_agent() {
  pid_alive node-agent || die "the node agent is not running"
  local old; old=$(cat "$STATE/node-agent.pid")
  kill -KILL "$old"
  wait_for "the killed node agent to exit" 10 exited "$old" || die "the killed node agent (pid $old) did not exit"
  # A killed process's leader turns zombie while its other threads may still
  # be exiting with the listening socket open: wait for the port itself.
  wait_for "the killed node agent's kubelet port to close" 10 kubelet_port_closed \
    || die "port $KUBELET_PORT is still taken after the node agent (pid $old) was killed"
  log "killed node-agent"
  local release attempt; release=$(cat "$STATE/node-agent.args")
  mv "$STATE/logs/node-agent.log" "$STATE/logs/node-agent.previous.log"
  for attempt in 1 2 3; do
    start_agent "$release"
    if wait_for "the node agent's kubelet port" 15 agent_serving; then return 0; fi
    log "the node agent did not come up (attempt $attempt); its log:"
    tail -n 5 "$STATE/logs/node-agent.log" >&2 || true
    stop_pid "$(cat "$STATE/node-agent.pid")"
  done
  die "the node agent did not come up after 3 attempts"
}

# exited PID: the process is gone, or a zombie.
exited() { [ ! -d "/proc/$1" ] || grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# kubelet_port_closed: nothing accepts connections on the agent's kubelet port.
kubelet_port_closed() { ! (exec 3<>"/dev/tcp/127.0.0.1/$KUBELET_PORT") 2>/dev/null; }

# agent_serving: the node agent runs and its kubelet endpoint accepts connections.
agent_serving() { pid_alive node-agent && (exec 3<>"/dev/tcp/127.0.0.1/$KUBELET_PORT") 2>/dev/null; }

# Up, or down naming each component that is not running (and a silent API server).
cmd_status() {
  local c dead=()
  for c in "${COMPONENTS[@]}"; do
    if ! pid_alive "$c"; then dead+=("$c"); fi
  done
  if [ ${#dead[@]} -eq 0 ] && api_answers; then echo up; return 0; fi
  if [ ${#dead[@]} -gt 0 ]; then echo "down: not running: ${dead[*]}"; else echo "down: the API server does not answer"; fi
  return 1
}

cmd_down() {
  [ -d "$STATE" ] || { log "nothing to stop"; return 0; }
  local i c
  for ((i=${#COMPONENTS[@]}-1; i>=0; i--)); do
    c=${COMPONENTS[$i]}
    if [ -f "$STATE/$c.pid" ]; then stop_pid "$(cat "$STATE/$c.pid")"; log "stopped $c"; fi
  done
  # The demo's forwarder to the frontend Service.
  if [ -f "$STATE/forward.pid" ]; then stop_pid "$(cat "$STATE/forward.pid")"; log "stopped the forwarder"; fi
  # Pod processes run in their own process groups (as containers outlive a
  # kubelet restart); the agent records each one's group id.
  local pgid
  for f in "$STATE"/agent/pods/*/*.pgid; do
    [ -f "$f" ] || continue
    pgid=$(cat "$f")
    kill -KILL -- "-$pgid" 2>/dev/null || true
  done
  # This cluster's Pod IPs and ClusterIPs the agent added to lo; another
  # slot's stay.
  local address
  for address in $(ip -4 -o addr show dev lo 2>/dev/null \
      | awk -v pods="$POD_PREFIX." -v services="$SERVICE_PREFIX." \
        'index($4, pods) == 1 || index($4, services) == 1 {print $4}'); do
    ip -4 addr del "$address" dev lo 2>/dev/null || true
  done
  # The tags of images the node pulled from this cluster's registry (their
  # layers stay when another tag, a local build's, shares them).
  if command -v podman >/dev/null; then
    podman images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep -F "$REGISTRY_HOST/" \
      | xargs -r podman rmi >/dev/null 2>&1 || true
  fi
  rm -rf "$STATE"
  log "removed $STATE"
}

cmd_up() {
  if is_up; then log "already up; KUBECONFIG=$KUBECONFIG_PATH"; return 0; fi
  cmd_down
  "$HERE/build-control-plane.sh"
  for tool in etcd openssl kubectl python3; do command -v "$tool" >/dev/null || die "$tool is missing"; done

  command -v podman >/dev/null || { log "installing podman (the node agent runs Pods from its image store)"; \
    apt-get install -y -qq podman >/dev/null; }
  command -v docker-registry >/dev/null && command -v htpasswd >/dev/null \
    || { log "installing docker-registry and apache2-utils (the cluster's private registry)"; \
      apt-get install -y -qq docker-registry apache2-utils >/dev/null; }
  local target
  target=$(target_dir)
  if [ ! -x "$target/release/node-agent" ]; then
    log "building the node agent (release)"
    (cd "$ROOT" && cargo build --release -p node-agent)
  fi

  mkdir -p "$STATE"/{etcd,certs,logs,agent}
  chmod 700 "$STATE"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$STATE/sa.key" -out "$STATE/sa.crt" \
    -days 30 -subj /CN=service-accounts 2>/dev/null
  # The node agent's kubelet endpoint (`kubectl logs`).
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$STATE/kubelet.key" -out "$STATE/kubelet.crt" \
    -days 30 -subj "/CN=$NODE_NAME" -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
  local token
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  echo "$token,admin,1,system:masters" >"$STATE/tokens.csv"

  start etcd etcd --name local --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT"

  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --cert-dir "$STATE/certs" --token-auth-file "$STATE/tokens.csv" --authorization-mode RBAC \
    --service-account-key-file "$STATE/sa.crt" --service-account-signing-key-file "$STATE/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range "$SERVICE_PREFIX.0.0/16" \
    --kubelet-preferred-address-types InternalIP

  # The apiserver writes its self-signed serving certificate (valid for
  # 127.0.0.1) at start; the kubeconfig trusts exactly that certificate.
  wait_for "the apiserver's serving certificate" 60 test -s "$STATE/certs/apiserver.crt"
  cat >"$KUBECONFIG_PATH" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $STATE/certs/apiserver.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: local
  context: {cluster: local, user: admin, namespace: default}
current-context: local
KCFG
  chmod 600 "$KUBECONFIG_PATH"
  wait_for "the API server to answer /readyz" 120 kubectl --kubeconfig "$KUBECONFIG_PATH" get --raw /readyz

  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$KUBECONFIG_PATH" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 --port 0 \
    --controllers job,garbagecollector,namespace,ttl-after-finished,serviceaccount,serviceaccount-token,deployment,replicaset,endpoint,disruption,resourcequota,clusterrole-aggregation \
    --service-account-private-key-file "$STATE/sa.key" --root-ca-file "$STATE/sa.crt" \
    --use-service-account-credentials=false --kube-api-qps 200 --kube-api-burst 400

  start_registry
  start_agent "$target/release"

  wait_for "node $NODE_NAME to be Ready" 60 \
    kubectl --kubeconfig "$KUBECONFIG_PATH" wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
  wait_for "the default service account" 60 \
    kubectl --kubeconfig "$KUBECONFIG_PATH" get serviceaccount default -n default
  log "up: export KUBECONFIG=$KUBECONFIG_PATH"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  kubeconfig) echo "$KUBECONFIG_PATH" ;;
  state) echo "$STATE" ;;
  restart-agent) cmd_restart_agent ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|kubeconfig|state|status|restart-agent" >&2; exit 2 ;;
esac
