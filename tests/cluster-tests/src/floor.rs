//! The floor of the operator's work: the same Jobs on the same cluster,
//! created by something that does nothing else (floor-bench).
//!
//! One of the operator's own Jobs is the template: the operator runs in the
//! floor's namespace just long enough to create block 1 of a one-block
//! workflow, and that Job, stripped of what the API server and Job controller
//! own, is copied for every block. The driver creates each workflow's block 1
//! Job at once and each next block's Job the moment the previous one is seen
//! `Complete`; it reads no result, verifies nothing, writes no status or
//! Events and keeps no queue.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::{MiningWorkflow, labels};
use serde_json::json;

use crate::{OperatorProcess, TestNamespace, eventually, install_crd};

pub struct FloorRun {
    pub wall: Duration,
    /// Workflows whose last block's Job completed.
    pub completed: usize,
    /// Block k's Job seen `Complete` to block k+1's Job seen, in ms.
    pub reactions: Vec<f64>,
    /// Creates the driver made (its one watch aside).
    pub api_calls: u64,
}

/// Labels the Job controller adds to a Job and its Pod template.
const CONTROLLER_LABELS: [&str; 4] =
    ["controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name"];

/// The operator's block-1 Job of a one-block workflow, captured from `operator`.
async fn operator_job(ns: &TestNamespace, operator: &Path, difficulty: u32) -> Job {
    let process = OperatorProcess::start_binary(operator, &ns.name, &[]);
    let workflow: MiningWorkflow = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
        "metadata": {"name": "template"}, "spec": {"difficulty": difficulty, "blocks": 1},
    }))
    .unwrap();
    ns.api::<MiningWorkflow>().create(&PostParams::default(), &workflow).await.unwrap();
    let jobs: Api<Job> = ns.api();
    let job = eventually("the operator's Job to copy", Duration::from_secs(60), || {
        let jobs = jobs.clone();
        async move {
            let listed = jobs.list(&Default::default()).await.ok()?;
            listed.items.into_iter().next()
        }
    })
    .await;
    drop(process);
    job
}

/// `template` as a new Job `name` for (`workflow`, `block`): what the API
/// server and the Job controller own removed, the rest as the operator made it.
fn copy_job(template: &Job, name: &str, workflow: &str, block: u32) -> Job {
    let mut job = template.clone();
    let mut meta_labels = template.metadata.labels.clone().unwrap_or_default();
    meta_labels.insert(labels::WORKFLOW.into(), workflow.into());
    meta_labels.insert(labels::BLOCK.into(), block.to_string());
    job.metadata = ObjectMeta {
        name: Some(name.into()),
        labels: Some(meta_labels),
        annotations: template.metadata.annotations.clone(),
        ..ObjectMeta::default()
    };
    job.status = None;
    if let Some(spec) = job.spec.as_mut() {
        spec.selector = None;
        spec.manual_selector = None;
        if let Some(pod_labels) = spec.template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            for label in CONTROLLER_LABELS {
                pod_labels.remove(label);
            }
        }
    }
    job
}

fn complete(job: &Job) -> bool {
    (job.status.as_ref().and_then(|s| s.conditions.as_ref()))
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Complete" && c.status == "True"))
}

/// Runs the floor for `workflows` chains of `blocks` Jobs in a fresh namespace.
pub async fn run(operator: &Path, workflows: usize, blocks: u32, difficulty: u32) -> FloorRun {
    let ns = TestNamespace::new("floor-bench").await;
    install_crd(&ns.client).await;
    let template = operator_job(&ns, operator, difficulty).await;
    let jobs: Api<Job> = ns.api();
    let selector = format!("{}!=template", labels::WORKFLOW);
    let mut seen = watcher(jobs.clone(), watcher::Config::default().labels(&selector))
        .default_backoff()
        .applied_objects()
        .boxed();
    let (created_tx, mut created_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let create = |workflow: String, block: u32| {
        let (jobs, job, created) = (
            jobs.clone(),
            copy_job(&template, &format!("{workflow}-b{block}"), &workflow, block),
            created_tx.clone(),
        );
        // Concurrently, as the operator's reconciles are: one slow create
        // does not hold the others back.
        tokio::spawn(async move {
            jobs.create(&PostParams::default(), &job).await.expect("create a floor Job");
            let _ = created.send(());
        });
    };
    let started = Instant::now();
    for i in 0..workflows {
        create(format!("floor-{i}"), 1);
    }
    let mut first_seen: HashMap<(String, u32), Instant> = HashMap::new();
    let mut completed: HashMap<(String, u32), Instant> = HashMap::new();
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(900);
    while done < workflows && Instant::now() < deadline {
        let Ok(Ok(Some(job))) = tokio::time::timeout(Duration::from_secs(5), seen.try_next()).await else {
            continue;
        };
        let now = Instant::now();
        let labels = job.metadata.labels.clone().unwrap_or_default();
        let (Some(workflow), Some(block)) = (labels.get(labels::WORKFLOW), labels.get(labels::BLOCK)) else {
            continue;
        };
        let key = (workflow.clone(), block.parse::<u32>().unwrap());
        first_seen.entry(key.clone()).or_insert(now);
        if complete(&job) && !completed.contains_key(&key) {
            completed.insert(key.clone(), now);
            if key.1 < blocks {
                create(key.0, key.1 + 1);
            } else {
                done += 1;
            }
        }
    }
    let wall = started.elapsed();
    let mut api_calls = 0;
    while created_rx.try_recv().is_ok() {
        api_calls += 1;
    }
    let mut reactions: Vec<f64> = (completed.iter())
        .filter_map(|((workflow, block), at)| {
            let next = first_seen.get(&(workflow.clone(), block + 1))?;
            Some(next.saturating_duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    reactions.sort_by(f64::total_cmp);
    FloorRun { wall, completed: done, reactions, api_calls }
}
