//! Benchmark: the operator against the floor of its own work.
//!
//! `cargo run --release -p cluster-tests --bin floor-bench -- [WORKFLOWS] [BLOCKS] [DIFFICULTY] [ROUNDS]`
//! against the local cluster in `$KUBECONFIG` (defaults 200 × 3 at difficulty
//! 10, 2 rounds). Each round runs the floor (`cluster_tests::floor`: the
//! operator's own Jobs created by a driver that does nothing else) and then
//! this workspace's release operator (`cluster_tests::reaction`), each in a
//! fresh namespace, alternating; it prints each run and operator ÷ floor of
//! the median wall times. `BENCH_OPERATOR=PATH` measures another build.

use std::path::PathBuf;

use cluster_tests::bench::percentile;
use cluster_tests::{floor, operator_binary, reaction};

/// The middle value; the mean of the middle two for an even count.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) { (values[middle - 1] + values[middle]) / 2.0 } else { values[middle] }
}

fn reaction_columns(sorted: &[f64]) -> String {
    if sorted.is_empty() {
        return "– | – | –".into();
    }
    let max = sorted[sorted.len() - 1];
    format!("{:.0} | {:.0} | {max:.0}", percentile(sorted, 0.5), percentile(sorted, 0.95))
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let workflows: usize = args.next().map_or(200, |a| a.parse().expect("WORKFLOWS"));
    let blocks: u32 = args.next().map_or(3, |a| a.parse().expect("BLOCKS"));
    let difficulty: u32 = args.next().map_or(10, |a| a.parse().expect("DIFFICULTY"));
    let rounds: usize = args.next().map_or(2, |a| a.parse().expect("ROUNDS"));
    let operator = std::env::var_os("BENCH_OPERATOR").map_or_else(operator_binary, PathBuf::from);
    let block_count = workflows as f64 * f64::from(blocks);
    println!("workflows={workflows} blocks={blocks} difficulty={difficulty} rounds={rounds}");
    println!("| round | driver | done | wall s | reaction p50 ms | p95 ms | max ms | API calls / block |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let (mut floors, mut operators) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let floor = floor::run(&operator, workflows, blocks, difficulty).await;
        println!(
            "| {round} | floor | {}/{workflows} | {:.1} | {} | {:.1} |",
            floor.completed,
            floor.wall.as_secs_f64(),
            reaction_columns(&floor.reactions),
            floor.api_calls as f64 / block_count
        );
        floors.push(floor.wall.as_secs_f64());
        let run = reaction::run("operator", &operator, workflows, blocks, difficulty).await;
        println!(
            "| {round} | operator | {}/{workflows} | {:.1} | {} | {:.1} |",
            run.succeeded,
            run.wall.as_secs_f64(),
            reaction_columns(&run.reactions),
            run.api_calls / block_count
        );
        operators.push(run.wall.as_secs_f64());
    }
    let (floor, operator) = (median(floors), median(operators));
    println!(
        "median wall: floor {floor:.1} s, operator {operator:.1} s; operator ÷ floor = {:.2}",
        operator / floor
    );
}
