//! Benchmark: how fast the operator reacts to a finished block.
//!
//! `cargo run --release -p cluster-tests --bin reaction-bench -- [WORKFLOWS] [BLOCKS]`
//! against the cluster in `$KUBECONFIG` (e.g. `tests/cluster/cluster.sh up`).
//!
//! Starts an operator for a fresh namespace, creates WORKFLOWS workflows of
//! BLOCKS blocks at difficulty 8 (mining takes microseconds, so what is left
//! is the control loop), and watches their Jobs. The reaction time of block k
//! is the moment the Job of block k+1 is first seen minus the moment block k's
//! Job is first seen Complete; both are seen by the same watch, so its
//! delivery delay cancels out.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cluster_tests::{OperatorProcess, TestNamespace, install_crd};
use futures::TryStreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::{MiningWorkflow, WorkflowPhase, labels};
use serde_json::json;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let workflows: usize = args.next().map_or(1, |a| a.parse().expect("WORKFLOWS"));
    let blocks: u32 = args.next().map_or(8, |a| a.parse().expect("BLOCKS"));
    let ns = TestNamespace::new("reaction-bench").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &["--max-concurrent-workflows", "1000"]);

    let jobs: Api<Job> = ns.api();
    let mut stream = Box::pin(watcher(jobs, watcher::Config::default()).default_backoff().applied_objects());
    let api: Api<MiningWorkflow> = ns.api();
    let started = Instant::now();
    for i in 0..workflows {
        let workflow: MiningWorkflow = serde_json::from_value(json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
            "metadata": {"name": format!("bench-{i}")}, "spec": {"difficulty": 8, "blocks": blocks},
        }))
        .unwrap();
        api.create(&PostParams::default(), &workflow).await.unwrap();
    }

    let mut first_seen: HashMap<(String, u32), Instant> = HashMap::new();
    let mut completed: HashMap<(String, u32), Instant> = HashMap::new();
    let expected = workflows * blocks as usize;
    let deadline = Instant::now() + Duration::from_secs(600);
    while completed.len() < expected && Instant::now() < deadline {
        let Ok(Ok(Some(job))) = tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await else {
            continue;
        };
        let now = Instant::now();
        let labels = job.metadata.labels.clone().unwrap_or_default();
        let (Some(workflow), Some(block)) = (labels.get(labels::WORKFLOW), labels.get(labels::BLOCK)) else {
            continue;
        };
        let key = (workflow.clone(), block.parse().unwrap());
        first_seen.entry(key.clone()).or_insert(now);
        let complete = job
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Complete" && c.status == "True"));
        if complete {
            completed.entry(key).or_insert(now);
        }
    }
    let wall = started.elapsed();
    let mut reactions: Vec<f64> = completed
        .iter()
        .filter_map(|((workflow, block), done)| {
            first_seen
                .get(&(workflow.clone(), block + 1))
                .map(|next| next.duration_since(*done).as_secs_f64() * 1000.0)
        })
        .collect();
    reactions.sort_by(f64::total_cmp);
    let succeeded = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|w| w.status.as_ref().and_then(|s| s.phase) == Some(WorkflowPhase::Succeeded))
        .count();
    println!(
        "workflows={workflows} blocks={blocks} completed_jobs={} succeeded={succeeded} wall={:.1}s",
        completed.len(),
        wall.as_secs_f64()
    );
    if reactions.is_empty() {
        println!("no reactions measured");
    } else {
        println!(
            "reaction ms: n={} p50={:.1} p95={:.1} max={:.1}",
            reactions.len(),
            percentile(&reactions, 0.5),
            percentile(&reactions, 0.95),
            reactions[reactions.len() - 1]
        );
    }
    ns.delete().await;
}
