//! Benchmark of defined tools (`McpTool`s), against the cluster in `$KUBECONFIG`:
//!
//! `cargo run --release -p cluster-tests --bin tool-bench -- [CALLS] [TOOLS]`
//!
//! 2. The frontend's own cost of a tool call: CALLS calls of a defined tool
//!    whose wait budget is 0 (arguments checked against its inputSchema, the
//!    quota ledger, one ToolRun created, the answer `running`), alternating
//!    with CALLS `start_mining` calls with `wait_seconds: 0` (the same path
//!    for a workflow); p50/p99 and their ratio. No operator runs, so nothing
//!    but the frontend and the API server is measured.
//! 1. TOOLS (default 100) McpTools defined, each with a ~1 KiB inputSchema:
//!    the frontend's resident memory before and after it lists them all,
//!    and `tools/list` with them beside `tools/list` with none.
//!
//! Every request is plain HTTP/1.1 with `Connection: close`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cluster_tests::bench::summary;
use cluster_tests::mcp::FrontendProcess;
use cluster_tests::{TestNamespace, eventually, install_crd, resident_mib};
use kube::api::{Api, PostParams};
use mining_api::McpTool;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn post(addr: SocketAddr, method: &str, params: Value) -> (Duration, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let sent = Instant::now();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    (sent.elapsed(), response)
}

fn tool(name: &str, properties: usize) -> McpTool {
    let properties: serde_json::Map<String, Value> = (0..properties)
        .map(|i| {
            (
                format!("field_{i}"),
                json!({"type": "string", "description": "one of the tool's inputs", "maxLength": 64}),
            )
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "McpTool",
        "metadata": {"name": name},
        "spec": {
            "description": "A tool of the benchmark; it adds numbers.",
            "inputSchema": {"type": "object", "properties": properties},
            "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}},
            "waitBudgetSeconds": 0,
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "tool", "image": "localhost/mining-operator/sum-numbers:dev"}]}}}},
        },
    }))
    .unwrap()
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let calls: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let tools: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let ns = TestNamespace::new("tool-bench").await;
    install_crd(&ns.client).await;
    let frontend = FrontendProcess::start(&ns.name, cluster_tests::bench::FRONTEND_LIMITS_LIFTED).await;
    let addr: SocketAddr =
        frontend.url().trim_start_matches("http://").trim_end_matches("/mcp").parse().unwrap();
    let api: Api<McpTool> = ns.api();

    // 1a. Memory and tools/list before any tool is defined.
    let idle_mib = resident_mib(frontend.pid());
    let mut list_none = Vec::new();
    for _ in 0..200 {
        list_none.push(post(addr, "tools/list", json!({})).await.0.as_secs_f64() * 1000.0);
    }

    // 1b. TOOLS definitions: memory and tools/list.
    api.create(&PostParams::default(), &tool("bench-tool", 4)).await.unwrap();
    for i in 1..tools {
        api.create(&PostParams::default(), &tool(&format!("bench-tool-{i}"), 24)).await.unwrap();
    }
    let last = format!("bench-tool-{}", tools - 1);
    eventually("every tool to be listed", Duration::from_secs(60), || async {
        post(addr, "tools/list", json!({})).await.1.contains(&format!("\"{last}\"")).then_some(())
    })
    .await;
    // Before the listings below: their answers (4 KiB a tool) would be counted too.
    let defined_mib = resident_mib(frontend.pid());
    let mut list_many = Vec::new();
    for _ in 0..200 {
        list_many.push(post(addr, "tools/list", json!({})).await.0.as_secs_f64() * 1000.0);
    }
    let none_p50 = summary("tools/list, no tools defined", list_none);
    let many_p50 = summary(&format!("tools/list, {tools} tools defined"), list_many);
    println!("tools/list with {tools} tools / with none: {:.2}x", many_p50 / none_p50);
    let (_, listed) = post(addr, "tools/list", json!({})).await;
    println!("tools/list answer with {tools} tools: {} KiB", listed.len() / 1024);
    println!(
        "frontend resident memory: {idle_mib:.1} MiB idle, {defined_mib:.1} MiB with {tools} tools defined (+{:.1} KiB a tool)",
        (defined_mib - idle_mib) * 1024.0 / tools as f64
    );

    // 2. A defined tool's call beside start_mining, both answering at once.
    let (mut tool_ms, mut mining_ms) = (Vec::new(), Vec::new());
    for i in 0..calls {
        let (took, answer) = post(
            addr,
            "tools/call",
            json!({"name": "bench-tool", "arguments": {"field_0": format!("call {i}")}}),
        )
        .await;
        assert!(
            answer.contains("\\\"status\\\":\\\"running\\\"") || answer.contains("\"status\":\"running\""),
            "{answer}"
        );
        tool_ms.push(took.as_secs_f64() * 1000.0);
        let (took, answer) = post(
            addr,
            "tools/call",
            json!({"name": "start_mining", "arguments": {"difficulty": 8, "wait_seconds": 0}}),
        )
        .await;
        assert!(answer.contains("running"), "{answer}");
        mining_ms.push(took.as_secs_f64() * 1000.0);
    }
    let tool_p50 = summary("defined tool call (budget 0)", tool_ms);
    let mining_p50 = summary("start_mining (wait_seconds 0)", mining_ms);
    println!("tool call / start_mining: {:.2}x", tool_p50 / mining_p50);
}
