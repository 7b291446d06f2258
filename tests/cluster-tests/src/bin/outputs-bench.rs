//! Benchmark of reading a tool run's file, against the cluster in `$KUBECONFIG`
//! (with the image `localhost/mining-operator/report:dev`):
//!
//! `cargo run --release -p cluster-tests --bin outputs-bench -- [ROWS] [READS]`
//!
//! The example `report` tool writes a CSV of ROWS rows (default 1,300,000:
//! just over 16 MiB) into the embedded store. Then, READS times (default 5)
//! each, side by side: the file read straight from the store's directory,
//! and the same file through `resources/read` (one plain HTTP/1.1 request to
//! the frontend, which streams it from the operator), timed to the last
//! byte. Meanwhile the frontend's and the operator's resident memory is
//! sampled every 10 ms: the peak over what each held before the read says
//! whether a file is streamed or held whole.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cluster_tests::mcp::Sdk;
use cluster_tests::tools::{ALICE, call, define, settle, setup_with_args};
use cluster_tests::{free_port, resident_mib};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Reads the whole response of a `resources/read` of `uri`; its length.
async fn read_through_mcp(addr: SocketAddr, uri: &str) -> usize {
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri}}).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\
         Authorization: Bearer {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        ALICE.unwrap(),
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = vec![0u8; 256 * 1024];
    let (mut total, mut head) = (0usize, Vec::new());
    loop {
        let n = stream.read(&mut buffer).await.unwrap();
        if n == 0 {
            break;
        }
        if head.len() < 512 {
            head.extend_from_slice(&buffer[..n.min(512)]);
        }
        total += n;
    }
    assert!(String::from_utf8_lossy(&head).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    total
}

/// Reads the file from the operator's outputs server (the store's own HTTP
/// face) with a read token; the body's length.
async fn read_from_store_server(addr: SocketAddr, path: &str, token: &str, expires: u64) -> usize {
    let request = format!(
        "GET {path}?expires={expires} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = vec![0u8; 256 * 1024];
    let mut total = 0usize;
    loop {
        let n = stream.read(&mut buffer).await.unwrap();
        if n == 0 {
            return total;
        }
        total += n;
    }
}

fn read_directly(path: &Path) -> usize {
    use std::io::Read;
    let mut file = std::fs::File::open(path).unwrap();
    let mut buffer = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        let n = file.read(&mut buffer).unwrap();
        if n == 0 {
            return total;
        }
        total += n;
    }
}

/// Samples `pid`'s resident memory until `done`; the peak, in MiB.
fn sample(pid: u32, done: Arc<AtomicBool>) -> std::thread::JoinHandle<f64> {
    std::thread::spawn(move || {
        let mut peak = 0f64;
        while !done.load(Ordering::Relaxed) {
            peak = peak.max(resident_mib(pid));
            std::thread::sleep(Duration::from_millis(10));
        }
        peak
    })
}

fn stored_file(dir: &Path, name: &str) -> PathBuf {
    fn walk(dir: &Path, name: &str) -> Option<PathBuf> {
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() && !path.ends_with(".meta") {
                if let Some(found) = walk(&path, name) {
                    return Some(found);
                }
            } else if path.file_name().is_some_and(|f| f == name) {
                return Some(path);
            }
        }
        None
    }
    walk(dir, name).expect("the stored file")
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let rows: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_300_000);
    let reads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let dir = std::env::temp_dir().join(format!("outputs-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("file://{}", dir.display());
    let addr = free_port().to_string();
    let base = format!("http://{addr}");
    let operator_args = ["--outputs-store", &store, "--outputs-url", &base, "--outputs-addr", &addr];
    let (ns, operator, frontend) =
        setup_with_args("outputs-bench", &operator_args, &["--outputs-url", &base]).await;
    let url = frontend.url();
    let report: mining_api::McpTool = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "McpTool", "metadata": {"name": "report"},
        "spec": {"description": "report", "inputSchema": {"type": "object", "properties": {"rows": {"type": "integer"}}},
            "waitBudgetSeconds": 5,
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "tool", "image": "localhost/mining-operator/report:dev"}]}}}}}
    }))
    .unwrap();
    define(&ns, &url, report).await;
    let started = call(Sdk::TypeScript, &url, ALICE, "report", json!({"rows": rows})).await;
    let id = started["workflow_id"].as_str().unwrap().to_string();
    let done = settle(Sdk::TypeScript, &url, ALICE, &id).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    let file = done["files"].as_array().unwrap().iter().find(|f| f["name"] == "data.csv").unwrap().clone();
    let (uri, size) = (file["uri"].as_str().unwrap().to_string(), file["size"].as_u64().unwrap() as usize);
    let path = stored_file(&dir, "data.csv");
    let mcp_addr: SocketAddr = url.trim_start_matches("http://").trim_end_matches("/mcp").parse().unwrap();
    println!("file: {size} bytes ({:.1} MiB), {reads} reads each way", size as f64 / 1048576.0);
    let run: mining_api::ToolRun = kube::Api::namespaced(ns.client.clone(), &ns.name).get(&id).await.unwrap();
    let ids = [ns.name.as_str(), id.as_str(), run.metadata.uid.as_deref().unwrap()];
    let keys = mining_api::ownership::OwnershipKeys::from_files(
        &cluster_tests::mcp::ownership_key_file(&ns.name),
        None,
    )
    .unwrap();
    let store_addr: SocketAddr = addr.parse().unwrap();
    let store_path = format!("/v1/outputs/{}/{}/{}/data.csv", ids[0], ids[1], ids[2]);
    let mut served = Vec::new();
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    let (mut frontend_growth, mut operator_growth) = (0f64, 0f64);
    for _ in 0..reads {
        let started = Instant::now();
        assert_eq!(read_directly(&path), size);
        direct.push(started.elapsed().as_secs_f64());
        let expires =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 60;
        let token = keys.outputs_read_token(ids, "data.csv", expires);
        let started = Instant::now();
        assert!(read_from_store_server(store_addr, &store_path, &token, expires).await > size);
        served.push(started.elapsed().as_secs_f64());
        let (frontend_before, operator_before) = (resident_mib(frontend.pid()), resident_mib(operator.pid()));
        let stop = Arc::new(AtomicBool::new(false));
        let samplers = (sample(frontend.pid(), stop.clone()), sample(operator.pid(), stop.clone()));
        let started = Instant::now();
        let bytes = read_through_mcp(mcp_addr, &uri).await;
        through.push(started.elapsed().as_secs_f64());
        stop.store(true, Ordering::Relaxed);
        let (frontend_peak, operator_peak) = (samplers.0.join().unwrap(), samplers.1.join().unwrap());
        assert!(bytes > size * 4 / 3, "the whole file came (base64): {bytes} bytes");
        frontend_growth = frontend_growth.max(frontend_peak - frontend_before);
        operator_growth = operator_growth.max(operator_peak - operator_before);
    }
    direct.sort_by(f64::total_cmp);
    served.sort_by(f64::total_cmp);
    through.sort_by(f64::total_cmp);
    let mib = size as f64 / 1048576.0;
    let (direct_median, through_median) = (direct[reads / 2], through[reads / 2]);
    println!("store directly:      median {:.1} ms, {:.0} MiB/s", direct_median * 1e3, mib / direct_median);
    let served_median = served[reads / 2];
    println!("the store's server:  median {:.1} ms, {:.0} MiB/s", served_median * 1e3, mib / served_median);
    println!("resources/read:      median {:.1} ms, {:.0} MiB/s", through_median * 1e3, mib / through_median);
    println!("ratio (resources/read / the store's server): {:.2}x the time", through_median / served_median);
    println!(
        "peak resident growth during a read: frontend {frontend_growth:.1} MiB, operator {operator_growth:.1} MiB"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
