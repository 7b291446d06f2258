//! The protocol edges a stateless Streamable HTTP server must get right, each
//! pinned with raw HTTP requests (no SDK in between to smooth them over):
//! version headers, batches, methods other than POST, SSE buffering, and the
//! methods each protocol generation does not have.

use cluster_tests::mcp::FrontendProcess;
use cluster_tests::{TestNamespace, install_crd};
use serde_json::{Value, json};

const JSON_HEADERS: [&str; 2] =
    ["Content-Type: application/json", "Accept: application/json, text/event-stream"];

async fn frontend(prefix: &str) -> (TestNamespace, FrontendProcess) {
    let ns = TestNamespace::new(prefix).await;
    install_crd(&ns.client).await;
    // No operator runs: a `tasks/result` ends at this wait, which is enough
    // to see how it is sent.
    let frontend = FrontendProcess::start(&ns.name, &["--task-result-wait-seconds", "1"]).await;
    (ns, frontend)
}

fn request(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string()
}

/// A request as protocol 2026-07-28 asks for it: routing headers and the
/// request's `_meta`. Returns (status, head, body).
async fn request_2026(frontend: &FrontendProcess, method: &str, mut params: Value) -> (u16, String, String) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "protocol-edges", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let method_header = format!("Mcp-Method: {method}");
    let mut headers = vec![method_header];
    if let Some(name) = params.get("taskId").or(params.get("name")).and_then(Value::as_str) {
        headers.push(format!("Mcp-Name: {name}"));
    }
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    frontend.post_mcp_version("localhost", "2026-07-28", &headers, &request(method, params)).await
}

/// The JSON-RPC message of a response body, whether sent as JSON or as one SSE event.
fn message(body: &str) -> Value {
    let data = body.lines().find_map(|line| line.strip_prefix("data:")).unwrap_or(body);
    serde_json::from_str(data.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

#[tokio::test]
async fn an_unsupported_or_malformed_protocol_version_is_refused_on_every_path() {
    let (_ns, frontend) = frontend("edges-version").await;
    let task_id = format!("mw-{}", "a".repeat(26));
    let calls = [
        request("tools/list", json!({})),
        request("tools/call", json!({"name": "list_mining_workflows", "arguments": {}})),
        // The 2025-11-25 task layer's methods, and a task-augmented call.
        request("tools/call", json!({"name": "start_mining", "arguments": {}, "task": {"ttl": 60000}})),
        request("tasks/get", json!({"taskId": task_id})),
        request("tasks/result", json!({"taskId": task_id})),
        request("tasks/list", json!({})),
        request("tasks/cancel", json!({"taskId": task_id})),
    ];
    for version in ["1999-01-01", "2025-11-25x", "not a version", ""] {
        for body in &calls {
            let version_header = format!("MCP-Protocol-Version: {version}");
            let mut headers = JSON_HEADERS.to_vec();
            headers.push(&version_header);
            let (code, _, answer) = frontend.request("POST", "/mcp", &headers, body).await;
            assert_eq!(code, 400, "version {version:?}, {body}: {answer}");
        }
    }
    // The same call under a supported version is answered.
    let (code, _, answer) =
        frontend.post_mcp_version("localhost", "2025-11-25", &[], &request("tools/list", json!({}))).await;
    assert_eq!(code, 200, "{answer}");
    let (code, _, answer) = request_2026(&frontend, "tools/list", json!({})).await;
    assert_eq!(code, 200, "{answer}");
}

#[tokio::test]
async fn a_json_rpc_batch_gets_a_clear_error() {
    let (_ns, frontend) = frontend("edges-batch").await;
    let batch = format!("[{},{}]", request("tools/list", json!({})), request("tools/list", json!({})));
    for version in ["2025-06-18", "2025-11-25", "2026-07-28"] {
        let (code, _, body) = frontend.post_mcp_version("localhost", version, &[], &batch).await;
        assert!((400..500).contains(&code), "{version}: a batch is refused, got {code}: {body}");
        let error = &message(&body)["error"];
        assert!(error["code"].is_i64(), "{version}: a JSON-RPC error: {body}");
        assert!(!error["message"].as_str().unwrap_or_default().is_empty(), "{version}: it says why: {body}");
        assert!(message(&body).get("result").is_none(), "{version}: nothing in the batch ran: {body}");
    }
}

#[tokio::test]
async fn get_and_delete_on_mcp_are_405_with_allow_post() {
    let (_ns, frontend) = frontend("edges-methods").await;
    for method in ["GET", "DELETE"] {
        let headers = ["Accept: text/event-stream", "MCP-Protocol-Version: 2025-11-25"];
        let (code, head, body) = frontend.request(method, "/mcp", &headers, "").await;
        assert_eq!(code, 405, "{method}: {head}\n{body}");
        assert_eq!(header(&head, "allow"), Some("POST"), "{method}: {head}");
    }
}

#[tokio::test]
async fn sse_responses_are_never_buffered_by_proxies() {
    let (_ns, frontend) = frontend("edges-sse").await;
    let sse_only = "Accept: text/event-stream, application/json";
    // rmcp's own streams: a tool call answered as SSE.
    let call = request("tools/call", json!({"name": "list_mining_workflows", "arguments": {}}));
    let (code, head, body) = frontend.post_mcp_version("localhost", "2025-11-25", &[], &call).await;
    assert_eq!(code, 200, "{body}");
    if header(&head, "content-type").is_some_and(|t| t.starts_with("text/event-stream")) {
        assert_eq!(header(&head, "x-accel-buffering"), Some("no"), "{head}");
    }
    // The 2025-11-25 layer's own stream: tasks/result of a task.
    let create = request(
        "tools/call",
        json!({"name": "start_mining", "arguments": {"difficulty": 1, "blocks": 1}, "task": {"ttl": 60000},
               "_meta": {"progressToken": "p1"}}),
    );
    let (code, _, body) = frontend.post_mcp_version("localhost", "2025-11-25", &[sse_only], &create).await;
    assert_eq!(code, 200, "{body}");
    let task_id = message(&body)["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    assert!(task_id.starts_with("mw-"), "{body}");
    // No operator runs here: the wait ends at its budget, as a stream all the same.
    let result = request("tasks/result", json!({"taskId": task_id}));
    let (code, head, body) = frontend.post_mcp_version("localhost", "2025-11-25", &[sse_only], &result).await;
    assert_eq!(code, 200, "{body}");
    assert!(header(&head, "content-type").is_some_and(|t| t.starts_with("text/event-stream")), "{head}");
    assert_eq!(header(&head, "x-accel-buffering"), Some("no"), "{head}");
}

#[tokio::test]
async fn the_2025_task_methods_do_not_exist_under_2026_07_28() {
    let (_ns, frontend) = frontend("edges-2026").await;
    let task_id = format!("mw-{}", "b".repeat(26));
    for (method, params) in [("tasks/result", json!({"taskId": task_id})), ("tasks/list", json!({}))] {
        let (code, _, answer) = request_2026(&frontend, method, params).await;
        let error = &message(&answer)["error"];
        assert!(
            code == 404 || error["code"] == -32601,
            "{method}: expected 404 or method-not-found, got {code}: {answer}"
        );
        assert!(message(&answer).get("result").is_none(), "{answer}");
    }
    // tasks/get is the extension's, and answers (an unknown task).
    let (code, _, answer) = request_2026(&frontend, "tasks/get", json!({"taskId": task_id})).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(message(&answer)["error"]["code"], -32602, "{answer}");
}

#[tokio::test]
async fn an_oversized_progress_token_is_refused_and_nothing_is_created() {
    let (ns, frontend) = frontend("edges-token").await;
    let api: kube::Api<mining_api::MiningWorkflow> = ns.api();
    for (size, expected_code) in [(1024, 200), (300 * 1024, 413)] {
        let create = request(
            "tools/call",
            json!({"name": "start_mining", "arguments": {"difficulty": 1, "blocks": 1}, "task": {"ttl": 60000},
                   "_meta": {"progressToken": "p".repeat(size)}}),
        );
        let (code, _, body) = frontend.post_mcp_version("localhost", "2025-11-25", &[], &create).await;
        assert_eq!(code, expected_code, "{size}: {body}");
        if code == 200 {
            let error = &message(&body)["error"];
            assert_eq!(error["code"], -32602, "{body}");
            assert!(error["message"].as_str().unwrap().contains("at most 256"), "{body}");
        }
    }
    assert!(api.list(&Default::default()).await.unwrap().items.is_empty(), "nothing was created");
    // A token within the bound starts the task.
    let create = request(
        "tools/call",
        json!({"name": "start_mining", "arguments": {"difficulty": 1, "blocks": 1}, "task": {"ttl": 60000},
               "_meta": {"progressToken": "p".repeat(200)}}),
    );
    let (_, _, body) = frontend.post_mcp_version("localhost", "2025-11-25", &[], &create).await;
    assert!(message(&body)["result"]["task"]["taskId"].is_string(), "{body}");
}
