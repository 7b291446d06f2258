//! MCP task clients this project did not write, driven through scripts in
//! tests/mcp-clients: the 2025-11-25 task APIs of the TypeScript SDK 1.x and
//! the Python SDK 1.x, the 2026-07-28 Tasks extension package over the
//! TypeScript client 2.x, the Inspector's session CLI (`mcpdo`), and the
//! conformance suite's task scenarios.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::mcp::{client_script, clients_dir, collect, node22};

/// Which client drives a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskClient {
    /// `client.experimental.tasks` of `@modelcontextprotocol/sdk` 1.x.
    TypeScript2025,
    /// `session.experimental` of the Python `mcp` 1.x.
    Python2025,
    /// `@modelcontextprotocol/ext-tasks` over `@modelcontextprotocol/client` 2.x.
    Extension2026,
}

impl TaskClient {
    pub const CORE_2025: [TaskClient; 2] = [TaskClient::TypeScript2025, TaskClient::Python2025];

    /// Runs one command of the client's script and returns its JSON document.
    pub async fn run(self, url: &str, token: Option<&str>, progress: bool, args: &[&str]) -> Value {
        let script = match self {
            Self::TypeScript2025 => "ts-tasks-2025.mjs",
            Self::Python2025 => "py_tasks.py",
            Self::Extension2026 => "ts-tasks-2026.mjs",
        };
        let child = client_script(script, url, token, progress, args).spawn().expect("start the task client");
        collect(self, child).await
    }

    /// Runs one command of the client's script with its tasks made of `tool`
    /// (a defined tool) instead of `start_mining`.
    pub async fn run_tool(self, tool: &str, url: &str, token: Option<&str>, args: &[&str]) -> Value {
        let script = match self {
            Self::TypeScript2025 => "ts-tasks-2025.mjs",
            Self::Python2025 => "py_tasks.py",
            Self::Extension2026 => "ts-tasks-2026.mjs",
        };
        let mut command = client_script(script, url, token, false, args);
        command.env("MCP_TOOL", tool);
        collect(self, command.spawn().expect("start the task client")).await
    }

    /// [`TaskClient::run_tool`] with the client answering what a task asks
    /// from `answers` (`{"elicitation": RESULT, "sampling": RESULT}`), through
    /// the SDK's own handlers (the TypeScript clients only).
    pub async fn run_tool_answering(
        self,
        tool: &str,
        url: &str,
        token: Option<&str>,
        answers: &Value,
        args: &[&str],
    ) -> Value {
        let script = match self {
            Self::TypeScript2025 => "ts-tasks-2025.mjs",
            Self::Extension2026 => "ts-tasks-2026.mjs",
            Self::Python2025 => panic!("the Python task client answers nothing"),
        };
        let mut command = client_script(script, url, token, false, args);
        command.env("MCP_TOOL", tool).env("MCP_ANSWERS", answers.to_string());
        collect(self, command.spawn().expect("start the task client")).await
    }

    /// Creates a `start_mining` task and returns its id; panics with the document otherwise.
    pub async fn start(self, url: &str, token: Option<&str>, arguments: &Value) -> String {
        let document = self.run(url, token, false, &["start", &arguments.to_string()]).await;
        let id = match self {
            Self::Extension2026 => &document["taskId"],
            _ => &document["task"]["taskId"],
        };
        id.as_str().unwrap_or_else(|| panic!("{self:?} created no task: {document:#}")).to_string()
    }
}

/// The Inspector's session CLI (`mcpdo`) with a private daemon of its own.
pub struct Mcpdo {
    env: Vec<(String, String)>,
    home: PathBuf,
}

impl Mcpdo {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(node22());
        command
            .arg(
                clients_dir()
                    .join("node_modules/@modelcontextprotocol/inspector/clients/mcpdo/build/mcp-bin.js"),
            )
            .args(args)
            .env("HOME", &self.home)
            .env("MCP_CATALOG_PATH", self.home.join("catalog.json"))
            .env("MCP_INSPECTOR_SECRET_STORE", "memory")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .kill_on_drop(true);
        command
    }

    /// (success, stdout, stderr) of one mcpdo command.
    async fn output(&self, args: &[&str]) -> (bool, String, String) {
        let output = tokio::time::timeout(Duration::from_secs(120), self.command(args).output())
            .await
            .expect("mcpdo finished")
            .expect("mcpdo ran");
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).to_string();
        (output.status.success(), text(&output.stdout), text(&output.stderr))
    }

    /// Starts a private daemon and connects it to `url` as connection `name`
    /// in the given protocol era (`legacy` or `modern`).
    pub async fn connect(url: &str, name: &str, era: &str) -> Self {
        let home = std::env::temp_dir().join(format!("mcpdo-{}-{name}-{era}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        let mut mcpdo = Self { env: Vec::new(), home };
        let (ok, exports, stderr) = mcpdo.output(&["private"]).await;
        assert!(ok, "mcpdo private: {exports}{stderr}");
        for line in exports.lines() {
            if let Some((key, value)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) {
                mcpdo.env.push((key.to_string(), value.trim_matches('\'').to_string()));
            }
        }
        let target = format!("@{name}");
        let (ok, stdout, stderr) =
            mcpdo.output(&["--format", "json", "connect", &target, url, "--era", era]).await;
        assert!(ok, "mcpdo connect: {stdout}{stderr}");
        mcpdo.env.push(("MCPDO_CONNECTION".into(), name.into()));
        mcpdo
    }

    /// Runs one command against the connection; its JSON output (or the error document).
    pub async fn run(&self, args: &[&str]) -> Value {
        let name = self.env.iter().find(|(k, _)| k == "MCPDO_CONNECTION").map(|(_, v)| v.clone()).unwrap();
        let mut full = vec!["--format", "json", "--connection", &name];
        full.extend_from_slice(args);
        let (_, stdout, stderr) = self.output(&full).await;
        // Results go to stdout, error documents to stderr (after any warnings).
        serde_json::from_str(&stdout)
            .ok()
            .or_else(|| stderr.lines().rev().find_map(|line| serde_json::from_str(line).ok()))
            .unwrap_or_else(|| panic!("mcpdo printed no JSON: {stdout}{stderr}"))
    }
}

impl Drop for Mcpdo {
    fn drop(&mut self) {
        // Stops the private daemon; best effort.
        let _ = std::process::Command::new(node22())
            .arg(
                clients_dir()
                    .join("node_modules/@modelcontextprotocol/inspector/clients/mcpdo/build/mcp-bin.js"),
            )
            .args(["daemon", "stop"])
            .env("HOME", &self.home)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// Runs one conformance scenario against `url`; returns its checks
/// (`{id, status, errorMessage}`) as the suite recorded them.
pub async fn conformance_checks(url: &str, scenario: &str) -> Vec<Value> {
    let dir = clients_dir();
    let results = std::env::temp_dir().join(format!("conformance-{}-{scenario}", std::process::id()));
    let _ = std::fs::remove_dir_all(&results);
    let output = tokio::process::Command::new(node22())
        .arg(dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", url, "--scenario", scenario, "-o"])
        .arg(&results)
        .kill_on_drop(true)
        .output();
    let output =
        tokio::time::timeout(Duration::from_secs(300), output).await.expect("the suite finished").unwrap();
    let checks = std::fs::read_dir(&results)
        .ok()
        .and_then(|mut entries| entries.next())
        .and_then(|entry| std::fs::read_to_string(entry.ok()?.path().join("checks.json")).ok())
        .and_then(|text| serde_json::from_str::<Vec<Value>>(&text).ok())
        .unwrap_or_else(|| {
            panic!(
                "scenario {scenario} recorded no checks: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let _ = std::fs::remove_dir_all(results);
    checks
}
