//! Helpers for tests against a real cluster: a client from `$KUBECONFIG`, a
//! fresh labelled namespace per test, and waits with timeouts.

use std::fmt::Debug;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

pub mod bench;
pub mod chains;
pub mod chaos;
pub mod docs;
mod fixtures;
pub mod floor;
pub use fixtures::*;
pub mod helm;
pub mod mcp;
pub mod otlp;
pub mod pod_security;
pub mod reaction;
pub mod registry;
pub mod release;
pub mod s3;
pub mod sse;
pub mod tasks;
pub mod tools;
pub mod webhook;

pub use chains::{assert_chain_verifies, assert_matches_reference, assert_reference_chain, reference_chain};

/// Label on every namespace a test creates, for cleaning up after a crash.
pub const TEST_LABEL: &str = "mining-operator.dev/test";

/// The repository root. Read at run time: test binaries in a shared target
/// dir may have been compiled in another checkout of the same sources.
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")), std::path::PathBuf::from)
        .join("../..")
}

/// `command` as a user's shell would run it: the test runner's variables
/// cleared, only a user's own and the target directory and cluster slot the
/// suite built and started kept. A `cargo` run from a test needs this: the
/// runner's `CARGO_MANIFEST_DIR` reaches the build scripts that watch it
/// (ring's), so cargo would rebuild TLS and everything above it in the
/// shared target directory, and the next user-like build rebuilt it back
/// (minutes each: the README test timed out on it in CI).
pub fn as_a_user(command: &mut std::process::Command) -> &mut std::process::Command {
    command.env_clear();
    for name in [
        "PATH",
        "HOME",
        "USER",
        "LANG",
        "TMPDIR",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        "CARGO_TARGET_DIR",
        "CARGO_INCREMENTAL",
        "MINING_CLUSTER_SLOT",
    ] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
}

/// A client for the cluster in `$KUBECONFIG`. Panics with a hint when there is none.
pub async fn client() -> Client {
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "cluster tests need a cluster: run tests/run.sh, or point KUBECONFIG at one"
    );
    Client::try_default().await.expect("a client for the cluster in KUBECONFIG")
}

/// Whether the cluster is the local one from tests/cluster (whose node agent
/// runs pods as local processes we can inspect, and maps the test-only
/// images). tests/run.sh says so with `MINING_CLUSTER_LOCAL=1`.
pub fn is_local_cluster() -> bool {
    std::env::var("MINING_CLUSTER_LOCAL").is_ok_and(|v| v == "1")
}

/// A namespace of its own for one test, deleted when it is dropped — also
/// when the test panics, after what was in it is printed for the reader.
pub struct TestNamespace {
    pub client: Client,
    pub name: String,
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let kubectl = |args: &[&str]| std::process::Command::new("kubectl").args(args).output();
        if std::thread::panicking()
            && let Ok(dump) =
                kubectl(&["get", "miningworkflows,jobs,pods,events", "-n", &self.name, "-o", "wide"])
        {
            eprintln!(
                "--- namespace {} as the test left it ---\n{}{}",
                self.name,
                String::from_utf8_lossy(&dump.stdout),
                String::from_utf8_lossy(&dump.stderr)
            );
        }
        // Drop cannot await, and may run on a runtime's thread or none: a
        // subprocess works in both. Not waiting: the namespace controller
        // removes what is left.
        let _ = kubectl(&["delete", "namespace", &self.name, "--wait=false", "--ignore-not-found"]);
    }
}

impl TestNamespace {
    /// Creates `{prefix}-{random}` and waits for its default service account
    /// (pods are refused until the controller made it).
    pub async fn new(prefix: &str) -> Self {
        let client = client().await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let mut namespace = Namespace::default();
        namespace.metadata.generate_name = Some(format!("{prefix}-"));
        namespace.metadata.labels = Some([(TEST_LABEL.to_string(), "true".to_string())].into());
        let created = namespaces.create(&PostParams::default(), &namespace).await.expect("create namespace");
        let name = created.metadata.name.expect("generated name");
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        wait_for(&accounts, "default", |sa: Option<&ServiceAccount>| sa.is_some(), Duration::from_secs(60))
            .await;
        Self { client, name }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

/// Waits until `condition` holds for the named object (or its absence) and
/// returns the object; panics with what it last saw after `timeout`.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    condition: impl Condition<K>,
    timeout: Duration,
) -> Option<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    // A watch can end with an error on a busy API server (a closed
    // connection, an expired resource version): watch again until the deadline.
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_error = None;
    loop {
        let matches = |object: Option<&K>| condition.matches_object(object);
        match tokio::time::timeout_at(deadline, await_condition(api.clone(), name, matches)).await {
            Ok(Ok(object)) => return object,
            Ok(Err(err)) => {
                last_error = Some(err.to_string());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => {
                let last = api.get_opt(name).await;
                panic!(
                    "timed out after {timeout:?} waiting for {name}; last watch error: {last_error:?}; last seen: {last:#?}"
                )
            }
        }
    }
}

/// Polls `probe` until it returns `Some`, for conditions that are not one
/// object's state (e.g. "no pods left"). Panics after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates a Pod, retrying while the API server answers "retry": before 1.24
/// its ServiceAccount admission refuses a Pod whose (new) account has no
/// token Secret yet, with `ServerTimeout` and code 500, which no client
/// retries on its own. Panics on any other error, or after `timeout`.
pub async fn create_pod(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    pod: &k8s_openapi::api::core::v1::Pod,
    timeout: Duration,
) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    eventually(&format!("the API server to take Pod {name}"), timeout, || async {
        match pods.create(&PostParams::default(), pod).await {
            Ok(_) => Some(()),
            Err(kube::Error::Api(status)) if status.reason == "ServerTimeout" => None,
            Err(err) => panic!("creating Pod {name}: {err}"),
        }
    })
    .await
}

/// Installs the CRDs from crds/ and waits until each is established.
///
/// Create-or-replace rather than server-side apply: API servers older than
/// 1.25 refuse to apply `x-kubernetes-validations` (unknown to them) but drop
/// it silently on create and replace, which is how the CRD degrades there.
pub async fn install_crd(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in mining_api::crd_files() {
        let text = std::fs::read_to_string(repo_root().join(file.path)).expect("crds/ is readable");
        assert_eq!(text, file.yaml(), "crds/ is stale: run `cargo run -p mining-api --bin crdgen`");
        // The file is byte-for-byte what the type generates, so the object stands for it.
        install_one_crd(&crds, &file.crd).await;
    }
    // The API server serves a resource once its own cache of CRDs has seen
    // the condition, which can lag behind the read above on a busy machine:
    // until then a create would be a 404.
    let workflows: Api<mining_api::MiningWorkflow> = Api::all(client.clone());
    let ledgers: Api<mining_api::MiningLedger> = Api::all(client.clone());
    eventually("MiningWorkflows and MiningLedgers to be served", Duration::from_secs(30), || async {
        workflows.list(&kube::api::ListParams::default().limit(1)).await.ok()?;
        ledgers.list(&kube::api::ListParams::default().limit(1)).await.ok().map(|_| ())
    })
    .await;
}

async fn install_one_crd(
    crds: &Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    let name = crd.metadata.name.clone().expect("CRD name");
    for _ in 0..5 {
        let result = match crds.get_opt(&name).await.expect("read CRD") {
            None => crds.create(&PostParams::default(), crd).await,
            Some(existing) => {
                let mut crd = crd.clone();
                crd.metadata.resource_version = existing.metadata.resource_version;
                crds.replace(&name, &PostParams::default(), &crd).await
            }
        };
        match result {
            Ok(_) => break,
            // Another test installed it at the same moment: read again.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(err) => panic!("installing the CRD: {err}"),
        }
    }
    wait_for(crds, &name, kube::runtime::conditions::is_crd_established(), Duration::from_secs(30)).await;
}

/// The operator binary built by `cargo build --release` (tests/run.sh does).
pub fn operator_binary() -> PathBuf {
    // Test binaries live in <target>/<profile>/deps/, other binaries one level up.
    let exe = std::env::current_exe().expect("this binary's path");
    exe.ancestors()
        .map(|dir| dir.join("release/operator"))
        .find(|candidate| candidate.exists())
        .unwrap_or_else(|| {
            panic!(
                "no release/operator above {}: run `cargo build --release -p mining-operator`",
                exe.display()
            )
        })
}

/// A free loopback port for a process to listen on, checked by binding it.
///
/// Chosen at random below the kernel's ephemeral range (32768 and up), not
/// with `bind(":0")`: a port from that range, once released, can be taken
/// by any outgoing connection (every test talks to the API server) before
/// the child binds it, and the child would then fail to start.
pub fn free_port() -> std::net::SocketAddr {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    for _ in 0..1000 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
        hasher.write_u32(std::process::id());
        let port = 20_000 + (hasher.finish() % 12_000) as u16;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return listener.local_addr().unwrap();
        }
    }
    panic!("no free loopback port in 20000..32000")
}

/// An operator process watching one namespace; SIGKILLed when dropped.
pub struct OperatorProcess {
    // Behind a lock so that `&self` methods can ask whether it still runs.
    child: std::sync::Mutex<std::process::Child>,
    pub http: std::net::SocketAddr,
}

impl OperatorProcess {
    pub fn start(namespace: &str, extra_args: &[&str]) -> Self {
        Self::start_binary(&operator_binary(), namespace, extra_args)
    }

    /// Starts a given operator build (benchmarks compare two side by side).
    pub fn start_binary(binary: &std::path::Path, namespace: &str, extra_args: &[&str]) -> Self {
        Self::start_with_env(binary, namespace, extra_args, &[])
    }

    /// Starts it with extra environment variables.
    pub fn start_with_env(
        binary: &std::path::Path,
        namespace: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let http = free_port();
        let child = std::process::Command::new(binary)
            .args(["--namespace", namespace, "--http-addr", &http.to_string()])
            .args(extra_args)
            // The default image; a --miner-image in extra_args overrides it.
            .env("MINER_IMAGE", "localhost/mining-operator/miner:dev")
            // The key the namespace's test frontends sign with, so MCP
            // callers are parties of their own (an environment variable:
            // older builds a benchmark compares ignore it).
            .env("OWNERSHIP_KEY_FILE", mcp::ownership_key_file(namespace))
            .env("RUST_LOG", std::env::var("OPERATOR_LOG").unwrap_or_else(|_| "info,kube=warn".into()))
            .envs(env.iter().copied())
            .spawn()
            .expect("start the operator");
        Self { child: std::sync::Mutex::new(child), http }
    }

    /// A replica that takes part in leader election for `namespace`, with
    /// its Lease there.
    pub fn start_replica(namespace: &str, identity: &str, lease_seconds: u64, extra_args: &[&str]) -> Self {
        let lease = lease_seconds.to_string();
        let election = [
            "--leader-elect",
            "--leader-election-namespace",
            namespace,
            "--leader-election-identity",
            identity,
            "--leader-election-lease-seconds",
            &lease,
        ];
        Self::start(namespace, &[&election[..], extra_args].concat())
    }

    /// SIGKILL, as a crash or an OOM kill would end it.
    pub fn kill(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Panics with its exit status if the process has ended (e.g. it could
    /// not bind its port), rather than letting a test wait for a dead process.
    pub fn assert_running(&self) {
        let mut child = self.child.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the operator (pid {}) exited: {status}", child.id());
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).id()
    }

    /// Sends a signal (`STOP`, `CONT`, ...) to the process, as `kill -SIG` would.
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.pid());
    }

    /// The value of one series of the operator's /metrics, e.g.
    /// `mining_operator_leader` or `mining_operator_api_calls_total{verb="create",resource="jobs"}`;
    /// 0 when the series is absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, body) = self.get("/metrics").await;
        body.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// GET a path of the operator's HTTP server; retries until it answers.
    pub async fn get(&self, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        eventually(&format!("the operator to answer {path}"), Duration::from_secs(30), || async {
            self.assert_running();
            let mut stream = tokio::net::TcpStream::connect(self.http).await.ok()?;
            let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.ok()?;
            let mut response = String::new();
            stream.read_to_string(&mut response).await.ok()?;
            let code = response.split_whitespace().nth(1)?.parse().ok()?;
            let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
            Some((code, body))
        })
        .await
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An image with `sh` and `sleep`: the local agent maps `local/shell` to
/// /bin/sh; elsewhere (e.g. kind) a real image does the job.
pub fn shell_image() -> String {
    if is_local_cluster() {
        "local/shell".into()
    } else {
        std::env::var("TEST_SHELL_IMAGE").unwrap_or_else(|_| "busybox:1.36".into())
    }
}

/// What a benchmark's watches saw: a Job or a workflow, as applied.
pub enum Seen {
    Job(Box<k8s_openapi::api::batch::v1::Job>),
    Workflow(Box<mining_api::MiningWorkflow>),
}

/// One stream of every Job and workflow change in the namespace, as this
/// process sees them (benchmarks time moments from it).
pub fn jobs_and_workflows(
    ns: &TestNamespace,
) -> futures::stream::BoxStream<'static, Result<Seen, kube::runtime::watcher::Error>> {
    use futures::{StreamExt, TryStreamExt};
    use kube::runtime::{WatchStreamExt, watcher};
    let jobs = watcher(ns.api::<k8s_openapi::api::batch::v1::Job>(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .map_ok(|j| Seen::Job(Box::new(j)));
    let workflows = watcher(ns.api::<mining_api::MiningWorkflow>(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .map_ok(|w| Seen::Workflow(Box::new(w)));
    futures::stream::select(jobs.boxed(), workflows.boxed()).boxed()
}

/// The audience the frontend requires of Kubernetes tokens by default.
pub const TOKEN_AUDIENCE: &str = "mining-operator";

/// A token of ServiceAccount `account` in `namespace` from the TokenRequest
/// API, minted for `audience` (`None`: the API server's own, which the
/// frontend must refuse).
pub async fn account_token(
    client: &Client,
    namespace: &str,
    account: &str,
    audience: Option<&str>,
) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audience.map(|a| vec![a.to_string()]).unwrap_or_default(),
            ..Default::default()
        },
        ..Default::default()
    };
    let issued = accounts.create_token_request(account, &Default::default(), &request).await.unwrap();
    issued.status.expect("a token").token
}

/// `kubectl ARGS` with `input` on its standard input; its output.
pub fn kubectl_with_input(args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// A new ServiceAccount `name` of `ns` and its token for the frontend's audience.
pub async fn service_account_token(ns: &TestNamespace, name: &str) -> String {
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = ns.api();
    let mut account = k8s_openapi::api::core::v1::ServiceAccount::default();
    account.metadata.name = Some(name.into());
    accounts.create(&Default::default(), &account).await.unwrap();
    account_token(&ns.client, &ns.name, name, Some(TOKEN_AUDIENCE)).await
}

/// A process's resident memory (`VmRSS`), in MiB.
pub fn resident_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}
