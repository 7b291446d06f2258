//! README's main command, `make demo`, against the local cluster the tests
//! already run: it installs the chart (whose Pods run the images `make
//! images` built), mines through the installed frontend, prints the chain and
//! the `kubectl get miningworkflows` line, and then the lines a user copies to
//! connect an MCP client and read the operator's log, which are run here as
//! printed.

use std::process::Command;

use cluster_tests::helm::{helm, run};
use cluster_tests::mcp::{clients_dir, node22};
use cluster_tests::{TestNamespace, free_port, reference_chain, repo_root};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

/// The lines the demo printed between `start` and the next line ending in `:`
/// that is not indented: the commands it tells the user to run.
fn printed_commands(stdout: &str, start: &str) -> Vec<String> {
    stdout
        .lines()
        .skip_while(|line| !line.starts_with(start))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .map(|line| line.trim().to_string())
        .collect()
}

/// Runs `lines` in one bash, as a user pasting them would, from `dir` with
/// Node 22 first on PATH (the Inspector needs it).
fn run_as_printed(lines: &[String], dir: &std::path::Path) -> std::process::Output {
    let node_bin = node22().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", node_bin.display(), std::env::var("PATH").unwrap_or_default());
    Command::new("bash")
        .args(["-euo", "pipefail", "-c", &lines.join("\n")])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .output()
        .expect("bash runs")
}

#[ignore = "the demo runs on the local cluster; tests/run.sh runs it there"]
#[tokio::test]
async fn make_demo_mines_a_chain_through_the_installed_frontend() {
    // A namespace and release of its own, so it runs beside the other tests.
    let ns = TestNamespace::new("demo").await;
    let release = format!("d{}", &ns.name[ns.name.len() - 5..]);
    let output = Command::new("make")
        .arg("demo")
        .current_dir(repo_root())
        .env("DEMO_NAMESPACE", &ns.name)
        .env("DEMO_RELEASE", &release)
        .env("DEMO_DIFFICULTY", "10")
        .env("DEMO_BLOCKS", "3")
        .env("DEMO_PORT", free_port().port().to_string())
        // tests/run.sh ran the demo's own build command just before. Run
        // again from inside a test process, cargo sees a different
        // environment and rebuilds the release profile from scratch
        // (minutes), so the test skips that one step.
        .env("DEMO_SKIP_BUILD", "1")
        .output()
        .expect("make runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The lines it printed work as printed: the Inspector lists the four
    // tools through the forwarder, and `kubectl logs` shows the operator's log.
    let connect = printed_commands(&stdout, "Connect your own MCP client");
    let connected = run_as_printed(&connect, &clients_dir());
    let look = printed_commands(&stdout, "Look around:");
    let logs: Vec<String> = look.iter().filter(|l| l.contains(" logs ")).cloned().collect();
    // In the shell the first block's `export KUBECONFIG` was pasted into.
    let exported: Vec<String> = connect.iter().take(1).chain(&logs).cloned().collect();
    let logged = run_as_printed(&exported, &repo_root());
    // The demo leaves its release and forwarder running for a look around; these go.
    let state = Command::new(repo_root().join("tests/cluster/cluster.sh")).arg("state").output().unwrap();
    let forwarder = std::path::Path::new(String::from_utf8_lossy(&state.stdout).trim()).join("forward.pid");
    if let Ok(pid) = std::fs::read_to_string(&forwarder) {
        let _ = Command::new("kill").arg(pid.trim()).status();
        let _ = std::fs::remove_file(&forwarder);
    }
    let (_, uninstalled) = run(&helm(), &["uninstall", &release, "--namespace", &ns.name, "--wait"]);
    // The chart keeps the workflow namespace it made (the users' workflows live there).
    let namespaces: Api<Namespace> = Api::all(ns.client.clone());
    let workflows_namespace = format!("{}-workflows", ns.name);
    let kept = namespaces.get_opt(&workflows_namespace).await.unwrap();
    let _ = namespaces.delete(&workflows_namespace, &Default::default()).await;
    assert!(output.status.success(), "make demo failed:\n{stdout}\n{stderr}");
    assert_eq!(connect.len(), 3, "export KUBECONFIG, the token, the Inspector: {stdout}");
    let listed = String::from_utf8_lossy(&connected.stdout);
    assert!(
        connected.status.success(),
        "{connect:?} failed:\n{listed}\n{}",
        String::from_utf8_lossy(&connected.stderr)
    );
    let tools: serde_json::Value = serde_json::from_str(&listed).expect("the Inspector printed JSON");
    let mut names: Vec<&str> =
        tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cancel_mining",
            "cancel_tool_run",
            "deploy-gate",
            "get_mining_result",
            "get_tool_result",
            "list_mining_workflows",
            "list_tool_runs",
            "respond_tool_run",
            "start_mining",
            "sum-numbers"
        ],
        "the mining tools, the example tools and their companions"
    );
    assert_eq!(logs.len(), 1, "one kubectl logs line: {look:?}");
    let log = String::from_utf8_lossy(&logged.stdout);
    assert!(logged.status.success(), "{logs:?}: {}", String::from_utf8_lossy(&logged.stderr));
    assert!(log.contains("operator"), "the operator's own log: {log}");
    assert!(!log.contains('\u{1b}'), "plain text, no terminal colour codes, in a Pod's log: {log:?}");
    // The chain it printed is the independent implementation's.
    for block in reference_chain(3, 10) {
        let (index, nonce) = (block["index"].as_u64().unwrap(), block["nonce"].as_u64().unwrap());
        let line = format!("{index:>5}  {nonce:>10}  {}", block["hash"].as_str().unwrap());
        assert!(stdout.contains(&line), "missing {line:?} in:\n{stdout}");
    }
    assert!(stdout.contains("every hash re-checked by the client"), "{stdout}");
    assert!(stdout.contains("progress 3/3"), "progress was shown: {stdout}");
    let listed = stdout.lines().find(|l| l.starts_with("mw-")).unwrap_or_default();
    assert!(listed.contains("Succeeded") && listed.contains("3/3"), "the kubectl get line: {stdout}");
    // The example tool ran as one Job and answered its sum.
    assert!(stdout.contains("\"sum\": 6.5"), "the example tool's result: {stdout}");
    let run = stdout
        .lines()
        .filter(|l| l.starts_with("mw-"))
        .find(|l| l.contains("sum-numbers"))
        .unwrap_or_default();
    assert!(run.contains("Succeeded") && run.contains("1/1"), "the kubectl get toolruns line: {stdout}");
    // The tool that asks: the question shown, answered, and the deploy done in a second Job.
    assert!(stdout.contains("the tool asks (approve): Deploy api 1.2 to production?"), "{stdout}");
    assert!(stdout.contains("\"deployed\": true"), "the asking tool's result: {stdout}");
    let gated = stdout
        .lines()
        .filter(|l| l.starts_with("mw-"))
        .find(|l| l.contains("deploy-gate"))
        .unwrap_or_default();
    assert!(gated.contains("Succeeded"), "the kubectl get toolruns line of deploy-gate: {stdout}");
    assert!(uninstalled.contains("uninstalled"), "{uninstalled}");
    // The workflows lived apart from the release, in a namespace the chart made and kept.
    assert!(kept.is_some(), "the chart made {workflows_namespace} and kept it on uninstall");
}
