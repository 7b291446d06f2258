//! Bounded by design: what one hostile caller, or an anonymous client, can
//! hold of the frontend and the operator. Each test is one finding of the
//! "bounded by design" issue, attacked as it was found. (The oversized
//! progress token is `frontend_protocol_edges::an_oversized_progress_token_…`.)

use mining_api::Work as _;
use std::time::{Duration, Instant};

use cluster_tests::mcp::{FrontendProcess, Sdk, ownership_key_file, structured, tokens_file};
use cluster_tests::{OperatorProcess, TestNamespace, eventually, install_crd, workflow};
use futures::future::join_all;
use kube::api::{Api, ListParams, PostParams};
use mining_api::{MiningWorkflow, WorkflowPhase, labels};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One `tools/call` as raw HTTP (no SDK: hundreds run at once).
async fn call_tool(frontend: &FrontendProcess, token: &str, tool: &str, arguments: Value) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}})
    .to_string();
    let auth = format!("Authorization: Bearer {token}");
    let (code, _, body) = frontend.post_mcp("localhost", &[&auth], &body).await;
    (code, body)
}

/// The tool result inside a JSON (or one-event SSE) response body.
fn result_of(body: &str) -> Value {
    let json = body.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or(body);
    serde_json::from_str::<Value>(json).unwrap_or(Value::Null)["result"].clone()
}

async fn unfinished_of(api: &Api<MiningWorkflow>) -> usize {
    let list = api.list(&ListParams::default().labels(labels::CALLER)).await.unwrap();
    list.items.iter().filter(|w| !w.is_finished()).count()
}

#[tokio::test]
async fn concurrent_starts_on_two_replicas_never_exceed_the_callers_limit() {
    let ns = TestNamespace::new("bounds-quota").await;
    install_crd(&ns.client).await;
    // No operator: every started workflow stays unfinished.
    let path = tokens_file("t-alice alice\n");
    let args = ["--auth", "tokens", "--tokens-file", path.to_str().unwrap(), "--max-running-per-caller", "5"];
    let replicas =
        [FrontendProcess::start(&ns.name, &args).await, FrontendProcess::start(&ns.name, &args).await];
    let starts = (0..60).map(|i| {
        let replica = &replicas[i % 2];
        async move { call_tool(replica, "t-alice", "start_mining", json!({"wait_seconds": 0})).await }
    });
    let answers = join_all(starts).await;
    let started = answers.iter().filter(|(_, body)| result_of(body)["isError"] == false).count();
    let refused: Vec<String> = answers
        .iter()
        .filter(|(_, body)| result_of(body)["isError"] == true)
        .map(|(_, body)| result_of(body)["content"][0]["text"].as_str().unwrap_or_default().to_string())
        .collect();
    // The API server, not a cache, is the arbiter: exactly five exist.
    let api: Api<MiningWorkflow> = ns.api();
    assert_eq!(unfinished_of(&api).await, 5, "answers: {answers:?}");
    assert_eq!(started, 5, "{answers:?}");
    assert_eq!(refused.len(), 55);
    // Each refusal says which limit and what to do; none names anyone.
    for text in &refused {
        assert!(text.contains("the limit is 5") || text.contains("quota could not be checked"), "{text}");
        assert!(!text.contains("alice"), "{text}");
    }
}

#[tokio::test]
async fn a_finished_workflow_frees_its_place_and_a_lost_ledger_is_rebuilt() {
    let ns = TestNamespace::new("bounds-release").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = FrontendProcess::start(&ns.name, &["--max-running-per-caller", "1"]).await;
    let mine = json!({"difficulty": 8, "blocks": 1, "wait_seconds": 20});
    for round in 0..2 {
        let (_, body) = call_tool(&frontend, "", "start_mining", mine.clone()).await;
        assert_eq!(result_of(&body)["structuredContent"]["status"], "completed", "round {round}: {body}");
    }
    // One left running holds the only place...
    let (_, body) =
        call_tool(&frontend, "", "start_mining", json!({"difficulty": 32, "wait_seconds": 0})).await;
    assert_eq!(result_of(&body)["structuredContent"]["status"], "running", "{body}");
    // ...also when its ledger is deleted: it is rebuilt from the API server.
    let ledgers: Api<mining_api::MiningLedger> = ns.api();
    let listed = ledgers.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1, "one ledger per caller");
    let name = listed.items[0].metadata.name.clone().unwrap();
    ledgers.delete(&name, &Default::default()).await.unwrap();
    let (_, body) = call_tool(&frontend, "", "start_mining", mine).await;
    let text = result_of(&body)["content"][0]["text"].as_str().unwrap_or_default().to_string();
    assert!(text.contains("the limit is 1"), "{body}");
}

#[tokio::test]
async fn starts_per_minute_are_limited_and_the_refusal_says_when_to_retry() {
    let ns = TestNamespace::new("bounds-rate").await;
    install_crd(&ns.client).await;
    let frontend = FrontendProcess::start(&ns.name, &["--max-starts-per-minute", "3"]).await;
    // Create-then-cancel: cancelled workflows are finished and free the
    // running quota, but not the rate.
    for _ in 0..3 {
        let (_, body) = call_tool(&frontend, "", "start_mining", json!({"wait_seconds": 0})).await;
        let id = result_of(&body)["structuredContent"]["workflow_id"].as_str().unwrap().to_string();
        call_tool(&frontend, "", "cancel_mining", json!({"workflow_id": id})).await;
    }
    let (_, body) = call_tool(&frontend, "", "start_mining", json!({"wait_seconds": 0})).await;
    let result = result_of(&body);
    assert_eq!(result["isError"], true, "{body}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("the limit is 3 per minute") && text.contains("retry in"), "{text}");
    let api: Api<MiningWorkflow> = ns.api();
    assert_eq!(api.list(&Default::default()).await.unwrap().items.len(), 3);
}

#[tokio::test]
async fn one_callers_many_waits_leave_anothers_wait_its_whole_budget() {
    let ns = TestNamespace::new("bounds-waits").await;
    install_crd(&ns.client).await;
    // No operator: every wait runs to its budget. All 500 calls come from
    // one address: the connection share per source is lifted, since the
    // bound under test here is the waits'.
    let path = tokens_file("t-mallory mallory\nt-bob bob\n");
    let args = [
        "--auth",
        "tokens",
        "--tokens-file",
        path.to_str().unwrap(),
        "--max-waits-per-caller",
        "8",
        "--max-connections-per-source",
        "1000",
    ];
    let frontend = FrontendProcess::start(&ns.name, &args).await;
    let start = |token: &'static str| {
        let frontend = &frontend;
        async move {
            let (_, body) = call_tool(frontend, token, "start_mining", json!({"wait_seconds": 0})).await;
            result_of(&body)["structuredContent"]["workflow_id"].as_str().unwrap().to_string()
        }
    };
    let (mallorys, bobs) = (start("t-mallory").await, start("t-bob").await);
    let flood = join_all((0..500).map(|_| {
        call_tool(
            &frontend,
            "t-mallory",
            "get_mining_result",
            json!({"workflow_id": mallorys, "wait_seconds": 20}),
        )
    }));
    let shortened = "mcp_frontend_waits_shortened_total{reason=\"per_caller\"}";
    let bobs_wait = async {
        eventually("the flood's waits to be cut short", Duration::from_secs(60), || async {
            (frontend.metric(shortened).await >= 480.0).then_some(())
        })
        .await;
        let began = Instant::now();
        let answer = call_tool(
            &frontend,
            "t-bob",
            "get_mining_result",
            json!({"workflow_id": bobs, "wait_seconds": 4}),
        )
        .await;
        (answer, began.elapsed())
    };
    let (answers, ((code, body), waited)) = tokio::join!(flood, bobs_wait);
    assert_eq!(code, 200, "{body}");
    assert_eq!(result_of(&body)["structuredContent"]["status"], "running", "{body}");
    assert!(waited >= Duration::from_millis(3_500), "bob's wait was cut short: {waited:?}");
    assert!(waited < Duration::from_secs(10), "bob's wait overran its budget: {waited:?}");
    assert!(answers.iter().all(|(code, _)| *code == 200), "every flooding call is answered, none hangs");
    assert!(frontend.metric(shortened).await <= 500.0 - 8.0 + 1e-9);
}

#[tokio::test]
async fn half_open_connections_are_closed_and_a_real_client_still_mines() {
    let ns = TestNamespace::new("bounds-slow").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend =
        FrontendProcess::start(&ns.name, &["--header-read-timeout-seconds", "2", "--max-connections", "150"])
            .await;
    let opened = Instant::now();
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut stream = tokio::net::TcpStream::connect(frontend.addr).await.unwrap();
        stream.write_all(b"POST /mcp HTTP/1.1\r\nHost: local").await.unwrap();
        slow.push(stream);
    }
    // Every one is closed by the server: the oldest 50 at once, each giving
    // its place to a newer one (none of them ever carried an authenticated
    // request), the rest when their head has not arrived within the timeout.
    let closed = join_all(slow.iter_mut().map(|stream| async move {
        let mut answer = Vec::new();
        let mut buffer = [0u8; 512];
        loop {
            match tokio::time::timeout(Duration::from_secs(15), stream.read(&mut buffer)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&answer).to_string()),
                Ok(Ok(n)) => answer.extend_from_slice(&buffer[..n]),
                Err(_) => return None,
            }
        }
    }))
    .await;
    let left_open = closed.iter().filter(|c| c.is_none()).count();
    assert_eq!(left_open, 0, "{left_open} connections were left open");
    assert!(opened.elapsed() < Duration::from_secs(12), "closed after {:?}", opened.elapsed());
    assert!(frontend.metric("mcp_frontend_connections_displaced_total").await >= 50.0);
    let mined = Sdk::TypeScript
        .call(&frontend.url(), None, "start_mining", json!({"difficulty": 8, "blocks": 2}))
        .await;
    assert_eq!(structured(&mined)["status"], "completed", "{mined:#}");
}

#[tokio::test]
async fn a_backlog_of_one_caller_does_not_delay_anothers_next_workflow() {
    let ns = TestNamespace::new("bounds-fair").await;
    install_crd(&ns.client).await;
    let api: Api<MiningWorkflow> = ns.api();
    // Two callers' workflows, as the frontend makes them (a caller label
    // counts only with the frontend's proof, which the operator checks).
    let keys =
        mcp_frontend::ownership::OwnershipKeys::from_files(&ownership_key_file(&ns.name), None).unwrap();
    let labelled = |name: &str, caller: &str, difficulty: u32| {
        let mut wf = workflow(name, json!({"difficulty": difficulty, "blocks": 1}));
        wf.metadata.namespace = Some(ns.name.clone());
        wf.metadata.labels = Some([(labels::CALLER.to_string(), caller.to_string())].into());
        let proof = keys.proof(&wf);
        wf.metadata.annotations = Some([(mining_api::annotations::OWNER_PROOF.to_string(), proof)].into());
        wf
    };
    // x's backlog of 301, then y's one workflow, newest of all; one slot.
    api.create(&PostParams::default(), &labelled("x-first", "x", 1)).await.unwrap();
    for chunk in (0..300).collect::<Vec<_>>().chunks(50) {
        join_all(chunk.iter().map(|i| {
            let api = api.clone();
            let wf = labelled(&format!("x-{i:03}"), "x", 1);
            async move { api.create(&PostParams::default(), &wf).await.unwrap() }
        }))
        .await;
    }
    api.create(&PostParams::default(), &labelled("y", "y", 1)).await.unwrap();
    let _operator = OperatorProcess::start(&ns.name, &["--max-concurrent-workflows", "1"]);
    // y is next: admitted at the first free slot after x's first, before
    // the 300 x queued ahead of it (first come, first served put y last).
    let finished = eventually("y to finish", Duration::from_secs(120), || async {
        let y = api.get("y").await.unwrap();
        y.is_finished().then_some(y)
    })
    .await;
    assert_eq!(finished.phase(), WorkflowPhase::Succeeded);
    let y_started = finished.status.as_ref().and_then(|s| s.started_at.clone()).unwrap().0;
    let list = api.list(&Default::default()).await.unwrap();
    let x_before_y: Vec<String> = list
        .items
        .iter()
        .filter(|w| w.metadata.name.as_deref().is_some_and(|n| n.starts_with("x-")))
        .filter(|w| w.status.as_ref().and_then(|s| s.started_at.as_ref()).is_some_and(|t| t.0 < y_started))
        .map(|w| {
            format!(
                "{} at {:?}",
                w.metadata.name.clone().unwrap_or_default(),
                w.status.as_ref().map(|s| &s.started_at)
            )
        })
        .collect();
    // The one slot went to x's oldest first (creation times tie within a
    // second, so that may be any of the first ones), then to y.
    assert!(x_before_y.len() <= 1, "x's backlog went before y (started {y_started}): {x_before_y:?}");
}

/// A connection to `frontend` from the loopback address `source`.
async fn connect_from(source: &str, frontend: &FrontendProcess) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{source}:0").parse().unwrap())?;
    socket.connect(frontend.addr).await
}

/// Reads until the server closes the stream or `within` passes: what it
/// said, and whether it closed.
async fn read_until_closed(stream: &mut tokio::net::TcpStream, within: Duration) -> (String, bool) {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&answer).into(), true),
            Ok(Ok(n)) => answer.extend_from_slice(&buffer[..n]),
            Err(_) => return (String::from_utf8_lossy(&answer).into(), false),
        }
    }
}

#[tokio::test]
async fn one_anonymous_client_holding_connections_costs_real_callers_nothing() {
    let ns = TestNamespace::new("bounds-conns").await;
    install_crd(&ns.client).await;
    let path = tokens_file("t-alice alice\n");
    let args = [
        "--auth",
        "tokens",
        "--tokens-file",
        path.to_str().unwrap(),
        "--max-connections",
        "120",
        "--max-connections-per-source",
        "40",
    ];
    let frontend = FrontendProcess::start(&ns.name, &args).await;
    // The attacker, from another address, opens the whole cap's worth and
    // holds them idle.
    let mut held = Vec::new();
    for _ in 0..120 {
        held.push(connect_from("127.0.0.2", &frontend).await.unwrap());
    }
    let answers =
        join_all(held.iter_mut().map(|stream| read_until_closed(stream, Duration::from_secs(2)))).await;
    // Past its address's share, each new one took the place of its oldest:
    // the address holds its share and no more.
    let closed = answers.iter().filter(|(_, closed)| *closed).count();
    assert_eq!(closed, 80, "{:?}", answers.iter().find(|(_, closed)| *closed));
    assert_eq!(frontend.metric("mcp_frontend_connections_displaced_total").await, 80.0);
    let mut held: Vec<_> =
        held.into_iter().zip(answers).filter(|(_, (_, closed))| !closed).map(|(s, _)| s).collect();
    // Real callers meanwhile: no call fails.
    let calls = (0..40).map(|_| async {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
        frontend.post_mcp("localhost", &["Authorization: Bearer t-alice"], &body).await.0
    });
    let codes = join_all(calls).await;
    assert!(codes.iter().all(|code| *code == 200), "real callers failed: {codes:?}");
    // A request without a credential is answered 401 and its connection
    // closed: keeping it alive with refused requests is not possible.
    let stream = &mut held[0];
    stream.write_all(b"GET /mcp HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    let (answer, closed) = read_until_closed(stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
    assert!(closed, "the connection was kept after a 401");
}
