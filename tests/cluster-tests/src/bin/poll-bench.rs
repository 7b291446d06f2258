//! Benchmark of polling at company scale (#66), against the cluster in `$KUBECONFIG`:
//!
//! `cargo run --release -p cluster-tests --bin poll-bench -- [TASKS] [CALLERS] [CONNECTIONS] [SECONDS]`
//!
//! One frontend (`--auth tokens`, CALLERS callers, default 100) holds TASKS
//! (default 10,000) tasks in its cache: each caller starts TASKS / CALLERS
//! workflows through it (`start_mining`, `wait_seconds: 0`; no operator
//! runs, so every task stays `working`, which is what a poller polls).
//! Then CONNECTIONS (default 64) keep-alive connections, each a caller's,
//! send authenticated 2025-11-25 `tasks/get` of that caller's own tasks in
//! turn for SECONDS (default 20), each answer checked. Printed: requests a
//! second, p50/p99/max latency, the frontend's CPU seconds over the window
//! (from `/proc`) and so requests a second per core of the frontend, and
//! its resident memory.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cluster_tests::bench::{FRONTEND_LIMITS_LIFTED, percentile};
use cluster_tests::mcp::FrontendProcess;
use cluster_tests::{TestNamespace, install_crd, resident_mib};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

fn request(token: &str, method: &str, params: Value, id: u64) -> String {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\
         Authorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// One keep-alive HTTP/1.1 connection.
struct Connection {
    stream: BufReader<TcpStream>,
}

impl Connection {
    async fn open(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Self { stream: BufReader::new(stream) }
    }

    /// Sends `request` and returns the last JSON-RPC message of the answer
    /// (a JSON body, or the `data:` lines of an event stream).
    async fn exchange(&mut self, request: &str) -> Value {
        self.stream.get_mut().write_all(request.as_bytes()).await.expect("send");
        let (mut length, mut chunked, mut status) = (None, false, 0);
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line).await.expect("a header line");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(code) = lower.strip_prefix("http/1.1 ") {
                status = code.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0);
            } else if let Some(value) = lower.strip_prefix("content-length:") {
                length = value.trim().parse::<usize>().ok();
            } else if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.stream.read_line(&mut size).await.expect("a chunk size");
                let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
                let mut chunk = vec![0; size + 2];
                self.stream.read_exact(&mut chunk).await.expect("a chunk");
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else if let Some(length) = length {
            body.resize(length, 0);
            self.stream.read_exact(&mut body).await.expect("the body");
        } else {
            // No length: the body ends with the connection (a refusal, say).
            self.stream.read_to_end(&mut body).await.expect("the body");
        }
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "{text}");
        let mut messages = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l.strip_prefix("data: ").unwrap_or(l)).ok());
        messages.next_back().unwrap_or_else(|| panic!("no JSON-RPC message in {text}"))
    }
}

/// CPU seconds (user + system) `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |t| t.iter().filter_map(|v| v.parse::<f64>().ok()).sum());
    ticks / 100.0
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let tasks: usize = args.next().map_or(10_000, |a| a.parse().expect("TASKS"));
    let callers: usize = args.next().map_or(100, |a| a.parse().expect("CALLERS"));
    let connections: usize = args.next().map_or(64, |a| a.parse().expect("CONNECTIONS"));
    let seconds: u64 = args.next().map_or(20, |a| a.parse().expect("SECONDS"));
    let ns = TestNamespace::new("poll-bench").await;
    install_crd(&ns.client).await;
    let tokens: Vec<String> = (0..callers).map(|i| format!("poll-bench-token-{i:04}-{}", ns.name)).collect();
    let lines: String = tokens.iter().enumerate().map(|(i, t)| format!("{t} caller-{i:04}\n")).collect();
    let frontend = FrontendProcess::start_with_tokens(&ns.name, &lines, FRONTEND_LIMITS_LIFTED).await;
    let addr = frontend.addr;

    // Each caller starts its share, on a connection of its own.
    let begun = Instant::now();
    let per_caller = tasks / callers;
    let owned: Vec<(String, Vec<String>)> = futures::stream::iter(tokens)
        .map(|token| async move {
            let mut connection = Connection::open(addr).await;
            let mut ids = Vec::with_capacity(per_caller);
            for i in 0..per_caller {
                let params = json!({"name": "start_mining",
                    "arguments": {"difficulty": 8, "blocks": 1, "wait_seconds": 0}});
                // A refusal that says to retry (the quota's check timed out
                // on a busy API server) is retried, as a caller would.
                let id = loop {
                    let answer =
                        connection.exchange(&request(&token, "tools/call", params.clone(), i as u64)).await;
                    if let Some(id) = answer["result"]["structuredContent"]["workflow_id"].as_str() {
                        break id.to_string();
                    }
                    let said = answer["result"]["content"][0]["text"].as_str().unwrap_or_default();
                    assert!(said.contains("retry"), "{answer:#}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                };
                ids.push(id);
            }
            (token, ids)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let started: usize = owned.iter().map(|(_, ids)| ids.len()).sum();
    println!("started {started} tasks for {callers} callers in {:.1} s", begun.elapsed().as_secs_f64());
    // The frontend's cache holds them all before the polls begin.
    let check = &owned[owned.len() - 1];
    let mut connection = Connection::open(addr).await;
    let last = check.1.last().expect("a task").clone();
    let answer = connection.exchange(&request(&check.0, "tasks/get", json!({"taskId": last}), 0)).await;
    assert_eq!(answer["result"]["status"], "working", "{answer:#}");

    let rss_before = resident_mib(frontend.pid());
    let cpu_before = cpu_seconds(frontend.pid());
    let window = Instant::now();
    let until = window + Duration::from_secs(seconds);
    let owned = std::sync::Arc::new(owned);
    let pollers = (0..connections).map(|c| {
        let owned = owned.clone();
        tokio::spawn(async move {
            let (token, ids) = &owned[c % owned.len()];
            let mut connection = Connection::open(addr).await;
            let mut latencies = Vec::new();
            let mut turn = c;
            while Instant::now() < until {
                let id = &ids[turn % ids.len()];
                turn += 1;
                let sent = Instant::now();
                let answer = connection
                    .exchange(&request(token, "tasks/get", json!({"taskId": id}), turn as u64))
                    .await;
                latencies.push(sent.elapsed().as_secs_f64() * 1e3);
                assert_eq!(answer["result"]["taskId"], id.as_str(), "{answer:#}");
            }
            latencies
        })
    });
    let mut latencies: Vec<f64> = Vec::new();
    for poller in futures::future::join_all(pollers).await {
        latencies.extend(poller.expect("a poller"));
    }
    let elapsed = window.elapsed().as_secs_f64();
    let cpu = cpu_seconds(frontend.pid()) - cpu_before;
    latencies.sort_by(f64::total_cmp);
    let count = latencies.len() as f64;
    println!(
        "tasks/get, {connections} connections of {callers} callers, {started} tasks cached: {count} in {elapsed:.1} s = \
         {:.0}/s; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        count / elapsed,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
    );
    println!(
        "frontend: {cpu:.1} CPU s over the window = {:.0} tasks/get per CPU second; resident {rss_before:.0} MiB \
         before, {:.0} MiB after",
        count / cpu.max(f64::EPSILON),
        resident_mib(frontend.pid())
    );
}
