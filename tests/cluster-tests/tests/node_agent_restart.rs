//! The node agent killed while a pod runs, then started again: the pod must
//! end in a terminal phase, not stay Running forever. Runs alone (see
//! .config/nextest.toml): a restart fails every pod running at that moment.

use std::process::Command;
use std::time::Duration;

use cluster_tests::{TestNamespace, repo_root, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

/// A Pod of the local shell image running `script`, never restarted.
fn shell_pod(name: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": false, "containers": [
            {"name": "main", "image": "local/shell", "command": ["sh", "-c", script]}
        ]},
    }))
    .expect("a Pod")
}

fn phase(pod: Option<&Pod>) -> Option<String> {
    pod.and_then(|p| p.status.as_ref()).and_then(|s| s.phase.clone())
}

#[ignore = "needs the local cluster's node agent; tests/run.sh runs it there"]
#[tokio::test]
async fn a_pod_running_when_the_agent_is_killed_ends_failed_after_the_agent_restarts() {
    let ns = TestNamespace::new("agent-restart").await;
    let pods: Api<Pod> = ns.api();
    pods.create(&PostParams::default(), &shell_pod("long", "sleep 300")).await.unwrap();
    wait_for(
        &pods,
        "long",
        |p: Option<&Pod>| phase(p).as_deref() == Some("Running"),
        Duration::from_secs(60),
    )
    .await;

    let restarted =
        Command::new(repo_root().join("tests/cluster/cluster.sh")).arg("restart-agent").status().unwrap();
    assert!(restarted.success());

    let ended = wait_for(
        &pods,
        "long",
        |p: Option<&Pod>| matches!(phase(p).as_deref(), Some("Failed" | "Succeeded")),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let status = ended.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("NodeAgentRestarted"));
    // Not ready, as a kubelet would say: else Endpoints keep routing to its IP.
    let conditions = status.conditions.unwrap_or_default();
    for type_ in ["Ready", "ContainersReady"] {
        let condition = conditions.iter().find(|c| c.type_ == type_);
        assert_eq!(condition.map(|c| c.status.as_str()), Some("False"), "{type_}: {conditions:?}");
    }
}

#[ignore = "needs the local cluster's node agent; tests/run.sh runs it there"]
#[tokio::test]
async fn restarting_the_agent_back_to_back_never_leaves_it_dead() {
    let ns = TestNamespace::new("agent-restarts").await;
    let cluster = repo_root().join("tests/cluster/cluster.sh");
    for round in 1..=3 {
        let restarted = Command::new(&cluster).arg("restart-agent").output().unwrap();
        assert!(
            restarted.status.success(),
            "restart {round}: {}",
            String::from_utf8_lossy(&restarted.stderr)
        );
        let status = Command::new(&cluster).arg("status").output().unwrap();
        assert!(status.status.success(), "after restart {round} the cluster is not up");
    }
    // And it still runs Pods.
    let pods: Api<Pod> = ns.api();
    pods.create(&PostParams::default(), &shell_pod("after", "exit 0")).await.unwrap();
    wait_for(
        &pods,
        "after",
        |p: Option<&Pod>| phase(p).as_deref() == Some("Succeeded"),
        Duration::from_secs(60),
    )
    .await;
}
