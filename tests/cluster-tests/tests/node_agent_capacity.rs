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
    // Each unbound one says why, in kube-scheduler's words (what the
    // operator reads as "waiting for room on the cluster's nodes").
    eventually("the unbound Pods to say the node is full", TIMEOUT, || async {
        let items = pods.list(&ListParams::default().labels("job-name=crowd")).await.unwrap().items;
        let unbound = items.iter().filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_none()));
        let told = unbound
            .filter(|p| {
                let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
                conditions.into_iter().flatten().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                        && c.message.as_deref().is_some_and(|m| m.contains("Too many pods"))
                })
            })
            .count();
        (told == extra).then_some(())
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

    // Classes above the default: one that waits its turn (as the chart gives
    // the operator and frontend), one that preempts.
    let classes: Api<PriorityClass> = Api::all(ns.client.clone());
    let (patient_class, urgent_class) = (format!("{}-patient", ns.name), format!("{}-urgent", ns.name));
    for (name, policy) in [(&patient_class, "Never"), (&urgent_class, "PreemptLowerPriority")] {
        let class: PriorityClass = serde_json::from_value(
            json!({"metadata": {"name": name}, "value": 1000, "preemptionPolicy": policy}),
        )
        .unwrap();
        classes.create(&PostParams::default(), &class).await.unwrap();
    }
    let sleeper = |name: &str, class: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "priorityClassName": class, "restartPolicy": "Never", "automountServiceAccountToken": false,
                "containers": [{"name": "main", "image": shell_image(), "command": ["sh", "-c", "sleep 300"]}],
            },
        }))
        .unwrap()
    };
    let bound = |pod: &Pod| pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();

    // A Pod that may not preempt waits, unbound, across several retry ticks (2 s) ...
    pods.create(&PostParams::default(), &sleeper("patient", &patient_class)).await.unwrap();
    let held_until = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < held_until {
        assert!(!bound(&pods.get("patient").await.unwrap()), "a preemptionPolicy Never Pod waits");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // ... and takes the next free slot, ahead of the two that waited longer.
    let (oldest, _) = started.remove(0);
    pods.delete(&oldest, &DeleteParams::default()).await.unwrap();
    eventually("the patient Pod to run", TIMEOUT, || async {
        pods.get("patient").await.ok().filter(|p| phase_of(p) == Some("Running"))
    })
    .await;
    let bound_crowd =
        crowd_pods().await.iter().filter(|p| bound(p) && p.metadata.deletion_timestamp.is_none()).count();
    assert_eq!(bound_crowd, capacity - 1, "the two older Pods (and the Job's replacement) still wait");

    pods.create(&PostParams::default(), &sleeper("urgent", &urgent_class)).await.unwrap();
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
    assert_eq!(running.len(), capacity - 2, "beside the patient Pod, exactly one lower Pod made room");
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
    for class in [patient_class, urgent_class] {
        classes.delete(&class, &DeleteParams::default()).await.unwrap();
    }
}
