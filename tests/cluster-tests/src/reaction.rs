//! One run of the operator at scale (reaction-bench and floor-bench): start an
//! operator build for a fresh namespace, create the workflows at once, watch
//! their Jobs and the workflows, and read the operator's /metrics at the end.
//!
//! A reaction is the time from block k's Job first seen `Complete` to block
//! k+1's Job first seen, and for the last block to the workflow first seen
//! `Succeeded`; all moments come from watches in this one process, so
//! delivery delays mostly cancel out.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use kube::api::{Api, PostParams};
use mining_api::{MiningWorkflow, WorkflowPhase, labels};
use serde_json::json;

use crate::{OperatorProcess, Seen, TestNamespace, install_crd, jobs_and_workflows};

pub struct Run {
    pub label: String,
    pub wall: Duration,
    pub succeeded: usize,
    pub reactions: Vec<f64>,
    pub api_calls: f64,
    pub reconciles: f64,
    pub reconcile_p99: String,
}

/// Runs `binary` against `workflows` new workflows of `blocks` blocks.
pub async fn run(
    label: &str,
    binary: &std::path::Path,
    workflows: usize,
    blocks: u32,
    difficulty: u32,
) -> Run {
    let ns = TestNamespace::new("reaction-bench").await;
    install_crd(&ns.client).await;
    let operator = OperatorProcess::start_binary(binary, &ns.name, &["--max-concurrent-workflows", "1000"]);
    let api: Api<MiningWorkflow> = ns.api();
    let mut events = jobs_and_workflows(&ns);
    // The clock starts once the operator is ready (its caches synced): the
    // floor's driver, too, acts at once.
    crate::eventually("the operator to be ready", Duration::from_secs(60), || async {
        (operator.get("/readyz").await.0 == 200).then_some(())
    })
    .await;
    let started = Instant::now();
    for i in 0..workflows {
        let workflow: MiningWorkflow = serde_json::from_value(json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
            "metadata": {"name": format!("bench-{i}")}, "spec": {"difficulty": difficulty, "blocks": blocks},
        }))
        .unwrap();
        api.create(&PostParams::default(), &workflow).await.unwrap();
    }

    let mut first_seen: HashMap<(String, u32), Instant> = HashMap::new();
    let mut completed: HashMap<(String, u32), Instant> = HashMap::new();
    let mut succeeded: HashMap<String, Instant> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(900);
    while succeeded.len() < workflows && Instant::now() < deadline {
        let Ok(Ok(Some(seen))) = tokio::time::timeout(Duration::from_secs(5), events.try_next()).await else {
            continue;
        };
        let now = Instant::now();
        match seen {
            Seen::Workflow(w) => {
                if w.status.as_ref().and_then(|s| s.phase) == Some(WorkflowPhase::Succeeded) {
                    succeeded.entry(w.metadata.name.unwrap_or_default()).or_insert(now);
                }
            }
            Seen::Job(job) => {
                let labels = job.metadata.labels.clone().unwrap_or_default();
                let (Some(workflow), Some(block)) = (labels.get(labels::WORKFLOW), labels.get(labels::BLOCK))
                else {
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
        }
    }
    let wall = started.elapsed();
    let mut reactions: Vec<f64> = completed
        .iter()
        .filter_map(|((workflow, block), done)| {
            let next = if *block == blocks {
                succeeded.get(workflow)
            } else {
                first_seen.get(&(workflow.clone(), block + 1))
            };
            next.map(|next| next.saturating_duration_since(*done).as_secs_f64() * 1000.0)
        })
        .collect();
    reactions.sort_by(f64::total_cmp);
    let (_, metrics) = operator.get("/metrics").await;
    let value = |line: &str| line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let api_calls =
        metrics.lines().filter(|l| l.starts_with("mining_operator_api_calls_total{")).map(value).sum();
    let reconciles = metrics
        .lines()
        .find(|l| l.starts_with("mining_operator_reconcile_duration_seconds_count"))
        .map_or(0.0, value);
    let reconcile_p99 = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("mining_operator_reconcile_duration_seconds_bucket{le=\""))
        .filter_map(|l| l.split_once("\"}").map(|(le, rest)| (le.to_string(), value(rest))))
        .find(|(_, count)| *count >= reconciles * 0.99)
        .map_or("?".into(), |(le, _)| le);
    if std::env::var_os("BENCH_VERBOSE").is_some() {
        for line in metrics.lines().filter(|l| l.starts_with("mining_operator_api_calls_total{")) {
            eprintln!("{label}: {line}");
        }
    }
    drop(operator);
    Run {
        label: label.into(),
        wall,
        succeeded: succeeded.len(),
        reactions,
        api_calls,
        reconciles,
        reconcile_p99,
    }
}
