//! Asking on a plain call (protocol 2026-07-28, MRTR): a tool run that asks
//! answers the waiting `tools/call` with `input_required` and a
//! `requestState`; the client's retry, to any replica after any restart,
//! carries the answers. Driven by the TypeScript client 2.x's and the Python
//! SDK 2.x's own MRTR drivers, and by raw requests for what only a hostile
//! client sends.

use std::time::Duration;

use cluster_tests::mcp::{FrontendProcess, Sdk, clients_dir, collect, node22, ownership_key_file};
use cluster_tests::tools::{ALICE, conformance_fixture, listed_names, setup};
use cluster_tests::{OperatorProcess, eventually};
use kube::api::{Api, ListParams, PostParams};
use mining_api::{McpTool, ToolRun, ToolRunPhase};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const TOOL: &str = "test_input_required_result_elicitation";

/// The JSON-RPC response in a raw answer (a JSON body or the SSE event with an id).
fn response_of(body: &str) -> Value {
    let documents = std::iter::once(body).chain(body.lines().filter_map(|line| line.strip_prefix("data:")));
    documents
        .filter_map(|doc| serde_json::from_str::<Value>(doc.trim()).ok())
        .find(|doc| doc.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC response in {body}"))
}

/// A raw 2026-07-28 `tools/call` of [`TOOL`] as `token`'s caller.
async fn call_raw(frontend: &FrontendProcess, token: &str, params: Value) -> Value {
    let mut params = params;
    params["name"] = json!(TOOL);
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    });
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}).to_string();
    let headers = [
        format!("Authorization: Bearer {token}"),
        "Mcp-Method: tools/call".to_string(),
        format!("Mcp-Name: {TOOL}"),
    ];
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let (_, _, body) = frontend.post_mcp_version("localhost", "2026-07-28", &headers, &body).await;
    response_of(&body)
}

#[tokio::test]
async fn a_plain_call_asks_through_mrtr_across_a_restart_and_only_its_caller_resumes_it() {
    let (ns, mut operator, frontend) = setup("mrtr").await;
    let tools: Api<McpTool> = ns.api();
    tools.create(&PostParams::default(), &conformance_fixture(TOOL)).await.unwrap();
    eventually("the tool to be listed", Duration::from_secs(30), || async {
        listed_names(&frontend.url()).await.iter().any(|name| name == TOOL).then_some(())
    })
    .await;

    // The SDK asks its own handler; while it holds the answer, the frontend
    // and the operator die. Its retry reaches a new frontend process (any
    // replica: all it needs is the run and the key).
    let go = std::env::temp_dir().join(format!("mrtr-go-{}", ns.name));
    let mut client = tokio::process::Command::new(node22())
        .arg(clients_dir().join("ts-mrtr.mjs"))
        .args([&frontend.url(), TOOL, "{}"])
        .env("MCP_TOKEN", ALICE.unwrap())
        .env("MCP_GO_FILE", &go)
        .env("MCP_ELICIT_CONTENT", r#"{"name": "Ada"}"#)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let asked =
        tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await.unwrap().unwrap().unwrap();
    let asked: Value = serde_json::from_str(&asked).unwrap();
    assert_eq!(asked["asked"], "elicitation/create", "{asked:#}");
    assert_eq!(asked["params"]["message"], "What is your name?");
    operator.kill();
    let frontend = frontend.restart().await;
    let key = ownership_key_file(&ns.name);
    let _operator = OperatorProcess::start(&ns.name, &["--ownership-key-file", key.to_str().unwrap()]);
    std::fs::write(&go, "").unwrap();
    let last = tokio::time::timeout(Duration::from_secs(120), async {
        let mut last = String::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            last = line;
        }
        last
    })
    .await
    .expect("the client finished");
    let _ = std::fs::remove_file(&go);
    let done: Value = serde_json::from_str(&last).unwrap();
    assert_eq!(done["era"], "modern", "the 2026-07-28 era: {done:#}");
    assert_eq!(done["result"]["content"][0]["text"], "Hello, Ada!", "{done:#}");
    let runs: Api<ToolRun> = ns.api();
    let made = runs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(made.len(), 1, "one run for the call and its retry");
    assert_eq!((made[0].phase(), made[0].step()), (ToolRunPhase::Succeeded, 1));

    // The state answers only its caller's retry of that call.
    let asking = call_raw(&frontend, "alice-secret", json!({"arguments": {}})).await;
    assert_eq!(asking["result"]["resultType"], "input_required", "{asking:#}");
    let state = asking["result"]["requestState"].as_str().unwrap().to_string();
    let answers = json!({"user_name": {"action": "accept", "content": {"name": "Eve"}}});
    let retry = |state: &str| json!({"arguments": {}, "inputResponses": answers, "requestState": state});
    for (who, token, params) in [
        ("another caller", "bob-secret", retry(&state)),
        ("a tampered state", "alice-secret", retry(&format!("{state}-TAMPERED"))),
        ("other arguments", "alice-secret", {
            let mut other = retry(&state);
            other["arguments"] = json!({"extra": 1});
            other
        }),
    ] {
        let refused = call_raw(&frontend, token, params).await;
        assert_eq!(refused["error"]["code"], -32602, "{who}: {refused:#}");
        assert!(refused["error"]["message"].as_str().unwrap().contains("requestState"), "{who}: {refused:#}");
    }
    let runs_now = runs.list(&ListParams::default()).await.unwrap().items;
    let waiting =
        runs_now.iter().find(|run| run.phase() == ToolRunPhase::InputRequired).expect("still asking");
    assert!(waiting.spec.input_responses.is_empty(), "nothing a refused retry sent was recorded");
    // An answer that does not fit what was asked is refused too.
    let misfit = json!({"arguments": {}, "inputResponses": {"user_name": 12345}, "requestState": state});
    assert_eq!(call_raw(&frontend, "alice-secret", misfit).await["error"]["code"], -32602);
    let resumed = call_raw(&frontend, "alice-secret", retry(&state)).await;
    assert_eq!(resumed["result"]["content"][0]["text"], "Hello, Eve!", "{resumed:#}");
}

#[tokio::test]
async fn the_python_sdk_answers_a_plain_calls_question_through_its_own_mrtr_driver() {
    let (ns, _operator, frontend) = setup("mrtr-py").await;
    let tools: Api<McpTool> = ns.api();
    tools.create(&PostParams::default(), &conformance_fixture(TOOL)).await.unwrap();
    eventually("the tool to be listed", Duration::from_secs(30), || async {
        listed_names(&frontend.url()).await.iter().any(|name| name == TOOL).then_some(())
    })
    .await;
    let mut command = Sdk::Python2.command(&frontend.url(), ALICE, false, &["call", TOOL, "{}"]);
    command.env("MCP_ELICIT_CONTENT", r#"{"name": "Ada"}"#);
    let done = collect(Sdk::Python2, command.spawn().unwrap()).await;
    assert_eq!(done["protocolVersion"], "2026-07-28", "{done:#}");
    let asked = done["asked"].as_array().expect("what the tool asked");
    assert_eq!(asked.len(), 1, "asked once: {done:#}");
    assert_eq!(asked[0]["asked"], "elicitation/create");
    assert_eq!(asked[0]["params"]["message"], "What is your name?", "{done:#}");
    assert_eq!(done["result"]["content"][0]["text"], "Hello, Ada!", "{done:#}");
    let runs: Api<ToolRun> = ns.api();
    let made = runs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(made.len(), 1, "one run for the call and its retry");
    assert_eq!((made[0].phase(), made[0].step()), (ToolRunPhase::Succeeded, 1));
}
