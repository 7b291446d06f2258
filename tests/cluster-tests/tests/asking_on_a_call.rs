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

/// A tool that asks before its task is made (`askBeforeTaskSeconds`).
const TASK_TOOL: &str = "test_tool_with_task";

/// A raw 2026-07-28 `tools/call` of [`TOOL`] as `token`'s caller.
async fn call_raw(frontend: &FrontendProcess, token: &str, params: Value) -> Value {
    call_raw_of(frontend, token, TOOL, json!({"elicitation": {}}), params).await
}

/// A raw 2026-07-28 `tools/call` of `tool` as `token`'s caller declaring `capabilities`.
async fn call_raw_of(
    frontend: &FrontendProcess,
    token: &str,
    tool: &str,
    capabilities: Value,
    params: Value,
) -> Value {
    let mut params = params;
    params["name"] = json!(tool);
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}).to_string();
    let headers = [
        format!("Authorization: Bearer {token}"),
        "Mcp-Method: tools/call".to_string(),
        format!("Mcp-Name: {tool}"),
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

#[tokio::test]
async fn a_task_call_asks_before_its_task_is_made_and_only_its_callers_retry_makes_it() {
    let (ns, _operator, frontend) = setup("mrtr-task").await;
    let tools: Api<McpTool> = ns.api();
    tools.create(&PostParams::default(), &conformance_fixture(TASK_TOOL)).await.unwrap();
    eventually("the tool to be listed", Duration::from_secs(30), || async {
        listed_names(&frontend.url()).await.iter().any(|name| name == TASK_TOOL).then_some(())
    })
    .await;
    let declares = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let call = |token: &'static str, params: Value| {
        call_raw_of(&frontend, token, TASK_TOOL, declares.clone(), params)
    };

    let asking = call("alice-secret", json!({"arguments": {}})).await;
    assert_eq!(asking["result"]["resultType"], "input_required", "asked before the task: {asking:#}");
    assert!(asking["result"].get("taskId").is_none(), "no task yet: {asking:#}");
    let state = asking["result"]["requestState"].as_str().expect("a requestState").to_string();
    let answers = json!({"user_name": {"action": "accept", "content": {"name": "Eve"}}});
    let retry = json!({"arguments": {}, "inputResponses": answers, "requestState": state});

    // Another caller holding the state neither answers nor gets the task.
    let refused = call("bob-secret", retry.clone()).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused:#}");
    let runs: Api<ToolRun> = ns.api();
    let made = runs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(made.len(), 1, "one run, made by the first call");
    assert_eq!(made[0].phase(), ToolRunPhase::InputRequired, "still asking");
    assert!(made[0].spec.input_responses.is_empty(), "nothing the refused retry sent was recorded");

    let task = call("alice-secret", retry).await;
    assert_eq!(task["result"]["resultType"], "task", "the answer makes the task: {task:#}");
    assert_eq!(task["result"]["taskId"].as_str(), made[0].metadata.name.as_deref(), "the run is the task");
    assert!(task["result"].get("requestState").is_none(), "{task:#}");
    let name = made[0].metadata.name.clone().unwrap();
    let done = eventually("the run to finish with the answer", Duration::from_secs(60), || async {
        let run = runs.get(&name).await.ok()?;
        (run.phase() == ToolRunPhase::Succeeded).then_some(run)
    })
    .await;
    let result = done.status.and_then(|status| status.result).unwrap_or_default();
    assert!(result.contains("Hello, Eve!"), "the task's result has the answer: {result}");
    assert_eq!(runs.list(&ListParams::default()).await.unwrap().items.len(), 1, "no second run");
}

#[tokio::test]
async fn a_url_mode_question_reaches_only_a_client_that_declared_url_mode() {
    let (ns, _operator, frontend) = setup("mrtr-url").await;
    let tools: Api<McpTool> = ns.api();
    tools.create(&PostParams::default(), &conformance_fixture("sign_in")).await.unwrap();
    eventually("the tool to be listed", Duration::from_secs(30), || async {
        listed_names(&frontend.url()).await.iter().any(|name| name == "sign_in").then_some(())
    })
    .await;

    // A client that declared forms only is not sent to a page: its call
    // answers as a tool call that says what waits.
    let forms_only =
        call_raw_of(&frontend, "alice-secret", "sign_in", json!({"elicitation": {}}), json!({})).await;
    assert!(
        forms_only["result"].get("resultType").is_none_or(|kind| kind != "input_required"),
        "{forms_only:#}"
    );
    assert!(forms_only["result"]["content"][0]["text"].as_str().unwrap().contains("input"), "{forms_only:#}");

    // The TypeScript SDK 2.x, declaring URL mode, is asked and accepts.
    let mut command = tokio::process::Command::new(node22());
    command
        .arg(clients_dir().join("ts-mrtr.mjs"))
        .args([&frontend.url(), "sign_in", "{}"])
        .env("MCP_TOKEN", ALICE.unwrap())
        .env("MCP_ELICIT_URL", "1")
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<Value> = stdout.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let asked =
        lines.iter().find(|line| line.get("asked").is_some()).unwrap_or_else(|| panic!("asked: {stdout}"));
    let params = &asked["params"];
    assert_eq!(
        (params["mode"].as_str(), params["url"].as_str()),
        (Some("url"), Some("https://login.example/authorize?session=demo")),
        "{asked:#}"
    );
    let done = lines.last().unwrap();
    assert_eq!(done["result"]["content"][0]["text"], "sign-in: accept", "{stdout}");
    // The run the forms-only client left waiting keeps the request as a
    // 2025-11-25 client gets it: its id names the run and the key, whatever
    // the tool wrote (2026-07-28 dropped the id: its key correlates).
    let runs: Api<ToolRun> = ns.api();
    let made = runs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(made.len(), 2, "one run per call");
    let waiting =
        made.iter().find(|run| run.phase() == ToolRunPhase::InputRequired).expect("the forms-only run");
    let uid = waiting.metadata.uid.as_deref().unwrap();
    let stored = &waiting.status.as_ref().unwrap().input_requests.as_ref().unwrap()["sign_in"];
    assert_eq!(stored["params"]["elicitationId"], format!("{uid}.sign_in"), "{stored:#}");
}
