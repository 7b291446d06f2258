//! Push: `subscriptions/listen` of the 2026-07-28 Tasks extension, read raw
//! from the wire as it arrives, against two frontend replicas and the real
//! operator: the acknowledgement names only the caller's own tasks, every
//! push is the task as `tasks/get` gives it, nothing else is sent, the
//! stream ends once the work is told, caps refuse with the limit, a closed
//! stream is released, and a stopping server ends listens gracefully.

use std::time::Duration;

use cluster_tests::mcp::FrontendProcess;
use cluster_tests::sse::SseStream;
use cluster_tests::tasks::TaskClient;
use cluster_tests::{OperatorProcess, TestNamespace, eventually, install_crd};
use serde_json::{Value, json};

const ALICE_AND_BOB: &str = "alice-secret alice\nbob-secret bob\n";
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Opens a listen on `frontend` as `token` with request id `id`.
async fn listen(
    frontend: &FrontendProcess,
    token: &str,
    id: &str,
    notifications: Value,
    declare: bool,
) -> SseStream {
    cluster_tests::sse::listen(frontend.addr, token, id, notifications, declare).await
}

/// A two-block `start_mining` task of `token`'s caller.
async fn create_task(frontend: &FrontendProcess, token: &str, difficulty: u32) -> String {
    frontend.start_2025_task(token, &json!({"difficulty": difficulty, "blocks": 2})).await
}

/// The task as the 2026-07-28 `tasks/get` returns it, without the result's discriminator.
async fn get_task(url: &str, token: &str, task_id: &str) -> Value {
    let params = json!({"taskId": task_id}).to_string();
    let document =
        TaskClient::Extension2026.run(url, Some(token), false, &["raw", "tasks/get", &params]).await;
    let mut result = document["message"]["result"].clone();
    let object = result.as_object_mut().unwrap_or_else(|| panic!("no task: {document:#}"));
    object.remove("resultType");
    object.remove("_meta");
    result
}

fn without_meta(params: &Value) -> Value {
    let mut params = params.clone();
    params.as_object_mut().unwrap().remove("_meta");
    params
}

/// Numbers as the values they are: the JavaScript client reads `1.0` back as `1`.
fn numbers_as_values(value: &Value) -> Value {
    match value {
        Value::Number(number) => json!(number.as_f64()),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_values).collect()),
        Value::Object(fields) => {
            Value::Object(fields.iter().map(|(key, item)| (key.clone(), numbers_as_values(item))).collect())
        }
        other => other.clone(),
    }
}

#[tokio::test]
async fn a_listen_on_the_other_replica_is_told_each_status_change_of_the_callers_own_tasks_only() {
    let ns = TestNamespace::new("listen-push").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let (creating, listening) = tokio::join!(
        FrontendProcess::start_with_tokens(&ns.name, ALICE_AND_BOB, &[]),
        FrontendProcess::start_with_tokens(&ns.name, ALICE_AND_BOB, &[])
    );

    // Slow enough that the listen opens while it is still working.
    let mine = create_task(&creating, "alice-secret", 21).await;
    let bobs = create_task(&creating, "bob-secret", 12).await;
    let requested = json!({"taskIds": [mine, bobs, "mw-not-a-task", mine]});
    let mut stream = listen(&listening, "alice-secret", "listen-1", requested, true).await;
    assert_eq!(stream.status, 200, "{}", stream.head);
    assert!(stream.is_event_stream(), "{}", stream.head);

    // The acknowledgement first: exactly the caller's own task, once.
    let ack = stream.next(Duration::from_secs(10)).await.expect("an acknowledgement");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["notifications"], json!({"taskIds": [mine]}), "{ack}");
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], "listen-1", "{ack}");
    assert!(!ack.to_string().contains(&bobs), "another caller's task is never named");

    // Then task notifications only, each tagged, until the task is
    // completed; then the listen's result ends the stream.
    let mut pushed: Vec<Value> = Vec::new();
    let closing = loop {
        let message =
            stream.next(Duration::from_secs(120)).await.expect("the task to be told as it finishes");
        if message.get("id").is_some() {
            break message;
        }
        assert_eq!(message["method"], "notifications/tasks", "nothing but task notifications: {message}");
        assert_eq!(message["params"]["_meta"][SUBSCRIPTION_ID], "listen-1", "{message}");
        assert_eq!(message["params"]["taskId"], mine.as_str(), "{message}");
        pushed.push(message["params"].clone());
    };
    assert_eq!(closing["id"], "listen-1", "{closing}");
    assert_eq!(closing["result"]["_meta"][SUBSCRIPTION_ID], "listen-1", "{closing}");
    assert!(stream.ends_within(Duration::from_secs(10)).await, "the stream ends with its result");
    let statuses: Vec<&str> = pushed.iter().map(|task| task["status"].as_str().unwrap_or("?")).collect();
    assert_eq!(statuses.first(), Some(&"working"), "told as it is when the listen opens: {statuses:?}");
    assert_eq!(statuses.last(), Some(&"completed"), "then told the change: {statuses:?}");
    eprintln!("told: {statuses:?}");
    assert!(statuses[..statuses.len() - 1].iter().all(|s| *s == "working"), "{statuses:?}");
    let told = pushed.last().unwrap();
    assert!(
        told["result"]["structuredContent"]["result"]["blocks"].is_array(),
        "the result comes with it: {told}"
    );

    // The push is the task exactly as tasks/get has it.
    let got = get_task(&creating.url(), "alice-secret", &mine).await;
    assert_eq!(
        numbers_as_values(&without_meta(told)),
        numbers_as_values(&got),
        "the notification is the task as tasks/get gives it"
    );

    // A finished task is told at once, then the listen ends.
    let mut again = listen(&listening, "alice-secret", "listen-2", json!({"taskIds": [mine]}), true).await;
    let ack = again.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([mine]), "{ack}");
    let now = again.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(now["params"]["status"], "completed", "{now}");
    assert_eq!(again.next(Duration::from_secs(10)).await.unwrap()["id"], "listen-2");

    // Bob's listen on the same ids acknowledges only his own task.
    let mut bob = listen(&listening, "bob-secret", "b7", json!({"taskIds": [mine, bobs]}), true).await;
    let ack = bob.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([bobs]), "{ack}");
}

#[tokio::test]
async fn listens_are_refused_without_the_extension_and_over_the_caps_and_released_when_closed() {
    let ns = TestNamespace::new("listen-caps").await;
    install_crd(&ns.client).await;
    let frontend =
        FrontendProcess::start_with_tokens(&ns.name, ALICE_AND_BOB, &["--max-listens-per-caller", "2"]).await;

    // Task notifications asked without declaring the extension: -32021.
    let mut undeclared = listen(&frontend, "alice-secret", "u", json!({"taskIds": ["mw-x"]}), false).await;
    assert!(!undeclared.is_event_stream(), "{}", undeclared.head);
    let refused = undeclared.next(Duration::from_secs(10)).await.expect("an error");
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({}),
        "{refused}"
    );

    // A listen that acknowledges nothing stays open.
    let nothing = json!({"resourceSubscriptions": ["file:///x"]});
    let mut first = listen(&frontend, "alice-secret", "a1", nothing.clone(), true).await;
    let ack = first.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(ack["params"]["notifications"], json!({}), "nothing asked is sent here: {ack}");
    let mut second = listen(&frontend, "alice-secret", "a2", nothing.clone(), true).await;
    assert!(second.next(Duration::from_secs(10)).await.is_some());
    assert!(first.next(Duration::from_secs(2)).await.is_none(), "held open, nothing sent");

    // One more is refused, with the cap and when to retry; others are not.
    let mut third = listen(&frontend, "alice-secret", "a3", nothing.clone(), true).await;
    let refused = third.next(Duration::from_secs(10)).await.expect("a refusal");
    assert_eq!(refused["id"], "a3", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("at most 2 for one caller"), "{refused}");
    assert_eq!(refused["error"]["data"]["retryAfterSeconds"], 5, "{refused}");
    let mut bob = listen(&frontend, "bob-secret", "b1", nothing.clone(), true).await;
    let ack = bob.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "a caller at its cap blocks nobody"
    );
    assert_eq!(frontend.metric("mcp_frontend_listens_open").await, 3.0);

    // Closing a stream releases its slot at once.
    drop(first);
    eventually("the closed listen to be released", Duration::from_secs(10), || async {
        (frontend.metric("mcp_frontend_listens_open").await == 2.0).then_some(())
    })
    .await;
    let mut fourth = listen(&frontend, "alice-secret", "a4", nothing, true).await;
    let ack = fourth.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], "a4", "{ack}");

    // A stopping server ends every listen with its result.
    let pid = frontend.pid().to_string();
    let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
    assert!(status.success());
    for (stream, id) in [(&mut second, "a2"), (&mut bob, "b1"), (&mut fourth, "a4")] {
        let last = stream.next(Duration::from_secs(10)).await.expect("the listen's result at shutdown");
        assert_eq!(last["id"], id, "{last}");
        assert_eq!(last["result"]["_meta"][SUBSCRIPTION_ID], id, "{last}");
    }
}

#[tokio::test]
async fn the_typescript_sdks_own_listen_is_pushed_the_finished_task() {
    let ns = TestNamespace::new("listen-sdk").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = FrontendProcess::start_with_tokens(&ns.name, "alice-secret alice\n", &[]).await;
    let arguments = r#"{"difficulty":12,"blocks":2}"#;
    let document = TaskClient::Extension2026
        .run(&frontend.url(), Some("alice-secret"), false, &["listen", arguments])
        .await;
    let task_id = document["taskId"].as_str().unwrap_or_else(|| panic!("no task: {document:#}"));
    let pushes = document["pushes"].as_array().unwrap_or_else(|| panic!("{document:#}"));
    assert!(!pushes.is_empty(), "{document:#}");
    for push in pushes {
        assert_eq!(push["method"], "notifications/tasks", "nothing but task notifications: {document:#}");
        assert_eq!(push["params"]["taskId"], task_id, "{document:#}");
    }
    let last = &pushes.last().unwrap()["params"];
    assert_eq!(last["status"], "completed", "{document:#}");
    assert!(last["result"]["structuredContent"]["result"]["blocks"].is_array(), "{document:#}");
    assert_eq!(document["ended"], "graceful", "the server ended the listen once all was told: {document:#}");
}

/// A listen that asks for `toolsListChanged` is acknowledged for it and
/// told `notifications/tools/list_changed` when an McpTool is defined on
/// the namespace the frontend serves (through the one catalog watch).
#[tokio::test]
async fn a_listen_is_told_when_the_tools_change() {
    let ns = TestNamespace::new("listen-tools").await;
    install_crd(&ns.client).await;
    let frontend = FrontendProcess::start_with_tokens(&ns.name, ALICE_AND_BOB, &[]).await;
    let mut stream =
        listen(&frontend, "alice-secret", "tools-1", json!({"toolsListChanged": true}), false).await;
    assert!(stream.is_event_stream());
    let ack = stream.next(Duration::from_secs(10)).await.expect("an acknowledgement");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"], json!({"toolsListChanged": true}), "{ack:#}");
    let tools: kube::Api<mining_api::McpTool> = ns.api();
    let defined = cluster_tests::tools::tool("new-sum", 20, json!({}));
    tools.create(&kube::api::PostParams::default(), &defined).await.unwrap();
    // Each message waited for with a timeout; the change must come within 30 s.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let told = loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let message = stream.next(left).await.expect("notifications/tools/list_changed within 30 s");
        if message["method"] == "notifications/tools/list_changed" {
            break message;
        }
    };
    assert_eq!(told["params"]["_meta"][SUBSCRIPTION_ID], "tools-1", "{told:#}");
}
