//! A task's wire, read raw: the 2025-11-25 result stream tells each status
//! change as the whole task, and a task is kept for the TTL it asked for.

use super::*;

/// The one JSON-RPC message of a body, as SSE or JSON (chunked or not).
fn only_message(body: &str) -> Value {
    if let Some(last) = sse_messages(body).pop() {
        return last;
    }
    let (start, end) = (body.find('{').expect(body), body.rfind('}').expect(body));
    serde_json::from_str(&body[start..=end]).expect(body)
}

/// The JSON-RPC messages of an SSE body, in order.
fn sse_messages(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

#[tokio::test]
async fn a_2025_tasks_result_stream_tells_the_status_change_as_the_full_task() {
    let ns = TestNamespace::new("tasks-2025-status").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = FrontendProcess::start(&ns.name, &[]).await;
    let post = |body: Value, accept: &'static str| {
        let frontend = &frontend;
        async move {
            let accept = format!("Accept: {accept}");
            frontend.post_mcp_version("localhost", "2025-11-25", &[accept.as_str()], &body.to_string()).await
        }
    };
    let create = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "start_mining", "arguments": {"difficulty": 12, "blocks": 2},
                   "task": {"ttl": 60000}, "_meta": {"progressToken": "p1"}}});
    let (code, _, body) = post(create, "application/json").await;
    assert_eq!(code, 200, "{body}");
    let created = only_message(&body);
    let task_id = created["result"]["task"]["taskId"].as_str().unwrap().to_string();

    // Blocked in tasks/result on a stream: progress, then the status change, then the answer.
    let result = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/result", "params": {"taskId": task_id}});
    let (code, _, body) = post(result.clone(), "text/event-stream, application/json").await;
    assert_eq!(code, 200, "{body}");
    let messages = sse_messages(&body);
    let methods: Vec<&str> = messages.iter().map(|m| m["method"].as_str().unwrap_or("(response)")).collect();
    let status_at = methods.iter().position(|m| *m == "notifications/tasks/status").expect(&body);
    assert_eq!(status_at, messages.len() - 2, "the status change just before the answer: {methods:?}");
    assert!(methods[..status_at].iter().all(|m| *m == "notifications/progress"), "{methods:?}");
    assert_eq!(messages.last().unwrap()["id"], 2, "{body}");
    let told = &messages[status_at]["params"];
    assert_eq!(told["status"], "completed", "{told}");
    // The full task, as tasks/get gives it.
    let get = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": task_id}});
    let (_, _, body) = post(get, "application/json").await;
    let got = only_message(&body);
    assert_eq!(told, &got["result"], "the notification is the task as tasks/get has it");
    assert_eq!(got["result"]["ttl"], 60_000, "the ttl asked for is kept: {got}");

    // Asked again once finished, nothing changes during the call: no status notification.
    let (_, _, body) = post(result.clone(), "text/event-stream, application/json").await;
    let methods: Vec<Value> = sse_messages(&body).iter().map(|m| m["method"].clone()).collect();
    assert!(!methods.contains(&json!("notifications/tasks/status")), "{body}");
    // Without a stream, the answer alone.
    let (_, _, body) = post(result, "application/json").await;
    let answer = only_message(&body);
    assert_eq!(answer["id"], 2, "{body}");
}

#[tokio::test]
async fn a_task_kept_for_the_ttl_it_asked_then_answers_expired_and_others_not_found() {
    let ns = TestNamespace::new("tasks-expiry").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend =
        FrontendProcess::start_with_tokens(&ns.name, "alice-secret alice\nbob-secret bob\n", &[]).await;
    let post = |token: &'static str, body: Value| {
        let frontend = &frontend;
        async move {
            let auth = format!("Authorization: Bearer {token}");
            let (_, _, text) = frontend
                .post_mcp_version(
                    "localhost",
                    "2025-11-25",
                    &[auth.as_str(), "Accept: application/json"],
                    &body.to_string(),
                )
                .await;
            only_message(&text)
        }
    };
    // Kept one second after it finishes, as asked.
    let create = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "start_mining", "arguments": {"difficulty": 8, "blocks": 1}, "task": {"ttl": 1000}}});
    let created = post("alice-secret", create).await;
    let task_id =
        created["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{created}")).to_string();
    assert_eq!(created["result"]["task"]["ttl"], 1000, "{created}");
    let get = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": task_id}});
    let expired = cluster_tests::eventually(
        "the task to be deleted after its ttl",
        std::time::Duration::from_secs(60),
        || {
            let get = get.clone();
            let post = &post;
            async move {
                let answer = post("alice-secret", get).await;
                answer.get("error").is_some().then_some(answer)
            }
        },
    )
    .await;
    assert_eq!(expired["error"]["code"], -32602, "{expired}");
    let message = expired["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("Task has expired"), "{expired}");
    // Bob asking for Alice's id, or anyone for an id never issued: not found, alike.
    let bobs = post("bob-secret", get.clone()).await;
    let never = post(
        "alice-secret",
        json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": "mw-aaaaaaaaaaaaaaaaaaaaaaaaaa"}}),
    )
    .await;
    for answer in [&bobs, &never] {
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap_or_default().contains("Task not found"),
            "{answer}"
        );
    }
}
