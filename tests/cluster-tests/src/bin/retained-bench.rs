//! Benchmark of what retained workflows cost at rest, against the cluster in
//! `$KUBECONFIG`:
//!
//! `cargo run --release -p cluster-tests --bin retained-bench -- [WORKFLOWS]`
//!
//! Fills a namespace with WORKFLOWS (default 10,000) finished MiningWorkflows,
//! as MCP callers leave them for the retention period (caller label, a
//! Succeeded status with a 4-block chain, 24 h retention, and a 256-byte
//! progress token and a 4 KiB foreign annotation each, which the caches must
//! not keep), lets a first operator settle on them, then restarts the
//! operator and starts the frontend on it and reports, for each: the time from start to ready (`/readyz` 200: its first list has
//! synced), resident memory once ready and after a minute at rest, and the
//! API requests it made during that minute (the operator's
//! `mining_operator_api_calls_total`; the frontend's
//! `mcp_frontend_api_requests_total`, watches aside, which are long-lived).

use std::time::{Duration, Instant};

use cluster_tests::mcp::FrontendProcess;
use cluster_tests::{OperatorProcess, TestNamespace, install_crd, resident_mib};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mining_api::{MiningWorkflow, annotations, labels};
use serde_json::json;

fn sum_series(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn fill(api: &Api<MiningWorkflow>, count: usize) {
    let blocks: Vec<_> = (0..4)
        .map(|i| {
            json!({"index": i + 1, "nonce": 7, "hash": "0".repeat(64), "attempts": 8,
            "jobName": format!("j-{i}"), "minimalityChecked": true})
        })
        .collect();
    let begun = Instant::now();
    futures::stream::iter(0..count)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            let blocks = blocks.clone();
            async move {
                let name = format!("mw-retained-{i:05}");
                let workflow: MiningWorkflow = serde_json::from_value(json!({
                    "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
                    "metadata": {"name": name,
                        "labels": {labels::CALLER: format!("caller-{:03}", i % 100)},
                        "annotations": {annotations::PROGRESS_TOKEN: "x".repeat(256),
                            "example.com/foreign": "y".repeat(4096)}},
                    "spec": {"difficulty": 8, "blocks": 4, "ttlSecondsAfterFinished": 86400},
                }))
                .unwrap();
                api.create(&PostParams::default(), &workflow).await.unwrap();
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                let status = json!({"status": {"phase": "Succeeded", "progress": "4/4", "blocks": blocks,
                    "admittedDifficulty": 8, "admittedBlocks": 4, "startedAt": now, "finishedAt": now}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
            }
        })
        .await;
    println!("created {count} finished workflows in {:.1} s", begun.elapsed().as_secs_f64());
}

#[tokio::main]
async fn main() {
    let count: usize = std::env::args().nth(1).map_or(10_000, |a| a.parse().expect("WORKFLOWS"));
    let ns = TestNamespace::new("retained-bench").await;
    install_crd(&ns.client).await;
    let api: Api<MiningWorkflow> = ns.api();
    fill(&api, count).await;

    // A first operator brings every status to what it writes itself (the
    // fixtures are not byte-for-byte its own), as a long-running one has.
    let first = OperatorProcess::start(&ns.name, &[]);
    let converging = Instant::now();
    let mut last = -1.0;
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let calls = sum_series(&first.get("/metrics").await.1, "mining_operator_api_calls_total");
        if calls == last {
            break;
        }
        last = calls;
        assert!(converging.elapsed() < Duration::from_secs(600), "the first operator did not settle");
    }
    println!(
        "a first operator settled after {:.0} s and {last} API calls",
        converging.elapsed().as_secs_f64()
    );
    drop(first);

    // The measured restart.
    let started = Instant::now();
    let operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = FrontendProcess::spawn(&ns.name, &[], &[]);
    let (mut operator_ready, mut frontend_ready) = (None, None);
    while operator_ready.is_none() || frontend_ready.is_none() {
        if operator_ready.is_none() && operator.get("/readyz").await.0 == 200 {
            operator_ready = Some(started.elapsed());
        }
        if frontend_ready.is_none() && frontend.get("/readyz").await.0 == 200 {
            frontend_ready = Some(started.elapsed());
        }
        assert!(started.elapsed() < Duration::from_secs(300), "not ready within 5 minutes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (operator_pid, frontend_pid) = (operator.pid(), frontend.pid());
    let ready_memory = (resident_mib(operator_pid), resident_mib(frontend_pid));
    // Let the first reconciles of every workflow pass, then measure a minute at rest.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let calls = async || {
        (
            sum_series(&operator.get("/metrics").await.1, "mining_operator_api_calls_total"),
            sum_series(&frontend.get("/metrics").await.1, "mcp_frontend_api_requests_total"),
        )
    };
    let before = calls().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = calls().await;
    let rest_memory = (resident_mib(operator_pid), resident_mib(frontend_pid));
    println!("{count} retained workflows");
    println!(
        "| component | ready after | RSS at ready | RSS after 90 s | API requests in the minute at rest |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    println!(
        "| operator | {:.1} s | {:.1} MiB | {:.1} MiB | {} |",
        operator_ready.unwrap().as_secs_f64(),
        ready_memory.0,
        rest_memory.0,
        after.0 - before.0
    );
    println!(
        "| mcp-frontend | {:.1} s | {:.1} MiB | {:.1} MiB | {} |",
        frontend_ready.unwrap().as_secs_f64(),
        ready_memory.1,
        rest_memory.1,
        after.1 - before.1
    );
    drop(frontend);
    drop(operator);
}
