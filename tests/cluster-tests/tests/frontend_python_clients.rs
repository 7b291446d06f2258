//! Two more clients we did not write, each mining a chain equal to the
//! Python reference: the official Python SDK 2.x (`mcp.Client`, which speaks
//! 2026-07-28 through `server/discover` and falls back to the handshake) and
//! FastMCP 4's client with `fastmcp_tasks` (the 2026-07-28 Tasks extension).

use std::time::Duration;

use cluster_tests::mcp::{Sdk, structured};
use cluster_tests::{Stack, assert_reference_chain, eventually};
use kube::api::{Api, ListParams};
use mining_api::MiningWorkflow;
use serde_json::json;

#[tokio::test]
async fn the_python_sdk_2_mines_through_the_tools_on_2026_and_on_the_handshake() {
    // Held whole: its namespace and processes live until the test ends.
    let stack = Stack::start("py2-tools", &[]).await;
    let url = stack.frontend.url();
    let listed = Sdk::Python2.run(&url, None, false, &["tools"]).await;
    assert_eq!(listed["protocolVersion"], "2026-07-28", "discover picks the newest: {listed:#}");
    let names: Vec<&str> =
        listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["start_mining", "get_mining_result", "cancel_mining", "list_mining_workflows"]);

    // Inline, with progress, on 2026-07-28.
    let arguments = json!({"difficulty": 12, "blocks": 3, "wait_seconds": 20}).to_string();
    let document = Sdk::Python2.run(&url, None, true, &["call", "start_mining", &arguments]).await;
    assert_reference_chain(structured(&document), 3, 12);
    let progress = document["progress"].as_array().unwrap();
    assert_eq!(progress.last().map(|p| p["progress"].as_f64()), Some(Some(3.0)), "{document:#}");

    // Started without waiting, then polled: the same on the handshake-era protocol.
    let mut start = Sdk::Python2.command(
        &url,
        None,
        false,
        &["call", "start_mining", &json!({"difficulty": 13, "blocks": 2, "wait_seconds": 0}).to_string()],
    );
    let document =
        cluster_tests::mcp::collect(Sdk::Python2, start.env("MCP_MODE", "legacy").spawn().unwrap()).await;
    assert_ne!(document["protocolVersion"], "2026-07-28", "{document:#}");
    let id = structured(&document)["workflow_id"].as_str().unwrap().to_string();
    let finished = eventually("the workflow to finish", Duration::from_secs(120), || async {
        let arguments = json!({"workflow_id": id, "wait_seconds": 10});
        let document = Sdk::Python2.call(&url, None, "get_mining_result", arguments).await;
        let outcome = structured(&document).clone();
        (outcome["status"] != "running").then_some(outcome)
    })
    .await;
    assert_reference_chain(&finished, 2, 13);
}

#[tokio::test]
async fn fastmcp_mines_through_tasks_and_through_its_task_handle() {
    let stack = Stack::start("fastmcp", &[]).await;
    let url = stack.frontend.url();
    let listed = Sdk::FastMcp.run(&url, None, false, &["tools"]).await;
    assert_eq!(listed["tools"].as_array().map(Vec::len), Some(4), "{listed:#}");

    // A plain call: the client declares the Tasks extension, the frontend
    // answers with a task, and FastMCP polls it to the tool's result.
    let arguments = json!({"difficulty": 12, "blocks": 2}).to_string();
    let document = Sdk::FastMcp.run(&url, None, false, &["call", "start_mining", &arguments]).await;
    assert_reference_chain(structured(&document), 2, 12);

    // The explicit handle: a task id that is the workflow, then its result.
    let arguments = json!({"difficulty": 13, "blocks": 2}).to_string();
    let document = Sdk::FastMcp.run(&url, None, false, &["task", "start_mining", &arguments]).await;
    let task_id = document["task_id"].as_str().unwrap_or_else(|| panic!("no task: {document:#}"));
    assert!(task_id.starts_with("mw-"), "{document:#}");
    assert_reference_chain(&document["result"]["structuredContent"], 2, 13);
    let api: Api<MiningWorkflow> = stack.ns.api();
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|w| w.metadata.name)
        .collect();
    assert!(names.iter().any(|n| n == task_id), "the task is the workflow: {names:?}");
}
