//! A release as a platform team installs it: `make release` into a private
//! registry (the local cluster's: TLS with its own CA, htpasswd, no
//! anonymous pulls), `helm install oci://…` from there with
//! `imagePullSecrets`, and every image the install runs — the operator, the
//! frontend, the miner Jobs, a tool's Job — pulled by the node from that
//! registry with the pull secret. Without the secret the node is refused
//! and says so, to the installer (the Pods' waiting reasons) and to an MCP
//! caller (a tool whose Job names no secret). Needs the local cluster's
//! registry and node agent.

use std::process::Command;
use std::time::Duration;

use cluster_tests::mcp::structured;
use cluster_tests::registry::Registry;
use cluster_tests::release::Release;
use cluster_tests::{as_a_user, assert_reference_chain, eventually, repo_root};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

/// Every image `make release` pushes (the Makefile's IMAGES).
const IMAGES: [&str; 7] =
    ["miner", "operator", "mcp-frontend", "sum-numbers", "deploy-gate", "report", "mcp-fixtures"];
const TIMEOUT: Duration = Duration::from_secs(180);

#[ignore = "needs the local cluster's registry and node agent; tests/run.sh runs it there"]
#[tokio::test]
async fn a_release_in_a_private_registry_installs_with_its_pull_secret_and_runs_only_its_images() {
    let registry = Registry::local();
    let target = format!("{}/{}", registry.host, Registry::unique_path("release"));
    let version = env!("CARGO_PKG_VERSION");
    let helm = cluster_tests::helm::helm();
    let ca = registry.ca_file().display().to_string();

    // `make release` as docs/RELEASING.md says, the registry's CA and login
    // passed to the pushes; run as a user runs it (the images' build is the
    // one tests/run.sh made, not redone under the test runner's variables).
    let released = as_a_user(&mut Command::new("make"))
        .current_dir(repo_root())
        .args(["--no-print-directory", "release", "BINARIES=prebuilt", "ENGINE=podman"])
        .arg(format!("REGISTRY={target}"))
        .arg(format!("HELM={helm}"))
        .arg(format!(
            "PUSH_ARGS=--cert-dir {} --creds {}:{}",
            registry.trust.display(),
            registry.user,
            registry.password
        ))
        .arg(format!(
            "HELM_PUSH_ARGS=--ca-file {ca} --username {} --password {}",
            registry.user, registry.password
        ))
        .output()
        .expect("run make release");
    let said =
        format!("{}{}", String::from_utf8_lossy(&released.stdout), String::from_utf8_lossy(&released.stderr));
    assert!(released.status.success(), "make release:\n{said}");
    let chart = format!("oci://{target}/charts/mining-operator");
    assert!(said.contains(&format!("helm install mining {chart} --version {version}")), "{said}");
    // The machine that built the release is not the node: without the
    // build's own tags the node has none of these images and must pull each.
    for image in IMAGES {
        let reference = format!("{target}/mining-operator/{image}:{version}");
        let untagged = Command::new("podman").args(["rmi", &reference]).output().expect("run podman rmi");
        assert!(untagged.status.success(), "{}", String::from_utf8_lossy(&untagged.stderr));
        assert!(!Registry::node_holds(&reference), "{reference} is still in the node's store");
    }

    // Installed from the registry before its pull secret exists: the node
    // is refused and the Pods wait with a kubelet's reasons.
    let release = Release::prepare("regrel").await;
    let pull = [
        "--version",
        version,
        "--ca-file",
        &ca,
        "--username",
        &registry.user,
        "--password",
        &registry.password,
        "--set",
        "imagePullSecrets[0].name=regcred",
    ];
    release.install_chart(&chart, &pull, false);
    let pods: Api<Pod> = release.ns.api();
    let refusal = eventually("the components' Pods to wait on the registry's refusal", TIMEOUT, || async {
        let listed = pods.list(&ListParams::default()).await.ok()?.items;
        listed.iter().flat_map(waiting).find(|(reason, message)| {
            matches!(reason.as_str(), "ErrImagePull" | "ImagePullBackOff")
                && (message.contains("authentication required") || message.contains("Back-off"))
        })
    })
    .await;
    assert!(refusal.1.contains(&target) || refusal.0 == "ImagePullBackOff", "{refusal:?}");

    // The platform team adds the Secret to both namespaces: the same install
    // comes up, nothing reinstalled.
    registry.create_pull_secret(&release.ns.name, "regcred");
    registry.create_pull_secret(&release.work.name, "regcred");
    release.rolled_out().await;

    // A chain mined through the Service: the miner Jobs pull with the secret.
    let token = release.user_token("agent").await;
    let outcome = release.mine(&token, json!({"difficulty": 8, "blocks": 2, "wait_seconds": 20})).await;
    assert_reference_chain(&outcome, 2, 8);

    // A tool whose image is the release's, its Job naming the pull secret.
    let tool_image = format!("{target}/mining-operator/sum-numbers:{version}");
    define(&release, "sum", &tool_image, true).await;
    let id = called(&release, &token, "sum").await;
    let done = release.settle_tool_run(&token, &id).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(done["result"]["sum"], 3.0, "{done:#}");

    // Every Pod of the install ran an image of the release, which the node
    // pulled (it held none before).
    for namespace in [&release.ns, &release.work] {
        for pod in namespace.api::<Pod>().list(&ListParams::default()).await.unwrap().items {
            for container in pod.spec.unwrap().containers {
                let image = container.image.unwrap_or_default();
                assert!(image.starts_with(&format!("{target}/mining-operator/")), "{image}");
            }
        }
    }
    for image in ["operator", "mcp-frontend", "miner", "sum-numbers"] {
        let reference = format!("{target}/mining-operator/{image}:{version}");
        assert!(Registry::node_holds(&reference), "the node pulled {reference}");
    }

    // A tool whose Job names no pull secret, its image never pulled here:
    // its caller reads the registry's refusal, and the run waits, not hangs.
    let unpulled = registry.push(cluster_tests::tools::IMAGE, &Registry::unique_path("unpulled"));
    define(&release, "unpulled", &unpulled, false).await;
    let id = called(&release, &token, "unpulled").await;
    let answer = eventually("the caller to read the pull refusal", Duration::from_secs(60), || async {
        let answer = release.call(&token, "get_tool_result", json!({"workflow_id": id})).await.to_string();
        answer.contains("waiting for its image to be pulled").then_some(answer)
    })
    .await;
    assert!(answer.contains(&registry.host), "{answer}");

    release.helm_in_namespace(&["uninstall", &release.name, "--wait", "--timeout", "120s"]);
}

/// Each container's (waiting reason, message) of a Pod.
fn waiting(pod: &Pod) -> Vec<(String, String)> {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
    statuses
        .into_iter()
        .filter_map(|s| s.state?.waiting)
        .map(|w| (w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
        .collect()
}

/// Defines the example `sum-numbers` tool as `name`, running `image`, its
/// Job naming the pull secret `regcred` when `with_secret`.
async fn define(release: &Release, name: &str, image: &str, with_secret: bool) {
    let mut pod = json!({"restartPolicy": "Never", "containers": [{"name": "tool", "image": image}]});
    if with_secret {
        pod["imagePullSecrets"] = json!([{"name": "regcred"}]);
    }
    let mut defined = cluster_tests::tools::tool(name, 0, json!({}));
    *defined.spec.job_template.spec.as_mut().unwrap().template.spec.as_mut().unwrap() =
        serde_json::from_value(pod).unwrap();
    release.work.api::<mining_api::McpTool>().create(&Default::default(), &defined).await.unwrap();
}

/// Calls `tool` with [1, 2] once the frontend offers it; the run's id.
async fn called(release: &Release, token: &str, tool: &str) -> String {
    let started: Value =
        eventually(&format!("the {tool} tool to be offered"), Duration::from_secs(60), || async {
            let called = release.call(token, tool, json!({"numbers": [1, 2]})).await;
            called["result"]["structuredContent"]["workflow_id"].is_string().then_some(called)
        })
        .await;
    structured(&started)["workflow_id"].as_str().unwrap().to_string()
}
