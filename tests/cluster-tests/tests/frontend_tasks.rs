//! MCP tasks, both generations, driven by clients we did not write: the
//! 2025-11-25 task APIs of the TypeScript and Python SDKs 1.x, the 2026-07-28
//! Tasks extension package and the Inspector's session CLI (the conformance
//! suite's task scenarios: conformance.rs). Every task is a MiningWorkflow
//! mined by the real operator.

use cluster_tests::mcp::{FrontendProcess, Sdk, structured, tokens_file};
use cluster_tests::tasks::{Mcpdo, TaskClient};
use cluster_tests::{OperatorProcess, TestNamespace, assert_reference_chain, install_crd};
use serde_json::{Value, json};

/// A JSON-RPC error code in a client's document.
fn error_code(document: &Value) -> Option<i64> {
    document["error"]["code"].as_i64()
}

#[tokio::test]
async fn core_2025_tasks_run_to_the_reference_chain_in_both_sdks() {
    let ns = TestNamespace::new("tasks-2025").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = FrontendProcess::start(&ns.name, &[]).await;
    let url = frontend.url();

    for client in TaskClient::CORE_2025 {
        let init = client.run(&url, None, false, &["init"]).await;
        assert_eq!(init["protocolVersion"], "2025-11-25", "{client:?}: {init:#}");
        assert_eq!(
            init["capabilities"]["tasks"],
            json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
            "{client:?}"
        );
        for tool in init["tools"].as_array().unwrap() {
            let expected = if tool["name"] == "start_mining" { "optional" } else { "forbidden" };
            assert_eq!(tool["execution"]["taskSupport"], expected, "{client:?}: {tool}");
        }
    }

    // TypeScript: create with a progress token, then block in tasks/result;
    // progress arrives on that stream against the creating call's token.
    let run =
        TaskClient::TypeScript2025.run(&url, None, true, &["run", r#"{"difficulty":14,"blocks":3}"#]).await;
    let task = &run["task"];
    assert_eq!(task["status"], "working", "{run:#}");
    // The client asked to keep it 60 s after it finishes (ts-tasks-2025.mjs): kept and said so.
    assert_eq!(task["ttl"], 60_000, "{task}");
    assert!(task["pollInterval"].as_u64().is_some_and(|ms| (1_000..=60_000).contains(&ms)), "{task}");
    let task_id = task["taskId"].as_str().unwrap();
    assert!(task_id.starts_with("mw-"), "{task_id}");
    assert_eq!(run["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task_id);
    assert_reference_chain(&run["result"]["structuredContent"], 3, 14);
    let progress: Vec<f64> =
        run["progress"].as_array().unwrap().iter().map(|p| p["progress"].as_f64().unwrap()).collect();
    assert!(!progress.is_empty(), "no progress notifications: {run:#}");
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "progress must increase: {progress:?}");
    assert_eq!(progress.last(), Some(&3.0));
    // The same task read afterwards: completed, and listed.
    let got = TaskClient::TypeScript2025.run(&url, None, false, &["get", task_id]).await;
    assert_eq!(got["task"]["status"], "completed", "{got:#}");
    assert!(got["task"].get("pollInterval").is_none(), "{got:#}");

    // TypeScript callToolStream: created, polled, result.
    let stream = TaskClient::TypeScript2025
        .run(&url, None, false, &["stream", r#"{"difficulty":12,"blocks":2}"#])
        .await;
    let kinds: Vec<&str> =
        stream["messages"].as_array().unwrap().iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"taskCreated"), "{stream:#}");
    assert_eq!(kinds.last(), Some(&"result"), "{stream:#}");
    assert_reference_chain(
        &stream["messages"].as_array().unwrap().last().unwrap()["result"]["structuredContent"],
        2,
        12,
    );

    // Python: call_tool_as_task, poll_task, get_task_result.
    let run =
        TaskClient::Python2025.run(&url, None, false, &["run", r#"{"difficulty":13,"blocks":2}"#]).await;
    let statuses: Vec<&str> =
        run["statuses"].as_array().unwrap().iter().map(|s| s["status"].as_str().unwrap()).collect();
    assert_eq!(statuses.last(), Some(&"completed"), "{run:#}");
    assert_reference_chain(&run["result"]["structuredContent"], 2, 13);
    let listed = TaskClient::Python2025.run(&url, None, false, &["list"]).await;
    let ids: Vec<&str> =
        listed["tasks"].as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap()).collect();
    assert!(ids.contains(&task_id), "{listed:#}");
}

#[tokio::test]
async fn core_2025_cancel_list_pages_and_caller_scoping() {
    let ns = TestNamespace::new("tasks-2025-scope").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let tokens = tokens_file("alice-secret alice\nbob-secret bob\n");
    let frontend = FrontendProcess::start(
        &ns.name,
        &["--auth", "tokens", "--tokens-file", tokens.to_str().unwrap(), "--task-list-page-size", "2"],
    )
    .await;
    let url = frontend.url();
    let (alice, bob) = (Some("alice-secret"), Some("bob-secret"));
    let slow = json!({"difficulty": 30, "blocks": 2});

    let mut started = Vec::new();
    for client in [TaskClient::TypeScript2025, TaskClient::Python2025, TaskClient::TypeScript2025] {
        started.push(client.start(&url, alice, &slow).await);
    }
    for client in TaskClient::CORE_2025 {
        // Another caller's task does not exist for bob, in every method.
        for method in ["get", "cancel", "result"] {
            let document = client.run(&url, bob, false, &[method, &started[0]]).await;
            assert_eq!(error_code(&document), Some(-32602), "{client:?} {method}: {document:#}");
        }
        let listed = client.run(&url, bob, false, &["list"]).await;
        assert_eq!(listed["tasks"], json!([]), "{client:?}: {listed:#}");
        // Alice's list comes in pages of two with an opaque cursor.
        let first = client.run(&url, alice, false, &["list"]).await;
        assert_eq!(first["tasks"].as_array().unwrap().len(), 2, "{client:?}: {first:#}");
        let cursor = first["nextCursor"].as_str().expect("a cursor to the next page");
        let second = client.run(&url, alice, false, &["list", cursor]).await;
        assert_eq!(second["tasks"].as_array().unwrap().len(), 1, "{client:?}: {second:#}");
        assert!(second.get("nextCursor").is_none_or(Value::is_null), "{second:#}");
        let mut ids: Vec<String> = [&first, &second]
            .iter()
            .flat_map(|page| {
                page["tasks"].as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap().to_string())
            })
            .collect();
        ids.sort();
        let mut expected = started.clone();
        expected.sort();
        assert_eq!(ids, expected, "{client:?}");
        let garbage = client.run(&url, alice, false, &["list", "not-a-cursor"]).await;
        assert_eq!(error_code(&garbage), Some(-32602), "{garbage:#}");
    }

    // tasks/cancel answers `cancelled` at once; every later read agrees; a
    // second cancel is refused; tasks/result gives the cancelled outcome.
    for (client, id) in [(TaskClient::TypeScript2025, &started[0]), (TaskClient::Python2025, &started[1])] {
        let cancelled = client.run(&url, alice, false, &["cancel", id]).await;
        assert_eq!(cancelled["task"]["status"], "cancelled", "{client:?}: {cancelled:#}");
        let got = client.run(&url, alice, false, &["get", id]).await;
        assert_eq!(got["task"]["status"], "cancelled", "{client:?}: {got:#}");
        let again = client.run(&url, alice, false, &["cancel", id]).await;
        assert_eq!(error_code(&again), Some(-32602), "{client:?}: {again:#}");
        let result = client.run(&url, alice, false, &["result", id]).await;
        assert_eq!(result["result"]["structuredContent"]["status"], "cancelled", "{client:?}: {result:#}");
    }
    // A completed task cannot be cancelled either.
    let done =
        TaskClient::Python2025.run(&url, alice, false, &["run", r#"{"difficulty":8,"blocks":1}"#]).await;
    let done_id = done["task"]["taskId"].as_str().unwrap();
    let refused = TaskClient::TypeScript2025.run(&url, alice, false, &["cancel", done_id]).await;
    assert_eq!(error_code(&refused), Some(-32602), "{refused:#}");
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("terminal status: completed"),
        "{refused:#}"
    );
    let _ = TaskClient::TypeScript2025.run(&url, alice, false, &["cancel", &started[2]]).await;
}

#[tokio::test]
async fn extension_2026_tasks_complete_cancel_and_stay_private() {
    let ns = TestNamespace::new("tasks-2026").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend =
        FrontendProcess::start_with_tokens(&ns.name, "alice-secret alice\nbob-secret bob\n", &[]).await;
    let url = frontend.url();
    let (alice, bob) = (Some("alice-secret"), Some("bob-secret"));
    let client = TaskClient::Extension2026;

    let init = client.run(&url, alice, false, &["init"]).await;
    assert_eq!(init["era"], "modern", "{init:#}");
    assert_eq!(init["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"], json!({}), "{init:#}");

    let run = client.run(&url, alice, false, &["run", r#"{"difficulty":13,"blocks":3}"#]).await;
    assert_eq!(run["kind"], "task", "{run:#}");
    assert_eq!(run["outcome"]["status"], "completed", "{run:#}");
    assert_reference_chain(&run["outcome"]["result"]["structuredContent"], 3, 13);
    let finished = run["taskId"].as_str().unwrap();

    // A mining failure is `completed` with a tool error (the extension's rule).
    let invalid = client.run(&url, alice, false, &["run", r#"{"difficulty":99}"#]).await;
    assert_eq!(invalid["kind"], "immediate", "bad arguments make no task: {invalid:#}");
    assert_eq!(invalid["outcome"]["result"]["isError"], true, "{invalid:#}");

    let slow = client.start(&url, alice, &json!({"difficulty": 30, "blocks": 2})).await;
    let got = client.run(&url, alice, false, &["get", &slow]).await;
    assert_eq!(got["task"]["status"], "working", "{got:#}");
    assert_eq!(got["task"]["ttl"], 86_400_000, "{got:#}");
    // Bob cannot see, settle or cancel it.
    for command in ["get", "settle", "cancel"] {
        let document = client.run(&url, bob, false, &[command, &slow]).await;
        let code = document["error"]["code"].as_i64().or(document["outcome"]["error"]["code"].as_i64());
        assert_eq!(code, Some(-32602), "bob {command}: {document:#}");
    }
    let cancelled = client.run(&url, alice, false, &["cancel", &slow]).await;
    assert_eq!(cancelled["cancelled"], slow, "{cancelled:#}");
    let settled = client.run(&url, alice, false, &["settle", &slow]).await;
    assert_eq!(settled["outcome"]["status"], "cancelled", "{settled:#}");
    // Cancel of a finished task is a no-op acknowledgement.
    let again = client.run(&url, alice, false, &["cancel", finished]).await;
    assert_eq!(again["cancelled"], finished, "{again:#}");
    let still = client.run(&url, alice, false, &["get", finished]).await;
    assert_eq!(still["task"]["status"], "completed", "{still:#}");

    // The extension has neither tasks/result nor tasks/list.
    for method in ["tasks/result", "tasks/list"] {
        let raw =
            client.run(&url, alice, false, &["raw", method, &json!({"taskId": finished}).to_string()]).await;
        assert_eq!(raw["status"], 404, "{method}: {raw:#}");
        assert_eq!(raw["message"]["error"]["code"], -32601, "{method}: {raw:#}");
    }
    // A tasks/get whose request does not declare the extension: -32021.
    let undeclared = client
        .run(&url, alice, false, &["raw", "tasks/get", &json!({"taskId": finished}).to_string(), "no-tasks"])
        .await;
    assert_eq!(undeclared["message"]["error"]["code"], -32021, "{undeclared:#}");
}

#[ignore = "needs the local cluster's local/failing-miner image; tests/run.sh runs it there"]
#[tokio::test]
async fn a_mining_failure_is_failed_in_2025_and_a_completed_tool_error_in_2026() {
    let ns = TestNamespace::new("tasks-failure").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(
        &ns.name,
        &["--miner-image", "local/failing-miner", "--job-backoff-limit", "0"],
    );
    let frontend = FrontendProcess::start(&ns.name, &[]).await;
    let url = frontend.url();
    let arguments = json!({"difficulty": 8, "blocks": 1});

    let core = TaskClient::Python2025.run(&url, None, false, &["run", &arguments.to_string()]).await;
    let last = core["statuses"].as_array().and_then(|s| s.last()).cloned().unwrap_or_default();
    assert_eq!(last["status"], "failed", "{core:#}");
    assert!(
        last["statusMessage"].as_str().unwrap_or_default().contains("Failed after mining 0 of 1"),
        "{last}"
    );
    assert_eq!(core["result"]["isError"], true, "{core:#}");
    assert_eq!(core["result"]["structuredContent"]["status"], "failed", "{core:#}");
    assert_eq!(core["result"]["structuredContent"]["reason"], "JobFailed", "{core:#}");
    let stream = TaskClient::TypeScript2025.run(&url, None, false, &["stream", &arguments.to_string()]).await;
    let last = stream["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
    assert_eq!(last["type"], "error", "the SDK reports a failed task as an error: {stream:#}");

    let extension = TaskClient::Extension2026.run(&url, None, false, &["run", &arguments.to_string()]).await;
    assert_eq!(extension["kind"], "task", "{extension:#}");
    assert_eq!(extension["outcome"]["status"], "completed", "{extension:#}");
    assert_eq!(extension["outcome"]["result"]["isError"], true, "{extension:#}");
    assert_eq!(extension["outcome"]["result"]["structuredContent"]["reason"], "JobFailed", "{extension:#}");
}

#[tokio::test]
async fn the_inspector_session_cli_gets_and_cancels_tasks() {
    let ns = TestNamespace::new("tasks-inspector").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = FrontendProcess::start(&ns.name, &[]).await;
    let url = frontend.url();
    let inspector = Mcpdo::connect(&url, "mining", "modern").await;

    let slow = TaskClient::Extension2026.start(&url, None, &json!({"difficulty": 30, "blocks": 2})).await;
    let got = inspector.run(&["tasks/get", &slow]).await;
    assert_eq!(got["task"]["status"], "working", "{got:#}");
    assert_eq!(got["task"]["taskId"], slow.as_str());
    let cancelled = inspector.run(&["tasks/cancel", &slow]).await;
    assert_eq!(cancelled["cancelled"], true, "{cancelled:#}");
    cluster_tests::eventually("the task to read cancelled", std::time::Duration::from_secs(60), || async {
        let got = inspector.run(&["tasks/get", &slow]).await;
        (got["task"]["status"] == "cancelled").then_some(())
    })
    .await;
    let unknown = inspector.run(&["tasks/get", "mw-aaaaaaaaaaaaaaaaaaaaaaaaaa"]).await;
    assert!(unknown["error"]["message"].as_str().unwrap_or_default().contains("unknown task"), "{unknown:#}");
    // A tool call through the Inspector on 2026-07-28 runs as a task and settles.
    let called = inspector.run(&["tools/call", "start_mining", "difficulty:=11", "blocks:=2"]).await;
    assert_reference_chain(&called["structuredContent"], 2, 11);
}

#[tokio::test]
async fn a_task_outlives_a_frontend_killed_mid_task_in_both_generations() {
    let ns = TestNamespace::new("tasks-restart").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = FrontendProcess::start(&ns.name, &[]).await;
    let url = frontend.url();
    let arguments = json!({"difficulty": 20, "blocks": 3});
    let core = TaskClient::TypeScript2025.start(&url, None, &arguments).await;
    let extension = TaskClient::Extension2026.start(&url, None, &arguments).await;

    let frontend = frontend.restart().await; // SIGKILL, then a new process
    assert_eq!(frontend.url(), url);
    let result = TaskClient::Python2025.run(&url, None, false, &["result", &core]).await;
    assert_reference_chain(&result["result"]["structuredContent"], 3, 20);
    let settled = TaskClient::Extension2026.run(&url, None, false, &["settle", &extension]).await;
    assert_eq!(settled["outcome"]["status"], "completed", "{settled:#}");
    assert_reference_chain(&settled["outcome"]["result"]["structuredContent"], 3, 20);
}

#[tokio::test]
async fn clients_that_declare_no_tasks_get_the_synchronous_tool() {
    let ns = TestNamespace::new("tasks-sync").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = FrontendProcess::start(&ns.name, &[]).await;
    let url = frontend.url();

    // The SDK clients' plain callTool is answered inline, as before tasks.
    for sdk in [Sdk::TypeScript, Sdk::Python] {
        let document = sdk.call(&url, None, "start_mining", json!({"difficulty": 10, "blocks": 2})).await;
        assert_reference_chain(structured(&document), 2, 10);
    }
    let plain =
        TaskClient::Extension2026.run(&url, None, false, &["sync", r#"{"difficulty":10,"blocks":2}"#]).await;
    assert!(plain["result"].get("taskId").is_none(), "{plain:#}");
    assert_reference_chain(&plain["result"]["structuredContent"], 2, 10);

    // Byte for byte: a tools/call without params.task on 2025-11-25 gets the
    // very answer rmcp gives a 2025-06-18 request (the task layer stays out).
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "start_mining", "arguments": {"difficulty": 9, "blocks": 1, "idempotency_key": "same"}}})
    .to_string();
    let older = frontend.post_mcp_version("localhost", "2025-06-18", &[], &call).await;
    let newer = frontend.post_mcp_version("localhost", "2025-11-25", &[], &call).await;
    assert_eq!(older.0, 200, "{older:?}");
    assert!(older.2.contains(r#""status":"completed""#), "{}", older.2);
    assert_eq!(older.2, newer.2);
    let list = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}).to_string();
    let older = frontend.post_mcp_version("localhost", "2025-06-18", &[], &list).await;
    assert!(!older.2.contains("taskSupport"), "older versions see no task fields: {}", older.2);
    // A foreign Host is refused before any layer answers (DNS rebinding).
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    assert_eq!(frontend.post_mcp_version("evil.example.com", "2025-11-25", &[], &init).await.0, 403);
}

#[path = "frontend_tasks/wire.rs"]
mod wire;
