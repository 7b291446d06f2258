//! Benchmark: one hard block mined by 1 Pod against the same block mined by
//! several (`spec.parallelism`), each Pod one miner thread.
//!
//! `cargo run --release -p cluster-tests --bin parallel-bench -- DIFFICULTY BLOCKS PARALLELISMS [ROUNDS]`
//! e.g. `-- 30 3 1,2 2` against the cluster in `$KUBECONFIG`.
//! `BENCH_OPERATOR_ARGS` adds operator flags (e.g. `--nonce-range-size 67108864`).
//!
//! Each run starts this workspace's release operator for a fresh namespace
//! and creates one workflow of BLOCKS blocks. Per block it takes the time
//! from the block's first Job seen to the moment the workflow's status first
//! records the block (watches in this process), so Pod start-up, the
//! operator's reactions and waiting for ranges below the winner all count.
//! Runs alternate between the parallelisms within each round; every run
//! must record the same nonces.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cluster_tests::{OperatorProcess, Seen, TestNamespace, install_crd, jobs_and_workflows};
use futures::TryStreamExt;
use kube::api::{Api, PostParams};
use mining_api::{MiningWorkflow, WorkflowPhase, labels};
use serde_json::json;

struct Run {
    /// Seconds per block: first Job seen to recorded.
    seconds: Vec<f64>,
    nonces: Vec<u64>,
    /// Jobs created over the whole chain.
    jobs: usize,
}

async fn run(difficulty: u32, blocks: u32, parallelism: u32, operator_args: &[String]) -> Run {
    let ns = TestNamespace::new("parallel-bench").await;
    install_crd(&ns.client).await;
    let args: Vec<&str> = operator_args.iter().map(String::as_str).collect();
    let operator = OperatorProcess::start(&ns.name, &args);
    let _ = operator.get("/healthz").await;
    let api: Api<MiningWorkflow> = ns.api();
    let mut events = jobs_and_workflows(&ns);
    let workflow: MiningWorkflow = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow", "metadata": {"name": "hard"},
        "spec": {"difficulty": difficulty, "blocks": blocks, "parallelism": parallelism},
    }))
    .unwrap();
    api.create(&PostParams::default(), &workflow).await.unwrap();

    let mut first_job: BTreeMap<u32, Instant> = BTreeMap::new();
    let mut recorded: BTreeMap<u32, (Instant, u64)> = BTreeMap::new();
    let mut job_names = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(3600);
    let mut finished = None;
    while finished.is_none() && Instant::now() < deadline {
        let Ok(Ok(Some(seen))) = tokio::time::timeout(Duration::from_secs(5), events.try_next()).await else {
            continue;
        };
        let now = Instant::now();
        match seen {
            Seen::Job(job) => {
                let block = job.metadata.labels.as_ref().and_then(|l| l.get(labels::BLOCK)?.parse().ok());
                if let Some(block) = block {
                    first_job.entry(block).or_insert(now);
                }
                job_names.insert(job.metadata.name.unwrap_or_default());
            }
            Seen::Workflow(w) => {
                let status = w.status.unwrap_or_default();
                for block in &status.blocks {
                    recorded.entry(block.index).or_insert((now, block.nonce));
                }
                finished = status.phase.filter(|p| p.is_finished());
            }
        }
    }
    assert_eq!(finished, Some(WorkflowPhase::Succeeded), "parallelism {parallelism}");
    drop(operator);
    let seconds = (1..=blocks).map(|b| recorded[&b].0.duration_since(first_job[&b]).as_secs_f64()).collect();
    Run { seconds, nonces: recorded.values().map(|(_, n)| *n).collect(), jobs: job_names.len() }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let difficulty: u32 = args.next().map_or(30, |a| a.parse().expect("DIFFICULTY"));
    let blocks: u32 = args.next().map_or(3, |a| a.parse().expect("BLOCKS"));
    let parallelisms: Vec<u32> = args
        .next()
        .unwrap_or_else(|| "1,2".into())
        .split(',')
        .map(|p| p.parse().expect("PARALLELISMS: e.g. 1,2"))
        .collect();
    let rounds: usize = args.next().map_or(1, |a| a.parse().expect("ROUNDS"));
    let operator_args: Vec<String> = std::env::var("BENCH_OPERATOR_ARGS")
        .map(|a| a.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    println!("difficulty={difficulty} blocks={blocks} rounds={rounds} operator args={operator_args:?}");
    println!("| round | parallelism | seconds per block | total s | × parallelism 1 | Jobs |");
    println!("|---:|---:|---|---:|---:|---:|");
    let mut nonces: Option<Vec<u64>> = None;
    for round in 1..=rounds {
        let mut baseline = None;
        for &parallelism in &parallelisms {
            let run = run(difficulty, blocks, parallelism, &operator_args).await;
            match &nonces {
                None => nonces = Some(run.nonces.clone()),
                Some(want) => assert_eq!(&run.nonces, want, "parallelism {parallelism} found other nonces"),
            }
            let total: f64 = run.seconds.iter().sum();
            let speedup = baseline.map_or(1.0, |b: f64| b / total);
            if parallelism == 1 {
                baseline = Some(total);
            }
            let per_block: Vec<String> = run.seconds.iter().map(|s| format!("{s:.1}")).collect();
            println!(
                "| {round} | {parallelism} | {} | {total:.1} | {speedup:.2} | {} |",
                per_block.join(" / "),
                run.jobs
            );
        }
    }
    println!("nonces: {:?}", nonces.unwrap_or_default());
}
