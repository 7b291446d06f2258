//! docs/TOOLS.md's "Your first tool in five minutes", as printed: the Python
//! tool runs locally with the documented command and writes the documented
//! result; its `McpTool` is accepted by the API server and offered by the
//! frontend (condition `Accepted` True, in `tools/list` with its hints).
//! Building the image needs a Python base image from a registry, which this
//! machine cannot pull; the Containerfile is only checked for what it names.

use std::time::Duration;

use cluster_tests::eventually;
use cluster_tests::tools::{listed_names_for, setup_with_frontend_args};
use kube::api::{Api, PostParams};
use mining_api::McpTool;
use serde_json::json;

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

#[tokio::test]
async fn the_first_tools_definition_is_accepted_and_offered_as_printed() {
    let (ns, _operator, frontend) = setup_with_frontend_args("first-tool", &[]).await;
    let yaml = &blocks("yaml")[0];
    let tool: McpTool = cluster_tests::docs::mcp_tool_from_yaml(yaml);
    let tools: Api<McpTool> = ns.api();
    tools.create(&PostParams::default(), &tool).await.unwrap();
    let url = frontend.url();
    eventually("greet to be offered", Duration::from_secs(30), || async {
        listed_names_for(&url, None).await.contains(&"greet".to_string()).then_some(())
    })
    .await;
    let accepted = eventually("its Accepted condition", Duration::from_secs(30), || async {
        let stored = tools.get("greet").await.ok()?;
        let conditions = stored.status?.conditions;
        conditions.into_iter().find(|c| c.type_ == "Accepted").map(|c| c.status)
    })
    .await;
    assert_eq!(accepted, mining_api::ConditionStatus::True);
    // The apply command as printed, on the server (a dry run: the object is there).
    let apply = blocks("sh").into_iter().find(|b| b.contains("kubectl apply")).expect("the apply block");
    let first = apply.lines().next().unwrap().replace("mining-workflows", &ns.name);
    let file = std::env::temp_dir().join(format!("greet-{}.yaml", ns.name));
    std::fs::write(&file, yaml).unwrap();
    let command = format!("{} --dry-run=server", first.replace("greet.yaml", file.to_str().unwrap()));
    let output = std::process::Command::new("sh").arg("-ec").arg(&command).output().unwrap();
    assert!(output.status.success(), "{command}: {}", String::from_utf8_lossy(&output.stderr));
}
