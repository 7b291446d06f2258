//! Preemption makes progress (red team, round 5): with the preemption
//! delay at 5 s, alice's preemptible run with a 20 s step holds the only
//! tool-run slot while bob keeps calling a short tool — each call made as
//! soon as alice's run runs again, as a stream of newcomers would. Before,
//! every one of bob's calls took the slot back and alice's run never
//! completed; now each preemption doubles how long her next slot is hers
//! (`admission::protected_for`), so it completes after at most
//! ⌈log2(20 / 5 + 1)⌉ = 3 preemptions, and bob's calls all complete too.

use std::time::{Duration, Instant};

use cluster_tests::mcp::Sdk;
use cluster_tests::tools::{ALICE, BOB, call, define, settle, setup_with, tool};
use kube::api::Api;
use mining_api::{ToolRun, ToolRunPhase, Work as _};
use serde_json::json;

const PREEMPT_AFTER: u64 = 5;
const STEP_SECONDS: u64 = 20;

#[tokio::test]
#[ignore = "needs the local cluster's images; tests/run.sh runs it there"]
async fn a_preemptible_run_completes_under_a_stream_of_another_callers_short_calls() {
    let preempt = PREEMPT_AFTER.to_string();
    let args = ["--max-concurrent-tool-runs", "1", "--preempt-after-seconds", &preempt];
    let (ns, _operator, frontend) = setup_with("preempt-progress", &args).await;
    let url = frontend.url();
    let runs: Api<ToolRun> = ns.api();
    define(&ns, &url, tool("sum-preemptible", 0, json!({"preemptible": true}))).await;
    let start = |token, delay: u64| {
        let url = url.clone();
        async move {
            let arguments = json!({"numbers": [1, 2], "delay_seconds": delay});
            let answer = call(Sdk::Python, &url, token, "sum-preemptible", arguments).await;
            answer["workflow_id"].as_str().unwrap_or_else(|| panic!("{answer:#}")).to_string()
        }
    };

    let long = start(ALICE, STEP_SECONDS).await;
    let deadline = Instant::now() + Duration::from_secs(360);
    let mut bobs: Vec<String> = Vec::new();
    let finished = loop {
        let run = runs.get(&long).await.unwrap();
        if run.is_finished() {
            break run;
        }
        let preemptions = run.status.as_ref().and_then(|s| s.preemptions).unwrap_or(0);
        assert!(
            Instant::now() < deadline,
            "alice's run never completed under the stream: {preemptions} preemptions, {} newcomers",
            bobs.len()
        );
        let running =
            run.phase() == ToolRunPhase::Running && run.status.as_ref().is_some_and(|s| s.job_uid.is_some());
        let bob_waiting = match bobs.last() {
            Some(last) => runs.get(last).await.is_ok_and(|bob| !bob.is_finished()),
            None => false,
        };
        // A newcomer each time alice's run runs again and none is waiting.
        if running && !bob_waiting {
            bobs.push(start(BOB, 0).await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(finished.phase(), ToolRunPhase::Succeeded, "{:?}", finished.status);
    let preemptions = finished.status.as_ref().and_then(|s| s.preemptions).unwrap_or(0);
    let bound = ((STEP_SECONDS as f64 / PREEMPT_AFTER as f64) + 1.0).log2().ceil() as u32;
    eprintln!("alice's run completed after {preemptions} preemptions, {} newcomers", bobs.len());
    assert!(preemptions >= 1, "the stream did take the slot back");
    assert!(preemptions <= bound, "{preemptions} preemptions, more than the bound {bound}");
    for bob in &bobs {
        let done = settle(Sdk::Python, &url, BOB, bob).await;
        assert_eq!(done["result"]["sum"], 3.0, "every newcomer's call completes: {done:#}");
    }
}
