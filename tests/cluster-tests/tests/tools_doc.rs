//! docs/TOOLS.md's "Your first tool in five minutes", as printed: the Python
//! tool runs locally with the documented command and writes the documented
//! result; then, against a real install of the chart, every step of the
//! section runs verbatim — the image built with the printed command, the
//! author bound by an administrator with the printed line, the tool applied
//! and listed as that author, and called with the printed Inspector command
//! — and "Debugging your tool"'s role reads Pods but no runs. Only what
//! stands for the reader's machine is replaced: the release's names (README's
//! `mining` release is this test's), the forwarded port (the Service's
//! address), and `kind load` (this cluster's node reads podman's store).
//! The Python base image is made from this machine's Python, which reaches
//! no registry (`cluster_tests::docs::stand_in_python_base_image`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cluster_tests::eventually;
use cluster_tests::mcp::{clients_dir, node22};
use cluster_tests::release::Release;
use serde_json::{Value, json};

const SECTION: &str = "## Your first tool in five minutes";

/// The fenced blocks of `language` in the section, in order.
fn blocks(language: &str) -> Vec<String> {
    cluster_tests::docs::blocks("docs/TOOLS.md", SECTION, language)
}

#[test]
fn the_first_tool_runs_locally_as_printed() {
    let dir = std::env::temp_dir().join(format!("first-tool-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let python = blocks("python");
    assert_eq!(python.len(), 1, "one tool file");
    std::fs::write(dir.join("greet.py"), &python[0]).unwrap();
    let local = &blocks("sh")[0];
    assert!(local.contains("python3 greet.py"), "{local}");
    let output = std::process::Command::new("sh").arg("-ec").arg(local).current_dir(&dir).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("MCP_PROGRESS greeting"), "the status line: {stdout}");
    let result: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result, json!({"greeting": "Hello, Ada!"}));
    let containerfile = &blocks("dockerfile")[0];
    assert!(
        containerfile.contains("COPY greet.py") && containerfile.contains("USER 65532"),
        "{containerfile}"
    );
}

/// Runs one printed command line in `dir` with `kubeconfig` and the extra
/// environment `env`; returns (success, stdout + stderr).
fn sh(line: &str, dir: &Path, kubeconfig: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let path =
        format!("{}:{}", node22().parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("sh")
        .arg("-ec")
        .arg(line)
        .current_dir(dir)
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// What `kubectl port-forward service/… 8080:80` gives the reader: the
/// frontend at a loopback address (the Host a port-forward sends), here to
/// the Service's address (this cluster's node serves no port-forward).
async fn port_forward(service_url: &str) -> String {
    let target = service_url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let target = if target.contains(':') { target } else { format!("{target}:80") };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    format!("http://127.0.0.1:{port}/mcp")
}

/// The JSON document the Inspector printed (its warnings follow it).
fn first_json(printed: &str) -> Value {
    let mut documents = serde_json::Deserializer::from_str(printed.trim_start()).into_iter::<Value>();
    match documents.next() {
        Some(Ok(document)) => document,
        _ => panic!("the Inspector printed no JSON: {printed}"),
    }
}

/// A kubeconfig that acts as `user` (impersonated by this test's admin
/// credentials): a person the administrator bound, and nothing more.
fn kubeconfig_as(user: &str, dir: &Path) -> std::path::PathBuf {
    let view =
        Command::new("kubectl").args(["config", "view", "--raw", "--minify", "-o", "json"]).output().unwrap();
    assert!(view.status.success(), "{}", String::from_utf8_lossy(&view.stderr));
    let mut config: Value = serde_json::from_slice(&view.stdout).unwrap();
    config["users"][0]["user"]["as"] = json!(user);
    let file = dir.join("author-kubeconfig.json");
    std::fs::write(&file, config.to_string()).unwrap();
    file
}

#[ignore = "needs the local cluster, its node agent and podman's store; tests/run.sh runs it there"]
// Several threads: the commands block one while the port-forward serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_author_follows_the_first_tool_section_verbatim_on_an_install_of_the_chart() {
    let release =
        Release::install("author", &["--set", "frontend.replicas=1", "--set", "operator.replicas=1"]).await;
    let (service, _) = release.frontend_url().await;
    let url = port_forward(&service).await;
    let dir = std::env::temp_dir().join(format!("author-path-{}", release.ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("greet.py"), &blocks("python")[0]).unwrap();
    std::fs::write(dir.join("Containerfile"), &blocks("dockerfile")[0]).unwrap();
    std::fs::write(dir.join("greet.yaml"), &blocks("yaml")[0]).unwrap();
    // README's release `mining` and its namespaces are this test's.
    let ours = |line: &str| {
        line.replace("mining-mining-operator", &release.fullname())
            .replace("mining-workflows", &release.work.name)
            .replace("http://127.0.0.1:8080/mcp", &url)
    };
    let admin = std::path::PathBuf::from(std::env::var("KUBECONFIG").unwrap());
    let author = kubeconfig_as("ada@example.com", &dir);
    let sh_blocks = blocks("sh");
    assert_eq!(sh_blocks.len(), 5, "local run, build, bind, apply, call: {sh_blocks:#?}");

    // Build: the printed command; `kind load` is what this cluster's node does not need.
    cluster_tests::docs::stand_in_python_base_image();
    for line in sh_blocks[1].lines() {
        if line.contains("kind load") {
            continue;
        }
        let (built, said) = sh(line, &dir, &admin, &[]);
        assert!(built, "{line}: {said}");
    }
    // Before the administrator's binding the author may not define tools.
    let apply = &sh_blocks[3];
    let (early, said) = sh(&ours(apply.lines().next().unwrap()), &dir, &author, &[]);
    assert!(!early && said.contains("forbidden"), "an unbound author applied a tool: {said}");
    // Bind (as the administrator), then apply and list (as the author).
    for line in sh_blocks[2].lines() {
        let (bound, said) = sh(&ours(line), &dir, &admin, &[]);
        assert!(bound, "{line}: {said}");
    }
    let (applied, said) = sh(&ours(apply.lines().next().unwrap()), &dir, &author, &[]);
    assert!(applied, "{apply}: {said}");
    let list = ours(apply.lines().nth(1).expect("the get line"));
    eventually("the author to read ACCEPTED True", Duration::from_secs(60), || async {
        let (ok, said) = sh(&list, &dir, &author, &[]);
        (ok && said.lines().nth(1).is_some_and(|row| row.split_whitespace().nth(1) == Some("True")))
            .then_some(())
    })
    .await;

    // Call, with a caller's token made as NOTES make it, from the clients' directory (its Inspector).
    let token = release.user_token("mcp-user").await;
    let call = ours(sh_blocks[4].trim());
    let clients = clients_dir();
    let (called, said) = sh(&call, &clients, &admin, &[("MCP_TOKEN", &token)]);
    assert!(called, "{call}: {said}");
    let answer: Value = first_json(&said);
    let mut outcome = answer["structuredContent"].clone();
    // A run whose Pod outlives the wait budget (the first start copies the
    // image) answers `running`: follow it as the answer says.
    for _ in 0..6 {
        if outcome["status"] != "running" {
            break;
        }
        let id = outcome["workflow_id"].as_str().unwrap().to_string();
        let follow = call.replace(
            "--tool-name greet --tool-arg name=Ada",
            &format!("--tool-name get_tool_result --tool-arg workflow_id={id} --tool-arg wait_seconds=20"),
        );
        let (ok, said) = sh(&follow, &clients, &admin, &[("MCP_TOKEN", &token)]);
        assert!(ok, "{follow}: {said}");
        outcome = first_json(&said)["structuredContent"].clone();
    }
    assert_eq!(outcome["status"], "completed", "{outcome:#}");
    assert_eq!(outcome["result"], json!({"greeting": "Hello, Ada!"}), "{outcome:#}");

    // docs/MCP.md's task table says what tools/list says of task support.
    let list_tools =
        call.replace("--method tools/call --tool-name greet --tool-arg name=Ada", "--method tools/list");
    let (listed, said) = sh(&list_tools, &clients, &admin, &[("MCP_TOKEN", &token)]);
    assert!(listed, "{list_tools}: {said}");
    let tools: Value = first_json(&said);
    task_support_agrees_with_the_docs(tools["tools"].as_array().expect("tools"), "greet");

    // A tool of parts: its Accepted message says what this server cannot number.
    let parted = std::fs::read_to_string(dir.join("greet.yaml"))
        .unwrap()
        .replace("name: greet}", "name: greet-parts}")
        .replace("backoffLimit: 0", "backoffLimit: 0\n      completions: 3");
    std::fs::write(dir.join("parts.yaml"), parted).unwrap();
    let (applied, said) = sh(&ours("kubectl apply -n mining-workflows -f parts.yaml"), &dir, &author, &[]);
    assert!(applied, "{said}");
    let version = release.ns.client.apiserver_version().await.unwrap();
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap();
    let message = ours(
        "kubectl -n mining-workflows get mcptools greet-parts -o jsonpath={.status.conditions[0].message}",
    );
    let said = eventually("the parts tool's verdict", Duration::from_secs(60), || async {
        let (ok, said) = sh(&message, &dir, &author, &[]);
        (ok && said.starts_with("offered")).then_some(said)
    })
    .await;
    assert_eq!(
        said.contains("has no Indexed Jobs") && said.contains("JOB_COMPLETION_INDEX"),
        minor < 22,
        "on {}: {said}",
        version.git_version
    );

    // Debugging: the debugger role reads Pods, never runs or Secrets.
    let (pods_before, _) = sh(&ours("kubectl -n mining-workflows get pods"), &dir, &author, &[]);
    assert!(!pods_before, "a tool author reads Pods without the debugger role");
    let debug = cluster_tests::docs::blocks("docs/TOOLS.md", "## Debugging your tool", "sh");
    assert_eq!(debug.len(), 1, "{debug:?}");
    let (bound, said) = sh(&ours(debug[0].trim()), &dir, &admin, &[]);
    assert!(bound, "{}: {said}", debug[0]);
    let (pods, said) = sh(&ours("kubectl -n mining-workflows get pods,jobs"), &dir, &author, &[]);
    assert!(pods, "{said}");
    for never in ["toolruns", "secrets"] {
        let (read, said) = sh(&ours(&format!("kubectl -n mining-workflows get {never}")), &dir, &author, &[]);
        assert!(!read && said.contains("forbidden"), "the debugger reads {never}: {said}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// docs/MCP.md's "advertised" row (2025-11-25) against a 2025-11-25
/// `tools/list`: the tools it names as `"optional"` are exactly the
/// built-in tools listed so, every other built-in tool is `"forbidden"`,
/// and `defined` (an McpTool saying nothing of it) is `"optional"`, the default the row states.
fn task_support_agrees_with_the_docs(tools: &[Value], defined: &str) {
    let mcp = std::fs::read_to_string(cluster_tests::repo_root().join("docs/MCP.md")).unwrap();
    let row =
        mcp.lines().find(|line| line.starts_with("| advertised |")).expect("the task table's advertised row");
    let row_2025 = row.split(" | ").nth(1).expect("its 2025-11-25 column");
    let support = |tool: &Value| tool["execution"]["taskSupport"].as_str().unwrap_or("forbidden").to_string();
    let mut optional_listed = std::collections::BTreeSet::new();
    let mut optional_named = std::collections::BTreeSet::new();
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        if name == defined {
            assert_eq!(support(tool), "optional", "{tool:#}");
            assert!(
                row_2025.contains("each defined tool its McpTool's `taskSupport` (default `\"optional\"`)"),
                "{row_2025}"
            );
            continue;
        }
        if support(tool) == "optional" {
            optional_listed.insert(name.to_string());
        } else {
            assert_eq!(support(tool), "forbidden", "{tool:#}");
        }
        if row_2025.contains(&format!("`{name}`")) {
            optional_named.insert(name.to_string());
        }
    }
    assert!(
        !optional_listed.is_empty(),
        "no tool is listed as a task: is this a 2025-11-25 listing? {tools:#?}"
    );
    assert_eq!(optional_listed, optional_named, "the tools docs/MCP.md names as tasks: {row_2025}");
    assert!(row_2025.contains("the other tools `\"forbidden\"`"), "{row_2025}");
}
