//! Benchmark of push (`subscriptions/listen`, 2026-07-28), against the
//! cluster in `$KUBECONFIG`:
//!
//! `cargo run --release -p cluster-tests --bin listen-bench -- [LISTENS]`
//!
//! Two frontend replicas serve one namespace. LISTENS (default 1000)
//! workflows are started through replica A; replica B holds one listen per
//! workflow, all open at once (its resident memory is read before and with
//! them). No operator runs: the bench finishes each workflow itself, one at
//! a time, with the status write the operator would make, and measures the
//! time from just before that write to the `notifications/tasks` saying
//! `completed` on B's stream. Then, in the same run, for a pull reference,
//! the same write wakes a 2025-11-25 `tasks/result` wait held on B (one at
//! a time, LISTENS/10 of them).

use std::time::{Duration, Instant};

use cluster_tests::bench::{percentile, summary};
use cluster_tests::mcp::{FrontendProcess, tokens_file};
use cluster_tests::sse::SseStream;
use cluster_tests::{TestNamespace, install_crd, resident_mib};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use mining_api::MiningWorkflow;
use serde_json::{Value, json};

/// Every call comes from this one address, and one caller holds every
/// listen: the caps are lifted to the bench's size.
const LIFTED: &[&str] = &[
    "--max-connections",
    "20000",
    "--max-connections-per-source",
    "20000",
    "--max-listens-per-caller",
    "10000",
    "--max-listens",
    "10000",
    "--max-running-per-caller",
    "1000",
    "--max-starts-per-minute",
    "1000",
];

/// A one-block chain at difficulty 8 (mining it is the bench's own status write).
static ONE_BLOCK: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| json!({"difficulty": 8, "blocks": 1}));

fn request_head(version: &str, method: &str, token: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {version}\r\n\
         Mcp-Method: {method}\r\nAuthorization: Bearer {token}\r\n"
    )
}

fn listen_body(task_id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": task_id, "method": "subscriptions/listen", "params": {
        "notifications": {"taskIds": [task_id]},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}}})
    .to_string()
}

/// The status write the operator makes when a one-block workflow succeeds.
fn succeeded() -> Value {
    let found = miner::mine_block(1, mining_api::GENESIS, 8, 1).unwrap();
    let now = Timestamp::now().to_string();
    json!({"status": {"phase": "Succeeded", "progress": "1/1", "startedAt": now, "finishedAt": now, "blocks": [{
        "index": 1, "nonce": found.nonce, "hash": miner::hex_upper(&found.digest), "attempts": found.nonce + 1,
        "jobName": "bench"}]}})
}

#[tokio::main]
async fn main() {
    let listens: usize = std::env::args().nth(1).map_or(1000, |a| a.parse().expect("LISTENS"));
    let ns = TestNamespace::new("listen-bench").await;
    install_crd(&ns.client).await;
    // Two callers: one holds the listens, the other the pull reference's
    // waits (each within the quota of starts a minute allows).
    let tokens = tokens_file("listener-secret listener\npuller-secret puller\n");
    let mut args = LIFTED.to_vec();
    args.extend(["--auth", "tokens", "--tokens-file", tokens.to_str().unwrap()]);
    let (creating, listening) =
        tokio::join!(FrontendProcess::start(&ns.name, &args), FrontendProcess::start(&ns.name, &args));
    let api: Api<MiningWorkflow> = ns.api();

    let mut ids = Vec::with_capacity(listens);
    for _ in 0..listens {
        ids.push(creating.start_2025_task("listener-secret", &ONE_BLOCK).await);
    }
    let mut pull_ids = Vec::new();
    for _ in 0..(listens / 10).max(1) {
        pull_ids.push(creating.start_2025_task("puller-secret", &ONE_BLOCK).await);
    }
    let before = resident_mib(listening.pid());

    // One listen per workflow on replica B, each acknowledged and told
    // `working` before the bench goes on.
    let (told, mut completions) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let mut streams = Vec::with_capacity(listens);
    for id in &ids {
        let mut stream = SseStream::open(
            listening.addr,
            &request_head("2026-07-28", "subscriptions/listen", "listener-secret"),
            &listen_body(id),
        )
        .await;
        let ack = stream.next(Duration::from_secs(10)).await.expect("an acknowledgement");
        assert_eq!(ack["params"]["notifications"]["taskIds"][0], id.as_str(), "{ack}");
        let working = stream.next(Duration::from_secs(10)).await.expect("the task as it is");
        assert_eq!(working["params"]["status"], "working", "{working}");
        streams.push((id.clone(), stream));
    }
    let open = listening.metric("mcp_frontend_listens_open").await;
    let during = resident_mib(listening.pid());
    println!("== {open} listens open on replica B, one task each");
    println!(
        "resident memory: {before:.1} MiB before, {during:.1} MiB with the listens ({:.1} KiB a listen)",
        (during - before).max(0.0) * 1024.0 / listens as f64
    );
    let readers: Vec<_> = streams
        .into_iter()
        .map(|(id, mut stream)| {
            let told = told.clone();
            tokio::spawn(async move {
                let message = stream.next(Duration::from_secs(600)).await.expect("the completion");
                let at = Instant::now();
                assert_eq!(message["params"]["status"], "completed", "{message}");
                told.send((id, at)).expect("the bench listens");
                // The listen then ends with its result.
                let last = stream.next(Duration::from_secs(10)).await.expect("the listen's result");
                assert!(last.get("result").is_some(), "{last}");
            })
        })
        .collect();

    // Finish them one at a time, each told before the next is written.
    let mut pushed = Vec::with_capacity(listens);
    let status = succeeded();
    for id in &ids {
        let written = Instant::now();
        api.patch_status(id, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
        let (told_id, at) = completions.recv().await.expect("a completion");
        assert_eq!(&told_id, id, "told in the order written");
        pushed.push(at.duration_since(written).as_secs_f64() * 1e3);
    }
    for reader in readers {
        reader.await.unwrap();
    }
    let after = listening.metric("mcp_frontend_listens_open").await;

    // Pull, for reference: a 2025-11-25 tasks/result wait held on B, woken by the same write.
    let mut pulled = Vec::with_capacity(pull_ids.len());
    for id in &pull_ids {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/result", "params": {"taskId": id}});
        let (head, addr) = (request_head("2025-11-25", "tasks/result", "puller-secret"), listening.addr);
        let wait = tokio::spawn(async move {
            let mut stream = SseStream::open(addr, &head, &body.to_string()).await;
            loop {
                let message = stream.next(Duration::from_secs(60)).await.expect("the task's result");
                if message.get("id").is_some() {
                    return Instant::now();
                }
            }
        });
        // Registered before the write: its interest shows in the gauge.
        let deadline = Instant::now() + Duration::from_secs(10);
        while listening.metric("mcp_frontend_waiters").await < 1.0 {
            assert!(Instant::now() < deadline, "the tasks/result wait did not register");
        }
        let written = Instant::now();
        api.patch_status(id, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
        pulled.push(wait.await.unwrap().duration_since(written).as_secs_f64() * 1e3);
        let deadline = Instant::now() + Duration::from_secs(10);
        while listening.metric("mcp_frontend_waiters").await > 0.0 {
            assert!(Instant::now() < deadline, "the tasks/result wait did not end");
        }
    }

    println!("== status write on the API server to the answer on the other replica");
    let mut sorted = pushed.clone();
    sorted.sort_by(f64::total_cmp);
    summary("notifications/tasks (listen on B)", pushed);
    println!("{:<40} p95 {:8.3} ms", "  (same samples)", percentile(&sorted, 0.95));
    summary("tasks/result answer (wait on B)", pulled);
    println!("listens open after every task was told: {after}");
}
