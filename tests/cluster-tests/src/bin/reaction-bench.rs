//! Benchmark: how fast the operator drives workflows, and what it costs the
//! API server.
//!
//! `cargo run --release -p cluster-tests --bin reaction-bench -- [WORKFLOWS] [BLOCKS] [DIFFICULTY]`
//! against the cluster in `$KUBECONFIG` (e.g. `tests/cluster/cluster.sh up`).
//! `BENCH_OPERATORS=before=PATH,after=PATH` compares operator builds side by
//! side, alternating `BENCH_ROUNDS` times (default: this workspace's release
//! operator, once).
//!
//! Each run starts an operator for a fresh namespace, creates WORKFLOWS
//! workflows of BLOCKS blocks (difficulty 8 by default: mining takes
//! microseconds, so what is left is the control loop) and watches their Jobs
//! and the workflows (`cluster_tests::reaction`). At the end it reads the
//! operator's /metrics: API calls (every verb, watches included) per block,
//! and the reconcile-duration p99 (upper bound of its histogram bucket).

use std::path::PathBuf;

use cluster_tests::bench::percentile;
use cluster_tests::operator_binary;
use cluster_tests::reaction::run;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let workflows: usize = args.next().map_or(1, |a| a.parse().expect("WORKFLOWS"));
    let blocks: u32 = args.next().map_or(8, |a| a.parse().expect("BLOCKS"));
    let difficulty: u32 = args.next().map_or(8, |a| a.parse().expect("DIFFICULTY"));
    let operators: Vec<(String, PathBuf)> = match std::env::var("BENCH_OPERATORS") {
        Ok(list) => list
            .split(',')
            .map(|pair| {
                let (label, path) = pair.split_once('=').expect("BENCH_OPERATORS is label=path,...");
                (label.to_string(), PathBuf::from(path))
            })
            .collect(),
        Err(_) => vec![("this".into(), operator_binary())],
    };
    let rounds: usize = std::env::var("BENCH_ROUNDS").map_or(1, |r| r.parse().expect("BENCH_ROUNDS"));
    println!("workflows={workflows} blocks={blocks} difficulty={difficulty} rounds={rounds}");
    println!(
        "| operator | succeeded | wall s | reaction p50 ms | p95 ms | max ms | reconcile p99 ≤ s | API calls / block | calls / reconcile |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for _ in 0..rounds {
        for (label, binary) in &operators {
            let run = run(label, binary, workflows, blocks, difficulty).await;
            let r = &run.reactions;
            let (p50, p95, max) = if r.is_empty() {
                (f64::NAN, f64::NAN, f64::NAN)
            } else {
                (percentile(r, 0.5), percentile(r, 0.95), r[r.len() - 1])
            };
            let block_count = (workflows as f64) * f64::from(blocks);
            println!(
                "| {} | {}/{workflows} | {:.1} | {p50:.0} | {p95:.0} | {max:.0} | {} | {:.1} | {:.2} |",
                run.label,
                run.succeeded,
                run.wall.as_secs_f64(),
                run.reconcile_p99,
                run.api_calls / block_count,
                run.api_calls / run.reconciles.max(1.0),
            );
        }
    }
}
