//! Bounds before authentication that hold wherever callers connect from:
//! one anonymous client holding a thousand idle connections, on the same
//! address as the real callers (as behind a Service proxy, an Ingress or a
//! load balancer) and through a real reverse proxy (Debian's nginx), costs
//! the real callers no call; a forged X-Forwarded-For changes nothing.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use cluster_tests::mcp::{FrontendProcess, http_request, tokens_file};
use cluster_tests::{TestNamespace, eventually, install_crd};
use futures::future::join_all;
use serde_json::json;
use tokio::io::AsyncReadExt;

/// The attacker's idle connections: the default cap's worth.
const HELD: usize = 1_000;
/// Authenticated calls made while they are held; at most 1 % may fail.
const CALLS: usize = 120;

fn frontend_args(tokens: &std::path::Path, trusted: &str) -> Vec<String> {
    let mut args: Vec<String> =
        ["--auth", "tokens", "--tokens-file", tokens.to_str().unwrap()].map(String::from).to_vec();
    if !trusted.is_empty() {
        args.extend(["--trusted-proxies".to_string(), trusted.to_string()]);
    }
    args
}

/// `count` idle connections to `addr`, opened one after the other.
async fn hold(addr: std::net::SocketAddr, count: usize) -> Vec<tokio::net::TcpStream> {
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        if let Ok(stream) = tokio::net::TcpStream::connect(addr).await {
            held.push(stream);
        }
    }
    held
}

/// `CALLS` authenticated `tools/list` calls to `addr`, 20 at a time: the
/// status codes.
async fn real_calls(addr: std::net::SocketAddr) -> Vec<u16> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let head = "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
                Authorization: Bearer t-alice\r\n";
    let mut codes = Vec::with_capacity(CALLS);
    for _ in 0..CALLS / 20 {
        codes.extend(
            join_all((0..20).map(|_| http_request(addr, head, &body))).await.into_iter().map(|r| r.0),
        );
    }
    codes
}

fn failures(codes: &[u16]) -> usize {
    codes.iter().filter(|code| **code != 200).count()
}

#[tokio::test]
async fn a_thousand_idle_connections_on_the_callers_own_address_cost_them_no_call() {
    let ns = TestNamespace::new("proxy-direct").await;
    install_crd(&ns.client).await;
    let tokens = tokens_file("t-alice alice\n");
    // The defaults: 1,000 connections, 250 from one address.
    let args = frontend_args(&tokens, "");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let frontend = FrontendProcess::start(&ns.name, &args).await;
    // The attacker and the callers share 127.0.0.1, as all do behind a proxy.
    let mut held = hold(frontend.addr, HELD).await;
    let codes = real_calls(frontend.addr).await;
    assert!(failures(&codes) <= CALLS / 100, "real callers failed: {codes:?}");
    // The attacker held its address's share and no more: past it, each new
    // connection took the place of its oldest idle one (closed as any idle
    // keep-alive connection may be), and the callers' took theirs too.
    let displaced = frontend.metric("mcp_frontend_connections_displaced_total").await;
    assert!(displaced > (HELD - 250) as f64, "{displaced}");
    let still_open = join_all(held.iter_mut().map(|stream| async move {
        let mut byte = [0u8; 1];
        tokio::time::timeout(Duration::from_millis(500), stream.read(&mut byte)).await.is_err()
    }))
    .await;
    let still_open = still_open.into_iter().filter(|open| *open).count();
    assert!(still_open <= 250, "{still_open} of the attacker's connections stayed open, over its share");
    // A forged X-Forwarded-For from an untrusted peer changes nothing: the
    // peer's share is what counts (no trusted proxies are configured).
    let forged = "POST /mcp HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: 203.0.113.9\r\n\
                  Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n";
    let (code, _, _) = http_request(frontend.addr, forged, "{}").await;
    assert_eq!(code, 401, "an anonymous request is refused, whatever it says it forwards");
}

/// Debian's nginx in front of `upstream`, on a free port; killed on drop.
struct Nginx {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    _prefix: PathBuf,
}

impl Nginx {
    fn start(upstream: std::net::SocketAddr) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let prefix = std::env::temp_dir().join(format!("nginx-{port}"));
        std::fs::create_dir_all(&prefix).unwrap();
        let p = prefix.display();
        let config = format!(
            "daemon off; master_process off; worker_processes 1; worker_rlimit_nofile 8192;\n\
             pid {p}/nginx.pid; error_log {p}/error.log warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{ access_log off; client_body_temp_path {p}/body; proxy_temp_path {p}/proxy;\n\
               fastcgi_temp_path {p}/fastcgi; uwsgi_temp_path {p}/uwsgi; scgi_temp_path {p}/scgi;\n\
               server {{ listen 127.0.0.1:{port}; keepalive_timeout 120s;\n\
                 location / {{ proxy_pass http://{upstream}; proxy_http_version 1.1;\n\
                   proxy_set_header Connection \"\"; proxy_set_header Host $host;\n\
                   proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; proxy_buffering off; }} }} }}\n"
        );
        let path = prefix.join("nginx.conf");
        std::fs::write(&path, config).unwrap();
        // Debian installs it in /usr/sbin, which a non-root PATH may lack.
        let binary = ["/usr/sbin/nginx", "/usr/local/sbin/nginx"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .unwrap_or("nginx");
        let child = std::process::Command::new(binary)
            .args(["-p", &prefix.display().to_string(), "-c", &path.display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nginx (apt-get install nginx-light; .ci/run installs it)");
        Self { child, addr: format!("127.0.0.1:{port}").parse().unwrap(), _prefix: prefix }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn through_a_reverse_proxy_a_thousand_idle_connections_cost_real_callers_no_call() {
    let ns = TestNamespace::new("proxy-nginx").await;
    install_crd(&ns.client).await;
    let tokens = tokens_file("t-alice alice\n");
    let args = frontend_args(&tokens, "127.0.0.1/32");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let frontend = FrontendProcess::start(&ns.name, &args).await;
    let nginx = Nginx::start(frontend.addr);
    eventually("nginx to answer", Duration::from_secs(10), || async {
        tokio::net::TcpStream::connect(nginx.addr).await.ok().map(|_| ())
    })
    .await;
    let _held = hold(nginx.addr, HELD).await;
    // And the attacker's unauthenticated requests keep coming through it.
    let anonymous = "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n";
    let refused = join_all((0..100).map(|_| http_request(nginx.addr, anonymous, "{}"))).await;
    assert!(refused.iter().all(|(code, _, _)| *code == 401), "{:?}", refused.first());
    let codes = real_calls(nginx.addr).await;
    assert!(failures(&codes) <= CALLS / 100, "real callers failed through the proxy: {codes:?}");
}
