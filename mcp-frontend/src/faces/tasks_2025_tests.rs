use super::*;
use crate::tasks::TaskState;
use crate::tools::START_MINING;

#[test]
fn only_2025_11_25_requests_are_answered_here() {
    let none = Value::Null;
    let task = json!({"name": "start_mining", "task": {"ttl": 60000}});
    assert_eq!(route("initialize", None, &json!({"protocolVersion": "2025-11-25"})), Route::Initialize);
    assert_eq!(route("initialize", None, &json!({"protocolVersion": "2025-06-18"})), Route::PassThrough);
    assert_eq!(route("initialize", None, &json!({})), Route::PassThrough);
    assert_eq!(route("tools/call", Some(PROTOCOL_VERSION), &task), Route::CreateTask);
    assert_eq!(route("tools/call", Some("2026-07-28"), &task), Route::PassThrough);
    assert_eq!(route("tools/call", None, &task), Route::PassThrough);
    assert_eq!(
        route("tools/call", Some(PROTOCOL_VERSION), &json!({"name": "start_mining"})),
        Route::PassThrough,
        "a call without params.task is an ordinary tool call"
    );
    assert_eq!(
        route("tools/call", Some(PROTOCOL_VERSION), &json!({"name": "start_mining", "task": null})),
        Route::PassThrough
    );
    for (method, expected) in [
        ("tools/list", Route::ListTools),
        ("tasks/get", Route::Get),
        ("tasks/result", Route::Result),
        ("tasks/list", Route::List),
        ("tasks/cancel", Route::Cancel),
        ("ping", Route::PassThrough),
        ("resources/list", Route::PassThrough),
    ] {
        assert_eq!(route(method, Some(PROTOCOL_VERSION), &none), expected, "{method}");
        assert_eq!(route(method, Some("2026-07-28"), &none), Route::PassThrough, "{method} on 2026");
    }
}

fn snapshot_of(state: TaskState, poll: Option<u64>) -> TaskSnapshot {
    TaskSnapshot {
        task_id: "mw-x".into(),
        state,
        status_message: "Mined 1 of 2 blocks; mining block 2".into(),
        created_at: "2026-11-22T10:00:00Z".into(),
        last_updated_at: "2026-11-22T10:00:05Z".into(),
        ttl_ms: 86_400_000,
        poll_interval_ms: poll,
        result_ready: false,
        result: crate::contract::MiningOutcome::not_found("mw-x").into_result(),
        input_requests: None,
    }
}

#[test]
fn the_task_object_has_integer_milliseconds_and_no_result_type() {
    let value = task_json(&snapshot_of(TaskState::Working, Some(3000)));
    assert_eq!(
        value,
        json!({
            "taskId": "mw-x", "status": "working",
            "statusMessage": "Mined 1 of 2 blocks; mining block 2",
            "createdAt": "2026-11-22T10:00:00Z", "lastUpdatedAt": "2026-11-22T10:00:05Z",
            "ttl": 86_400_000u64, "pollInterval": 3000,
        })
    );
    let finished = task_json(&snapshot_of(TaskState::Completed, None));
    assert!(finished.get("pollInterval").is_none());
    assert_eq!(finished["status"], "completed");
}

#[test]
fn a_task_result_is_the_tool_result_tied_to_its_task() {
    let value = task_result_json(snapshot_of(TaskState::Completed, None));
    assert_eq!(value["_meta"][RELATED_TASK]["taskId"], "mw-x");
    assert!(value.get("resultType").is_none(), "{value}");
    assert_eq!(value["structuredContent"]["status"], "not_found");
}

#[test]
fn only_start_mining_may_run_as_a_task() {
    let limits = crate::tools::Limits {
        max_difficulty: 32,
        default_difficulty: 21,
        default_blocks: 4,
        wait_budget_seconds: 20,
    };
    let listed = tools_json(&limits.tools(), |_| None);
    let tools = listed["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 4);
    for tool in tools {
        let expected = if tool["name"] == START_MINING { "optional" } else { "forbidden" };
        assert_eq!(tool["execution"]["taskSupport"], expected, "{}", tool["name"]);
        assert!(tool["inputSchema"].is_object());
    }
}

#[test]
fn cursors_round_trip_and_garbage_is_refused() {
    let name = format!("mw-{}", "a".repeat(26));
    assert_eq!(parse_cursor(&cursor_of(1_700_000_000, &name)), Some((1_700_000_000, name.clone())));
    for garbage in
        ["", "x", "12", "12.", "12.mw-short", "abc.mw-aaaaaaaaaaaaaaaaaaaaaaaaaa", &format!("1.{name}.x")]
    {
        assert_eq!(parse_cursor(garbage), None, "{garbage:?}");
    }
}

#[test]
fn a_status_notification_carries_the_full_task_as_tasks_get_does() {
    let task = snapshot_of(TaskState::Completed, None);
    let notification = status_notification(&task);
    assert_eq!(notification["method"], "notifications/tasks/status");
    assert_eq!(notification["params"], task_json(&task));
    assert!(notification.get("id").is_none(), "a notification has no id");
}

#[test]
fn a_tasks_ttl_is_kept_within_the_servers_retention_and_rounded_up_to_seconds() {
    let day: u64 = 86_400;
    assert_eq!(task_retention_seconds(None, day), Ok(None));
    assert_eq!(task_retention_seconds(Some(&Value::Null), day), Ok(None));
    assert_eq!(task_retention_seconds(Some(&json!(60_000)), day), Ok(Some(60)));
    assert_eq!(task_retention_seconds(Some(&json!(1_500)), day), Ok(Some(2)), "rounded up");
    assert_eq!(task_retention_seconds(Some(&json!(0)), day), Ok(Some(1)), "kept at least a second");
    assert_eq!(
        task_retention_seconds(Some(&json!(u64::MAX)), day),
        Ok(Some(86_400)),
        "no longer than the server keeps"
    );
    for bad in [json!(-1), json!(1.5), json!("60000"), json!({})] {
        assert!(task_retention_seconds(Some(&bad), day).is_err(), "{bad}");
    }
}

#[test]
fn a_request_put_to_the_client_is_tied_to_its_task_and_its_response_routes_back_to_it() {
    let request = json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Deploy?",
        "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}}}}});
    let sent = input_request_json("mw-abc.tag", "approve", &request);
    assert_eq!(sent["method"], "elicitation/create");
    assert_eq!(sent["params"]["message"], "Deploy?");
    assert_eq!(sent["params"]["_meta"][RELATED_TASK]["taskId"], "mw-abc.tag");
    let response = json!({"jsonrpc": "2.0", "id": sent["id"], "result": {"action": "accept", "content": {"approve": true}}});
    let (task, key, result) = input_response_of(&response).unwrap();
    assert_eq!((task.as_str(), key.as_str()), ("mw-abc.tag", "approve"));
    assert_eq!(result["action"], "accept");
    // Another id, an error, or a request is not an answer.
    assert_eq!(input_response_of(&json!({"jsonrpc": "2.0", "id": 7, "result": {}})), None);
    assert_eq!(input_response_of(&json!({"jsonrpc": "2.0", "id": sent["id"], "error": {"code": -1}})), None);
}
