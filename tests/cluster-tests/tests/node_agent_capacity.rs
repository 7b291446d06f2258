//! The node agent never runs more Pods than its Node's capacity; the rest
//! stay Pending, unbound. Runs alone (see .config/nextest.toml): Pods of
//! other tests would take slots.

use std::time::Duration;

use cluster_tests::{TestNamespace, eventually, shell_image};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

#[ignore = "needs the local cluster's single node agent; tests/run.sh runs it there"]
#[tokio::test]
async fn pods_beyond_the_nodes_capacity_wait_unbound() {
    let ns = TestNamespace::new("capacity").await;
    let nodes: Api<Node> = Api::all(ns.client.clone());
    let node = nodes.list(&ListParams::default()).await.unwrap().items.remove(0);
    let capacity: usize = node.status.unwrap().capacity.unwrap()["pods"].0.parse().unwrap();

    let extra = 2;
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "crowd"},
        "spec": {
            "parallelism": capacity + extra, "completions": capacity + extra,
            "template": {"spec": {
                "restartPolicy": "Never", "automountServiceAccountToken": false,
                "containers": [{"name": "main", "image": shell_image(), "command": ["sh", "-c", "sleep 300"]}],
            }},
        },
    }))
    .unwrap();
    let jobs: Api<Job> = ns.api();
    jobs.create(&PostParams::default(), &job).await.unwrap();

    let pods: Api<Pod> = ns.api();
    let census = || async {
        let items = pods.list(&ListParams::default().labels("job-name=crowd")).await.unwrap().items;
        let running = items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        let bound =
            items.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count();
        (items.len(), running, bound)
    };
    // Every Pod created and the node full; then none beyond its capacity
    // runs or is bound, also across several of the agent's retry ticks (2 s).
    eventually("the node to fill up", Duration::from_secs(60), || async {
        let (total, running, _) = census().await;
        (total == capacity + extra && running >= capacity).then_some(())
    })
    .await;
    let held_until = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < held_until {
        let (total, running, bound) = census().await;
        assert_eq!(
            (total, running, bound),
            (capacity + extra, capacity, capacity),
            "the extra Pods are not bound"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
