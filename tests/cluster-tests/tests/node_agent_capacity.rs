//! The node agent never runs more Pods than its Node's capacity; the rest
//! stay Pending, unbound, and a Pod of higher priority goes first, preempting
//! a lower one when the node is full, as kube-scheduler does. Runs alone (see
//! .config/nextest.toml): Pods of other tests would take slots.

use std::time::Duration;

use cluster_tests::{TestNamespace, eventually, shell_image};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn node_capacity(ns: &TestNamespace) -> usize {
    let nodes: Api<Node> = Api::all(ns.client.clone());
    let node = nodes.list(&ListParams::default()).await.unwrap().items.remove(0);
    node.status.unwrap().capacity.unwrap()["pods"].0.parse().unwrap()
}

/// A Job named `crowd` of `count` Pods that sleep, at the default priority.
async fn crowd(ns: &TestNamespace, count: usize) {
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "crowd"},
        "spec": {
            "parallelism": count, "completions": count,
            "template": {"spec": {
                "restartPolicy": "Never", "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": shell_image(), "command": ["sh", "-c", "sleep 300"]}],
            }},
        },
    }))
    .unwrap();
    ns.api::<Job>().create(&PostParams::default(), &job).await.unwrap();
}

fn phase_of(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

#[ignore = "needs the local cluster's single node agent; tests/run.sh runs it there"]
#[tokio::test]
async fn pods_beyond_the_nodes_capacity_wait_unbound() {
    let ns = TestNamespace::new("capacity").await;
    let capacity = node_capacity(&ns).await;
    let extra = 2;
    crowd(&ns, capacity + extra).await;

    let pods: Api<Pod> = ns.api();
    let census = || async {
        let items = pods.list(&ListParams::default().labels("job-name=crowd")).await.unwrap().items;
        let running = items.iter().filter(|p| phase_of(p) == Some("Running")).count();
        let bound =
            items.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count();
        (items.len(), running, bound)
    };
    // Every Pod created and the node full; then none beyond its capacity
    // runs or is bound, also across several of the agent's retry ticks (2 s).
    eventually("the node to fill up", TIMEOUT, || async {
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

#[ignore = "needs the local cluster's single node agent; tests/run.sh runs it there"]
#[tokio::test]
async fn a_higher_priority_pod_runs_first_on_a_full_node_by_preempting_the_youngest_lower_one() {
    let ns = TestNamespace::new("priority").await;
    let capacity = node_capacity(&ns).await;
    // The node full of default-priority Pods, two more waiting before ours.
    crowd(&ns, capacity + 2).await;
    let pods: Api<Pod> = ns.api();
    let crowd_pods =
        || async { pods.list(&ListParams::default().labels("job-name=crowd")).await.unwrap().items };
    eventually("the node to fill up", TIMEOUT, || async {
        let items = crowd_pods().await;
        (items.len() == capacity + 2
            && items.iter().filter(|p| phase_of(p) == Some("Running")).count() == capacity)
            .then_some(())
    })
    .await;
    let mut started: Vec<(String, k8s_openapi::jiff::Timestamp)> = (crowd_pods().await.iter())
        .filter_map(|p| Some((p.metadata.name.clone()?, p.status.as_ref()?.start_time.as_ref()?.0)))
        .collect();
    started.sort_by_key(|(_, at)| *at);

    // A class above the default, as the chart gives the operator and frontend.
    let classes: Api<PriorityClass> = Api::all(ns.client.clone());
    let class_name = format!("{}-high", ns.name);
    let class: PriorityClass =
        serde_json::from_value(json!({"metadata": {"name": class_name}, "value": 1000})).unwrap();
    classes.create(&PostParams::default(), &class).await.unwrap();
    let urgent: Pod = serde_json::from_value(json!({
        "metadata": {"name": "urgent"},
        "spec": {
            "priorityClassName": class_name, "restartPolicy": "Never", "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": shell_image(), "command": ["sh", "-c", "sleep 300"]}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &urgent).await.unwrap();

    // It runs, ahead of the two that waited longer, in the slot of one victim.
    let urgent = eventually("the high-priority Pod to run", TIMEOUT, || async {
        pods.get("urgent").await.ok().filter(|p| phase_of(p) == Some("Running"))
    })
    .await;
    assert_eq!(urgent.spec.unwrap().priority, Some(1000), "the Priority admission plugin resolved the class");
    let items = crowd_pods().await;
    let running: Vec<_> = items
        .iter()
        .filter(|p| phase_of(p) == Some("Running") && p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(running.len(), capacity - 1, "exactly one lower Pod made room");
    let bound_waiting = (items.iter())
        .filter(|p| phase_of(p) == Some("Pending"))
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count();
    assert_eq!(bound_waiting, 0, "no lower Pod was bound while the node is full");
    // The victim was the youngest of the running ones (start times have whole seconds).
    let still: Vec<&str> = running.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
    let victims: Vec<_> = started.iter().filter(|(name, _)| !still.contains(&name.as_str())).collect();
    assert_eq!(victims.len(), 1, "{victims:?}");
    assert!(started.iter().all(|(_, at)| *at <= victims[0].1), "the youngest was preempted: {started:?}");
    classes.delete(&class_name, &DeleteParams::default()).await.unwrap();
}
