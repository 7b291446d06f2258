//! Work under the admission real clusters run, on the real control plane: a
//! mutating webhook (tests/cluster-tests/webhook/mesh_injector.py, served
//! over TLS to the API server) gives every Pod of the namespace a mesh's
//! init container, proxy sidecar, Pod-local volume and label — ignoring the
//! miner Pods' opt-out, as a misconfigured mesh would — and creates every
//! Job labelled for a Kueue LocalQueue suspended, as Kueue does, which this
//! test then admits (unsuspends) as Kueue would. A mining workflow and a
//! tool run complete with their verified results regardless.
//!
//! `spec.suspend` exists from Kubernetes 1.21: on an older API server the
//! webhook's suspension is dropped by the server itself, and the test says
//! so (the waiting is covered by `provenance::tests` there).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cluster_tests::mcp::Sdk;
use cluster_tests::tools::{ALICE, call, define, setup_with, tool};
use cluster_tests::webhook::{Admission, Webhook, create_rule};
use cluster_tests::{TestNamespace, assert_chain_verifies, create_workflow, phase, reference_chain};
use futures::StreamExt as _;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use mining_api::{MiningWorkflow, WorkflowPhase, labels};
use serde_json::json;

/// Starts the mesh webhook for the Pods and Jobs of `ns`.
async fn mesh_webhook(ns: &TestNamespace) -> Webhook {
    let rules = vec![create_rule("", "pods"), create_rule("batch", "jobs")];
    cluster_tests::webhook::start(ns, "mesh_injector.py", "mesh.example.com", Admission::Mutating, rules)
        .await
}

/// What Kueue does once a queue admits a Job: unsuspend it. Counts the Jobs admitted.
fn admit_suspended_jobs(jobs: Api<Job>) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let admitted = Arc::new(AtomicUsize::new(0));
    let counter = admitted.clone();
    let task = tokio::spawn(async move {
        loop {
            for job in jobs.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default() {
                if job.spec.as_ref().and_then(|s| s.suspend) == Some(true) {
                    // A moment held, as a queue would: the operator must wait, not fail.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    let admit = Patch::Merge(json!({"spec": {"suspend": false}}));
                    let name = job.metadata.name.clone().unwrap_or_default();
                    if jobs.patch(&name, &PatchParams::default(), &admit).await.is_ok() {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    (admitted, task)
}

/// The labels of each Pod seen.
type SeenLabels = Arc<Mutex<Vec<BTreeMap<String, String>>>>;

/// The labels of every Pod of `pods` seen carrying what the webhook
/// injects, from a watch (a tool's Pod may be gone by the time it answers).
fn record_meshed(pods: Api<Pod>) -> (SeenLabels, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(pods, watcher::Config::default()).applied_objects());
        while let Some(event) = events.next().await {
            if let Ok(pod) = event
                && meshed(&pod)
            {
                into.lock().unwrap().push(pod.metadata.labels.clone().unwrap_or_default());
            }
        }
    });
    (seen, task)
}

/// Whether `pod` carries what the webhook injects.
fn meshed(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.name == "mesh-init"));
    let proxy = spec.is_some_and(|s| s.containers.iter().any(|c| c.name == "mesh-proxy"));
    init && proxy && pod.metadata.labels.as_ref().is_some_and(|l| l.contains_key("mesh.example.com/injected"))
}

#[tokio::test]
async fn a_workflow_and_a_tool_run_complete_with_a_mesh_injected_and_their_jobs_held_by_a_queue() {
    let (ns, _operator, frontend) = setup_with("admission", &["--job-queue-name", "team-a"]).await;
    let _webhook = mesh_webhook(&ns).await;
    let jobs: Api<Job> = ns.api();
    let (admitted, admitting) = admit_suspended_jobs(jobs.clone());
    let pods: Api<Pod> = ns.api();
    let (meshed_pods, watching) = record_meshed(pods.clone());

    // A workflow of 3 blocks: every block's Job queued, held, admitted; every
    // block's Pod injected; the chain verified.
    let workflows: Api<MiningWorkflow> =
        create_workflow(&ns, "meshed", json!({"difficulty": 8, "blocks": 3})).await;
    let mut meshed_miners = std::collections::BTreeSet::new();
    let mut queued_jobs = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    let done = loop {
        let workflow = workflows.get("meshed").await.unwrap();
        if phase(Some(&workflow)) == Some(WorkflowPhase::Failed) {
            panic!("the workflow failed under admission: {:?}", workflow.status);
        }
        for pod in pods.list(&ListParams::default().labels(labels::WORKFLOW)).await.unwrap().items {
            if meshed(&pod) {
                meshed_miners.insert(pod.metadata.name.clone().unwrap_or_default());
            }
        }
        for job in jobs.list(&ListParams::default().labels(labels::WORKFLOW)).await.unwrap().items {
            let queue = job.metadata.labels.as_ref().and_then(|l| l.get(labels::KUEUE_QUEUE_NAME).cloned());
            if queue.as_deref() == Some("team-a") {
                queued_jobs.insert(job.metadata.name.clone().unwrap_or_default());
            }
        }
        if phase(Some(&workflow)) == Some(WorkflowPhase::Succeeded) {
            break workflow;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the workflow did not succeed: {:?}",
            workflow.status
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_chain_verifies(&done, 8);
    // The very chain of the independent reference miner: nothing admission
    // added changed a nonce.
    let reference = reference_chain(3, 8);
    let mined: Vec<(u64, String)> = done.mined_blocks().iter().map(|b| (b.nonce, b.hash.clone())).collect();
    let expected: Vec<(u64, String)> = reference
        .iter()
        .map(|b| (b["nonce"].as_u64().unwrap(), b["hash"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(mined, expected);
    assert!(!meshed_miners.is_empty(), "the miners' Pods were injected (else this proves nothing)");
    assert!(!queued_jobs.is_empty(), "the block Jobs were put in the queue");

    // A tool run, its Pod injected the same way (a mesh in CNI mode: no
    // init container with NET_ADMIN), its Job queued and held as well.
    let url = frontend.url();
    define(&ns, &url, tool("sum-numbers", 60, json!({}))).await;
    let outcome = call(Sdk::TypeScript, &url, ALICE, "sum-numbers", json!({"numbers": [1, 2, 3]})).await;
    assert_eq!(outcome["status"], "completed", "{outcome:#}");
    assert_eq!(outcome["result"]["sum"], 6.0, "{outcome:#}");
    let run = outcome["workflow_id"].as_str().unwrap();
    let tool_pod_meshed = meshed_pods
        .lock()
        .unwrap()
        .iter()
        .any(|labels| labels.get(labels::TOOL_RUN).map(String::as_str) == Some(run));
    assert!(tool_pod_meshed, "the tool's Pod was injected");
    watching.abort();

    // Kueue's suspension: held and admitted, on servers that keep it.
    let version = ns.client.apiserver_version().await.unwrap();
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap_or(0);
    if minor >= 21 {
        assert!(admitted.load(Ordering::Relaxed) >= 4, "every Job (3 blocks, 1 run) was held, then admitted");
    } else {
        assert_eq!(admitted.load(Ordering::Relaxed), 0, "Kubernetes 1.{minor} drops spec.suspend");
    }
    admitting.abort();
}
