//! Benchmark: SIGKILL the leading operator replica mid-chain under load.
//!
//! `cargo run --release -p cluster-tests --bin failover-bench -- WORKFLOWS BLOCKS DIFFICULTY KILL_AFTER_S LEASE_S`
//! e.g. `-- 50 8 12 3 15` against the cluster in `$KUBECONFIG`.
//!
//! Two replicas of this workspace's release operator elect a leader for a
//! fresh namespace. WORKFLOWS workflows of BLOCKS blocks are created at once;
//! KILL_AFTER_S seconds later the leader is SIGKILLed. The benchmark polls the
//! standby's /metrics every 50 ms: when it leads, and when it creates its
//! first Job (mining resumed). Then every workflow must succeed with a valid
//! chain and exactly one Job per block (no block mined twice), as seen by a
//! Job watch in this process that saw every Job ever created.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use cluster_tests::{OperatorProcess, TestNamespace, install_crd};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::{MiningWorkflow, WorkflowPhase, labels};
use serde_json::json;

const LEADER: &str = "mining_operator_leader";
const JOBS_CREATED: &str = r#"mining_operator_api_calls_total{verb="create",resource="jobs"}"#;

fn replica(namespace: &str, identity: &str, lease_seconds: u64) -> OperatorProcess {
    OperatorProcess::start_replica(
        namespace,
        identity,
        lease_seconds,
        &["--max-concurrent-workflows", "1000"],
    )
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mut next = |name: &str, default: u64| args.next().map_or(default, |a| a.parse().expect(name));
    let workflows = next("WORKFLOWS", 50) as usize;
    let blocks = next("BLOCKS", 8) as u32;
    let difficulty = next("DIFFICULTY", 12) as u32;
    let kill_after = Duration::from_secs(next("KILL_AFTER_S", 3));
    let lease_seconds = next("LEASE_S", 15);

    let ns = TestNamespace::new("failover-bench").await;
    install_crd(&ns.client).await;
    let mut replicas =
        [replica(&ns.name, "replica-a", lease_seconds), replica(&ns.name, "replica-b", lease_seconds)];
    let leader = loop {
        let mut leading = Vec::new();
        for (i, r) in replicas.iter().enumerate() {
            if r.metric(LEADER).await == 1.0 {
                leading.push(i);
            }
        }
        if leading.len() == 1 {
            break leading[0];
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let standby = 1 - leader;

    let jobs: Api<Job> = ns.api();
    let api: Api<MiningWorkflow> = ns.api();
    // Every Job ever created, by (workflow, block): a block mined twice shows as two names.
    let job_names =
        std::sync::Arc::new(std::sync::Mutex::new(HashMap::<(String, String), HashSet<String>>::new()));
    let seen = job_names.clone();
    let job_watch = tokio::spawn(async move {
        let mut events =
            watcher(jobs, watcher::Config::default()).default_backoff().applied_objects().boxed();
        while let Ok(Some(job)) = events.try_next().await {
            let labels = job.metadata.labels.clone().unwrap_or_default();
            if let (Some(w), Some(b)) = (labels.get(labels::WORKFLOW), labels.get(labels::BLOCK)) {
                let mut seen = seen.lock().unwrap();
                seen.entry((w.clone(), b.clone())).or_default().insert(job.metadata.name.unwrap_or_default());
            }
        }
    });

    let started = Instant::now();
    for i in 0..workflows {
        let workflow: MiningWorkflow = serde_json::from_value(json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
            "metadata": {"name": format!("load-{i}")}, "spec": {"difficulty": difficulty, "blocks": blocks},
        }))
        .unwrap();
        api.create(&PostParams::default(), &workflow).await.unwrap();
    }
    tokio::time::sleep(kill_after.saturating_sub(started.elapsed())).await;
    let done_before = count_blocks(&api).await;
    replicas[leader].kill();
    let killed = Instant::now();
    let (mut led, mut resumed) = (None, None);
    while resumed.is_none() && killed.elapsed() < Duration::from_secs(lease_seconds * 4 + 30) {
        if led.is_none() && replicas[standby].metric(LEADER).await == 1.0 {
            led = Some(killed.elapsed());
        }
        if replicas[standby].metric(JOBS_CREATED).await > 0.0 {
            resumed = Some(killed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let deadline = Instant::now() + Duration::from_secs(900);
    let all = loop {
        let list = api.list(&ListParams::default()).await.unwrap().items;
        let finished =
            list.iter().filter(|w| w.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p.is_finished()));
        if finished.count() == workflows || Instant::now() > deadline {
            break list;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let wall = started.elapsed();
    // Let the Job watch catch up with the last creations.
    tokio::time::sleep(Duration::from_secs(2)).await;
    job_watch.abort();

    let mut succeeded = 0;
    let mut invalid = 0;
    for workflow in &all {
        let status = workflow.status.clone().unwrap_or_default();
        if status.phase == Some(WorkflowPhase::Succeeded) {
            succeeded += 1;
        }
        if mining_api::verify_chain(&status.blocks, difficulty).is_err() {
            invalid += 1;
        }
    }
    let (twice, jobs_total) = {
        let names = job_names.lock().unwrap();
        (names.values().filter(|n| n.len() > 1).count(), names.values().map(HashSet::len).sum::<usize>())
    };
    let secs = |d: Option<Duration>| d.map_or("never".into(), |d| format!("{:.2}", d.as_secs_f64()));
    println!("workflows={workflows} blocks={blocks} difficulty={difficulty} lease={lease_seconds}s");
    println!(
        "| killed at s | blocks done then | standby led after s | first Job after s | wall s | succeeded | invalid chains | blocks with 2+ Jobs | Jobs |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {:.1} | {done_before}/{} | {} | {} | {:.1} | {succeeded}/{workflows} | {invalid} | {twice} | {jobs_total} |",
        kill_after.as_secs_f64(),
        workflows * blocks as usize,
        secs(led),
        secs(resumed),
        wall.as_secs_f64()
    );
    drop(replicas);
    assert!(succeeded == workflows && invalid == 0 && twice == 0, "failover lost or repeated work");
    assert!(
        resumed.is_some_and(|r| r <= Duration::from_secs(lease_seconds + 2)),
        "mining did not resume within the lease"
    );
}

async fn count_blocks(api: &Api<MiningWorkflow>) -> usize {
    let list = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.iter().map(|w| w.status.as_ref().map_or(0, |s| s.blocks.len())).sum()
}
