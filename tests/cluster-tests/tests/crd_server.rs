//! crds/ served by Kubernetes 1.36's own CRD code.
//!
//! The local control plane is 1.20: it drops the CRDs' CEL rules
//! (`x-kubernetes-validations`), refuses them under server-side apply, and
//! knows nothing of the formats newer servers warn about. Here the CRD server
//! every kube-apiserver of 1.36 embeds (`k8s.io/apiextensions-apiserver`
//! 0.36.4, built by tests/tools/build-crd-server.sh, which tests/run.sh runs)
//! serves crds/ on its own etcd, its callers authenticated and authorized by
//! the local cluster (as an aggregated server's are), and the test checks what
//! a user's 1.3x cluster does with them: server-side apply without a warning,
//! the CEL rules enforced, the bounds and pruning, the demo's McpTools
//! accepted. What no test here covers (the operator itself against 1.3x, Pod
//! Security, Indexed Jobs) is listed in docs/OPERATIONS.md.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use cluster_tests::{eventually, free_port, repo_root};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Config, Resource};
use mining_api::MiningWorkflow;
use serde_json::json;
use tokio::process::{Child, Command};

const VERSION: &str = "0.36.4";

/// The binary tests/tools/build-crd-server.sh leaves in the cache.
fn crd_server_binary() -> PathBuf {
    let cache = std::env::var("MINING_CLUSTER_CACHE").unwrap_or_else(|_| "/var/cache/mining-operator".into());
    let binary = Path::new(&cache).join(format!("crd-server-{VERSION}/apiextensions-apiserver"));
    assert!(
        binary.exists(),
        "no {}: run tests/tools/build-crd-server.sh (tests/run.sh does) to build Kubernetes {VERSION}'s CRD server",
        binary.display()
    );
    binary
}

/// An etcd and the 1.36 CRD server on it; both killed when dropped.
struct CrdServer {
    _etcd: Child,
    _server: Child,
    dir: PathBuf,
    url: String,
    log: PathBuf,
}

impl Drop for CrdServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- the 1.36 CRD server's log ---\n{}", self.log());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl CrdServer {
    async fn start() -> Self {
        let dir =
            std::env::temp_dir().join(format!("crd-server-{}-{}", std::process::id(), free_port().port()));
        std::fs::create_dir_all(&dir).unwrap();
        let (etcd_port, peer_port, port) = (free_port().port(), free_port().port(), free_port().port());
        let log_file = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
        let etcd = Command::new("etcd")
            .args(["--name", "crd-server", "--data-dir"])
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &format!("http://127.0.0.1:{etcd_port}")])
            .args(["--advertise-client-urls", &format!("http://127.0.0.1:{etcd_port}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer_port}")])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer_port}")])
            .args(["--initial-cluster", &format!("crd-server=http://127.0.0.1:{peer_port}")])
            .stdout(Stdio::null())
            .stderr(log_file("etcd.log"))
            .kill_on_drop(true)
            .spawn()
            .expect("etcd (tests/cluster/build-control-plane.sh installs it)");
        let kubeconfig = std::env::var("KUBECONFIG").expect("the local cluster's KUBECONFIG");
        let server = Command::new(crd_server_binary())
            .args(["--etcd-servers", &format!("http://127.0.0.1:{etcd_port}")])
            .args(["--bind-address", "127.0.0.1", "--secure-port", &port.to_string(), "--cert-dir"])
            .arg(dir.join("certs"))
            // Who calls and what they may do: the local cluster says
            // (TokenReview and SubjectAccessReview), as for any aggregated server.
            .args(["--kubeconfig", &kubeconfig, "--authentication-kubeconfig", &kubeconfig])
            .args(["--authorization-kubeconfig", &kubeconfig])
            // What the 1.20 core cannot serve this server: admission
            // policies (admissionregistration v1 policies, 1.30+) and
            // priority and fairness (flowcontrol v1, 1.29+); their informers
            // would never sync, and every write would wait for them.
            .args(["--disable-admission-plugins", "ValidatingAdmissionPolicy,MutatingAdmissionPolicy"])
            .args(["--enable-priority-and-fairness=false"])
            .stdout(Stdio::null())
            .stderr(log_file("crd-server.log"))
            .kill_on_drop(true)
            .spawn()
            .expect("the CRD server starts");
        let url = format!("https://127.0.0.1:{port}");
        let started = Self { _etcd: etcd, _server: server, log: dir.join("crd-server.log"), dir, url };
        let crds: Api<CustomResourceDefinition> = Api::all(started.client().await);
        eventually("the 1.36 CRD server to list CRDs", Duration::from_secs(90), || async {
            crds.list(&ListParams::default().limit(1)).await.ok().map(|_| ())
        })
        .await;
        started
    }

    /// A client with the local cluster's admin credentials, for this server
    /// (whose serving certificate is its own, made at start).
    async fn client(&self) -> Client {
        let mut config = Config::infer().await.expect("the local cluster's KUBECONFIG");
        config.cluster_url = self.url.parse().unwrap();
        config.root_cert = None;
        config.accept_invalid_certs = true;
        Client::try_from(config).unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Server-side apply of `object` (JSON) at `collection` (a resource's URL
/// path), as `kubectl apply --server-side` makes it; the `Warning` headers
/// of the answer, which kubectl prints. (kubectl itself cannot talk to this
/// server: its discovery asks for the core group, which a CRD server has not.)
async fn apply(server: &CrdServer, collection: &str, object: &serde_json::Value) -> Vec<String> {
    let name = object["metadata"]["name"].as_str().expect("a name");
    let params = PatchParams::apply("crd-test").force();
    let request = kube::core::Request::new(collection).patch(name, &params, &Patch::Apply(object)).unwrap();
    let client = server.client().await;
    let response = client.send(request.map(kube::client::Body::from)).await.expect("the CRD server answers");
    let status = response.status();
    let warnings: Vec<String> = (response.headers().get_all("warning").iter())
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .collect();
    let body = response.into_body().collect_bytes().await.unwrap_or_default();
    assert!(
        status.is_success(),
        "applying {name} at {collection}: {status} {}\n{}",
        String::from_utf8_lossy(&body),
        server.log()
    );
    warnings
}

/// A CRD file of crds/ as JSON.
fn crd_json(yaml: &str) -> serde_json::Value {
    serde_yaml::from_str(yaml).expect("a CRD file parses")
}

#[tokio::test]
#[ignore = "needs the local cluster (its credentials) and the 1.36 CRD server tests/run.sh builds"]
async fn kubernetes_1_36_serves_the_crds_without_warnings_and_enforces_their_rules() {
    let server = CrdServer::start().await;
    let root = repo_root();
    let crd_files: Vec<PathBuf> = mining_api::crd_files().iter().map(|file| root.join(file.path)).collect();
    assert_eq!(crd_files.len(), 4, "every kind's CRD");
    // Server-side apply (1.20 refuses it for CEL rules) and no warning: a
    // format 1.34+ does not know (`uint32` was one) is warned about per
    // field, on every install and upgrade.
    let crd_collection = CustomResourceDefinition::url_path(&(), None);
    for file in &crd_files {
        let warnings =
            apply(&server, &crd_collection, &crd_json(&std::fs::read_to_string(file).unwrap())).await;
        assert!(warnings.is_empty(), "{}: {warnings:#?}", file.display());
    }
    // The check can fail: the same CRD with a format 1.36 does not know.
    let with_int32 =
        crd_files.iter().find(|file| std::fs::read_to_string(file).unwrap().contains("format: int32"));
    let original = std::fs::read_to_string(with_int32.expect("a CRD declares an int32")).unwrap();
    let changed = crd_json(&original.replacen("format: int32", "format: uint32", 1));
    let warnings = apply(&server, &crd_collection, &changed).await;
    assert!(
        warnings.iter().any(|w| w.contains("uint32")),
        "1.36 warns about an unknown format: {warnings:#?}"
    );
    apply(&server, &crd_collection, &crd_json(&original)).await;

    let client = server.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in mining_api::crd_files() {
        let name = file.crd.metadata.name.clone().unwrap();
        cluster_tests::wait_for(
            &crds,
            &name,
            kube::runtime::conditions::is_crd_established(),
            Duration::from_secs(60),
        )
        .await;
    }
    let workflows: Api<MiningWorkflow> = Api::namespaced(client.clone(), "default");
    let body: MiningWorkflow = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
        "metadata": {"name": "rules"}, "spec": {"difficulty": 8, "blocks": 2},
    }))
    .unwrap();
    let created = eventually("MiningWorkflows to be served", Duration::from_secs(60), || async {
        workflows.create(&PostParams::default(), &body).await.ok()
    })
    .await;
    assert_eq!(created.spec.blocks, 2);

    // The CEL rules hold (1.20 drops them: there the operator's own check is all).
    for (field, value, message) in
        [("difficulty", json!(9), "difficulty is immutable"), ("blocks", json!(3), "blocks is immutable")]
    {
        let patch = Patch::Merge(json!({"spec": {field: value}}));
        let err = workflows.patch("rules", &PatchParams::default(), &patch).await.expect_err(field);
        let kube::Error::Api(status) = err else { panic!("{field}: not an API error: {err}") };
        assert_eq!(status.code, 422, "{field}: {status:?}");
        assert!(status.message.contains(message), "{field}: {}", status.message);
    }
    // Bounds, and an unknown field pruned (a structural schema).
    for (spec, field) in [
        (json!({"difficulty": 0}), "spec.difficulty"),
        (json!({"difficulty": 8, "blocks": 65}), "spec.blocks"),
    ] {
        let mut bad = body.clone();
        bad.metadata.name = Some("out-of-range".into());
        bad.spec = serde_json::from_value(spec.clone()).unwrap();
        let err = workflows.create(&PostParams::default(), &bad).await.expect_err("out of range");
        let kube::Error::Api(status) = err else { panic!("{spec}: not an API error: {err}") };
        assert_eq!(status.code, 422, "{spec}");
        assert!(status.message.contains(field), "{spec}: {}", status.message);
    }
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::erase::<MiningWorkflow>(&()),
    );
    let pruned = raw
        .patch("rules", &PatchParams::default(), &Patch::Merge(json!({"spec": {"notAField": 1}})))
        .await
        .expect("an unknown field is pruned, not refused");
    assert!(pruned.data["spec"].get("notAField").is_none(), "{:?}", pruned.data);

    // The demo's McpTools, server-side applied as a user would.
    let tool_collection = mining_api::McpTool::url_path(&(), Some("default"));
    for file in ["demo/sum-numbers.yaml", "demo/deploy-gate.yaml"] {
        let tools = mcp_tools_of(&root.join(file));
        assert!(!tools.is_empty(), "{file} defines an McpTool");
        for tool in &tools {
            let warnings = apply(&server, &tool_collection, tool).await;
            assert!(warnings.is_empty(), "{file}: {warnings:#?}");
        }
    }
}

/// The McpTool documents of a multi-document YAML file, as JSON, in `default`.
fn mcp_tools_of(file: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(file).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|document| <serde_json::Value as serde::Deserialize>::deserialize(document).ok())
        .filter(|value| value["kind"] == "McpTool")
        .map(|mut value| {
            value["metadata"]["namespace"] = "default".into();
            value
        })
        .collect()
}
