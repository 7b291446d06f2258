//! Benchmark of the MCP frontend, against the cluster in `$KUBECONFIG`:
//!
//! `cargo run --release -p cluster-tests --bin frontend-bench -- [ROUNDS] [WAITERS]`
//!
//! 1. `get_mining_result` of a finished workflow (answered from the cache)
//!    beside a bare `GET /healthz`, alternating, ROUNDS each (default 2000):
//!    p50/p99 and their ratio, the cost of the tool path; interleaved with
//!    them, `tasks/get` of the same workflow on 2025-11-25 (this crate's task
//!    layer) and on 2026-07-28 (rmcp's extension path).
//! 2. WAITERS (default 1000) concurrent `get_mining_result` calls waiting on
//!    one workflow that no operator advances; the frontend's resident memory
//!    and the API server's registered MiningWorkflow watchers while they wait;
//!    then the bench itself writes a valid Succeeded status and measures how
//!    long each waiter takes to answer (the wake-up latency).
//!    The same with WAITERS 2025-11-25 `tasks/result` calls.
//! 3. `start_mining` of a 4-block chain at difficulty 8 (mining takes
//!    microseconds) end to end, split into the frontend's part (the same call
//!    with `wait_seconds: 0`) and the per-block interval seen through progress
//!    notifications (operator reaction + Pod start + mining).
//!
//! Every request is plain HTTP/1.1 with `Connection: close` (the health check
//! too), so connection set-up cancels out of the ratio.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Every call of the bench comes from this one address: its share of the
/// connection pool is lifted to the pool's size.
const ONE_SOURCE: &[&str] = &["--max-connections-per-source", "100000"];

use cluster_tests::bench::summary;
use cluster_tests::mcp::FrontendProcess;
use cluster_tests::{OperatorProcess, TestNamespace, install_crd};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use mining_api::MiningWorkflow;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Sends one request and returns the time of each SSE `data:` line (or of the
/// JSON body) after the request was sent, with the line's JSON.
async fn exchange(addr: SocketAddr, request: &str) -> Vec<(Duration, Value)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let sent = Instant::now();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    let mut messages = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        let payload = line.strip_prefix("data: ").unwrap_or(&line);
        if payload.starts_with('{')
            && let Ok(value) = serde_json::from_str::<Value>(payload)
        {
            messages.push((sent.elapsed(), value));
        }
    }
    messages
}

fn tool_call(tool: &str, arguments: Value, progress: bool) -> String {
    let mut params = json!({"name": tool, "arguments": arguments});
    if progress {
        params["_meta"] = json!({"progressToken": "bench"});
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A raw JSON-RPC request as protocol `version`, with the 2026-07-28 routing
/// headers and request `_meta` when `version` is that one.
fn rpc(version: &str, method: &str, mut params: Value) -> String {
    let mut headers = format!("MCP-Protocol-Version: {version}\r\n");
    if version == "2026-07-28" {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientInfo": {"name": "frontend-bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        });
        headers.push_str(&format!("Mcp-Method: {method}\r\n"));
        if let Some(name) = params.get("taskId").or(params.get("name")).and_then(Value::as_str) {
            headers.push_str(&format!("Mcp-Name: {name}\r\n"));
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{headers}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The last JSON-RPC result of an exchange.
fn result(messages: &[(Duration, Value)]) -> &Value {
    &messages.iter().rev().find(|(_, m)| m.get("result").is_some()).expect("a result").1["result"]
}

fn outcome(messages: &[(Duration, Value)]) -> &Value {
    &messages.iter().rev().find(|(_, m)| m.get("result").is_some()).expect("a result").1["result"]["structuredContent"]
}

fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn registered_watchers() -> String {
    let output = std::process::Command::new("kubectl").args(["get", "--raw", "/metrics"]).output().unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.starts_with("apiserver_registered_watchers") && l.contains("MiningWorkflow"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(2000, |a| a.parse().expect("ROUNDS"));
    let waiters: usize = args.next().map_or(1000, |a| a.parse().expect("WAITERS"));
    let ns = TestNamespace::new("frontend-bench").await;
    install_crd(&ns.client).await;
    let frontend = FrontendProcess::start(&ns.name, ONE_SOURCE).await;
    let addr = frontend.addr;

    // 3 first, while an operator runs: end-to-end start_mining.
    {
        let _operator = OperatorProcess::start(&ns.name, &[]);
        let mut totals = Vec::new();
        let mut frontend_only = Vec::new();
        let mut block_intervals = Vec::new();
        for _ in 0..10 {
            let messages = exchange(
                addr,
                &tool_call("start_mining", json!({"difficulty": 8, "blocks": 4, "wait_seconds": 20}), true),
            )
            .await;
            assert_eq!(outcome(&messages)["status"], "completed");
            totals.push(messages.last().unwrap().0.as_secs_f64() * 1e3);
            let progress: Vec<f64> = messages
                .iter()
                .filter(|(_, m)| m["method"] == "notifications/progress")
                .map(|(t, _)| t.as_secs_f64() * 1e3)
                .collect();
            block_intervals.extend(progress.windows(2).map(|w| w[1] - w[0]));
            let messages = exchange(
                addr,
                &tool_call("start_mining", json!({"difficulty": 8, "blocks": 4, "wait_seconds": 0}), false),
            )
            .await;
            frontend_only.push(messages.last().unwrap().0.as_secs_f64() * 1e3);
        }
        println!("== start_mining, 4 blocks at difficulty 8, end to end");
        summary("start_mining (wait until completed)", totals);
        summary("  frontend part (wait_seconds 0)", frontend_only);
        summary("  per block: operator + Pod + mining", block_intervals);
    }

    // 1: the tool path beside /healthz.
    let finished = exchange(
        addr,
        &tool_call("list_mining_workflows", json!({"status": "completed", "limit": 1}), false),
    )
    .await;
    let id = outcome(&finished)["workflows"][0]["workflow_id"].as_str().unwrap().to_string();
    let get = tool_call("get_mining_result", json!({"workflow_id": id}), false);
    let health = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".to_string();
    let task_get_2025 = rpc("2025-11-25", "tasks/get", json!({"taskId": id}));
    let task_get_2026 = rpc("2026-07-28", "tasks/get", json!({"taskId": id}));
    let (mut tool_times, mut health_times) = (Vec::new(), Vec::new());
    let (mut core_times, mut extension_times) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        let messages = exchange(addr, &get).await;
        tool_times.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(outcome(&messages)["status"], "completed");
        let started = Instant::now();
        exchange(addr, &health).await;
        health_times.push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        let messages = exchange(addr, &task_get_2025).await;
        core_times.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(result(&messages)["status"], "completed");
        let started = Instant::now();
        let messages = exchange(addr, &task_get_2026).await;
        extension_times.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(result(&messages)["status"], "completed");
    }
    println!("== one finished workflow read four ways ({rounds} rounds, interleaved)");
    let tool_p50 = summary("get_mining_result (completed)", tool_times);
    let health_p50 = summary("GET /healthz", health_times);
    let core_p50 = summary("tasks/get 2025-11-25 (task layer)", core_times);
    let extension_p50 = summary("tasks/get 2026-07-28 (rmcp extension)", extension_times);
    println!("{:<40} {:.2}x at p50", "get_mining_result / healthz", tool_p50 / health_p50);
    println!("{:<40} {:.2}x at p50", "tasks/get 2025 / get_mining_result", core_p50 / tool_p50);
    println!("{:<40} {:.2}x at p50", "tasks/get 2026 / get_mining_result", extension_p50 / tool_p50);

    // 2: many waiters on one workflow nobody mines, as get_mining_result
    // calls and as 2025-11-25 tasks/result calls, each on a fresh process so
    // that the memory of one run does not hide in the heap of the other.
    let api: Api<MiningWorkflow> = ns.api();
    drop(frontend);
    for kind in ["tasks/result", "get_mining_result"] {
        let frontend = FrontendProcess::start(&ns.name, ONE_SOURCE).await;
        let addr = frontend.addr;
        let started = exchange(
            addr,
            &tool_call("start_mining", json!({"difficulty": 8, "blocks": 1, "wait_seconds": 0}), false),
        )
        .await;
        let id = outcome(&started)["workflow_id"].as_str().unwrap().to_string();
        let wait = match kind {
            "get_mining_result" => {
                tool_call("get_mining_result", json!({"workflow_id": id, "wait_seconds": 20}), false)
            }
            _ => rpc("2025-11-25", "tasks/result", json!({"taskId": id})),
        };
        waiting_calls(&frontend, &api, &id, kind, &wait, waiters).await;
    }
}

/// Opens `waiters` concurrent `request`s that wait on workflow `id`, reports
/// memory and watches while they wait, then finishes the workflow as the
/// operator would and measures each waiter's wake-up.
async fn waiting_calls(
    frontend: &FrontendProcess,
    api: &Api<MiningWorkflow>,
    id: &str,
    kind: &str,
    request: &str,
    waiters: usize,
) {
    let addr = frontend.addr;
    let before = resident_kib(frontend.pid());
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let request = request.to_string();
            tokio::spawn(async move {
                let messages = exchange(addr, &request).await;
                (Instant::now(), outcome(&messages)["status"].as_str().unwrap_or_default().to_string())
            })
        })
        .collect();
    // All registered: the frontend's own gauge says so.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, metrics) = frontend.get("/metrics").await;
        let waiting: usize =
            metrics.lines().find_map(|l| l.strip_prefix("mcp_frontend_waiters ")?.parse().ok()).unwrap_or(0);
        if waiting >= waiters || Instant::now() > deadline {
            println!("== {waiting} concurrent {kind} waits on one workflow");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let during = resident_kib(frontend.pid());
    println!(
        "resident memory: {before} KiB before, {during} KiB with the waits ({:.1} KiB a wait)",
        (during.saturating_sub(before)) as f64 / waiters as f64
    );
    println!("API server watchers: {}", registered_watchers());
    // Finish it the way the operator would: a verified block and phase Succeeded.
    let found = miner::mine_block(1, mining_api::GENESIS, 8, 1).unwrap();
    let now = Timestamp::now().to_string();
    let status = json!({"status": {"phase": "Succeeded", "progress": "1/1", "startedAt": now, "finishedAt": now, "blocks": [{
        "index": 1, "nonce": found.nonce, "hash": miner::hex_upper(&found.digest), "attempts": found.nonce + 1, "jobName": "bench"}]}});
    let finished_at = Instant::now();
    api.patch_status(id, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let mut wakeups = Vec::new();
    for task in tasks {
        let (answered, status) = task.await.unwrap();
        assert_eq!(status, "completed");
        wakeups.push(answered.duration_since(finished_at).as_secs_f64() * 1e3);
    }
    summary("wake-up after the status write", wakeups);
}
