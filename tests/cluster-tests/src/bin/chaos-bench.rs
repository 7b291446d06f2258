//! The long chaos run (tests/chaos.rs runs a short one in the suite):
//!
//! `cargo run --release -p cluster-tests --bin chaos-bench -- [WORKFLOWS] [CHAOS_SECONDS] [KILLS_EACH] [no-priority]`
//!
//! `no-priority` installs the chart without its PriorityClass, so restarted
//! operator and frontend Pods queue behind waiting miner Pods (the
//! comparison in docs/BENCHMARKS.md).
//! Defaults 300 workflows of 3 blocks at difficulty 8, 120 s of chaos, 6
//! kills of each kind (operator Pod, frontend Pod, node agent), against the
//! local cluster in `$KUBECONFIG` (`MINING_CLUSTER_SLOT` names it for
//! `cluster.sh restart-agent`; on another cluster the agent is not killed).
//! Installs the chart, runs `cluster_tests::chaos`, which asserts every
//! guarantee, and prints the numbers for docs/BENCHMARKS.md.

use std::time::Duration;

use cluster_tests::chaos::{Plan, run};

fn arg(position: usize, default: u64) -> u64 {
    std::env::args().nth(position).map_or(default, |a| a.parse().expect("a number"))
}

#[tokio::main]
async fn main() {
    let (workflows, chaos, kills_each) = (arg(1, 300), arg(2, 120), arg(3, 6).max(1));
    let plan = Plan {
        workflows: workflows as usize,
        blocks: 3,
        difficulty: 8,
        chaos: Duration::from_secs(chaos),
        kills_each: kills_each as usize,
        drain_bound: Duration::from_secs(300),
        chart_values: match std::env::args().nth(4).as_deref() {
            Some("no-priority") => vec!["--set".into(), "priorityClass.create=false".into()],
            None => Vec::new(),
            Some(other) => panic!("unknown option {other}"),
        },
    };
    println!("plan: {plan:?}");
    let report = run("chaos-bench", plan).await;
    let [operator, frontend, agent] = report.kills;
    println!("workflows completed and verified: {} ({} blocks)", report.workflows, report.blocks_verified);
    println!("kills: {operator} operator Pods, {frontend} frontend Pods, {agent} node-agent restarts");
    println!(
        "retries: {} starts, {} polls; {} starts repeated on purpose, each naming its first id",
        report.start_retries, report.poll_retries, report.repeated_starts
    );
    println!("the longest a caller's call kept failing: {:.1} s", report.longest_outage.as_secs_f64());
    println!(
        "all complete {:.1} s after the last kill; {:.1} s in all",
        report.drain.as_secs_f64(),
        report.elapsed.as_secs_f64()
    );
}
