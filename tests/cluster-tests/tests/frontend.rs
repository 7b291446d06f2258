//! The MCP frontend end to end: official MCP clients (TypeScript and Python
//! SDKs) → mcp-frontend → MiningWorkflow → operator → Jobs on the real API
//! server. Each test has its own namespace, operator and frontend.

use std::time::Duration;

use cluster_tests::mcp::{FrontendProcess, Sdk, collect, ownership_key_file, structured, tool_error_text};
use cluster_tests::{Stack, assert_reference_chain, eventually, wait_for};
use kube::api::Api;
use mcp_frontend::ids::{Caller, WorkId};
use mcp_frontend::ownership::OwnershipKeys;
use mining_api::{MiningWorkflow, WorkflowPhase};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn both_sdks_mine_inline_within_the_budget_with_ordered_progress() {
    let stack = Stack::start("mcp-inline", &[]).await;
    for (sdk, difficulty) in [(Sdk::TypeScript, 12), (Sdk::Python, 13)] {
        let document = sdk
            .run(
                &stack.frontend.url(),
                None,
                true,
                &[
                    "call",
                    "start_mining",
                    &json!({"difficulty": difficulty, "blocks": 3, "wait_seconds": 20}).to_string(),
                ],
            )
            .await;
        let outcome = structured(&document);
        assert_reference_chain(outcome, 3, difficulty);
        assert_eq!(document["result"]["isError"], false);
        // Progress arrives in order, ends at the total, and carries the status message.
        let progress = document["progress"].as_array().unwrap();
        assert!(!progress.is_empty(), "{sdk:?}: no progress notifications");
        let values: Vec<f64> = progress.iter().map(|p| p["progress"].as_f64().unwrap()).collect();
        assert!(values.windows(2).all(|w| w[0] < w[1]), "{sdk:?}: progress not increasing: {values:?}");
        assert_eq!(values.last(), Some(&3.0));
        assert!(progress.iter().all(|p| p["total"] == 3.0), "{progress:?}");
        assert!(progress.last().unwrap()["message"].as_str().unwrap().starts_with("Mined all 3 blocks"));
    }
    // The same call without a progress token works the same, minus notifications.
    let document = Sdk::TypeScript
        .call(&stack.frontend.url(), None, "start_mining", json!({"difficulty": 12, "blocks": 3}))
        .await;
    assert_reference_chain(structured(&document), 3, 12);
    assert!(document["progress"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn budget_expiry_answers_running_and_polling_completes() {
    let stack = Stack::start("mcp-poll", &[]).await;
    let url = stack.frontend.url();
    // wait_seconds 0 answers at once, before any Pod ran.
    let document = Sdk::Python
        .call(
            &url,
            None,
            "start_mining",
            json!({"difficulty": 14, "blocks": 4, "wait_seconds": 0, "parallelism": 2}),
        )
        .await;
    let outcome = structured(&document).clone();
    assert_eq!(outcome["status"], "running", "{outcome:#}");
    let id = outcome["workflow_id"].as_str().unwrap().to_string();
    assert!(id.starts_with("mw-") && id.len() == 29, "{id}");
    let poll_after = outcome["poll_after_seconds"].as_u64().unwrap();
    assert!((1..=60).contains(&poll_after), "{poll_after}");
    let next = outcome["next"].as_str().unwrap();
    assert!(next.contains("get_mining_result") && next.contains(&id), "{next}");
    // The resource exists under that name, labelled with its caller.
    let api: Api<MiningWorkflow> = stack.ns.api();
    let workflow = api.get(&id).await.expect("the workflow exists under its id");
    assert!(workflow.metadata.labels.unwrap().contains_key(mining_api::labels::CALLER));
    assert_eq!(workflow.spec.parallelism, 2, "parallelism reaches the workflow");

    let finished = stack.poll_until_final(Sdk::TypeScript, None, &id).await;
    assert_reference_chain(&finished, 4, 14);

    // A budget that runs out: a harder chain, one second of waiting.
    let document = Sdk::TypeScript
        .call(&url, None, "start_mining", json!({"difficulty": 24, "blocks": 4, "wait_seconds": 1}))
        .await;
    let outcome = structured(&document).clone();
    assert_eq!(outcome["status"], "running", "{outcome:#}");
    let id = outcome["workflow_id"].as_str().unwrap().to_string();
    let finished = stack.poll_until_final(Sdk::Python, None, &id).await;
    assert_eq!(finished["status"], "completed", "{finished:#}");
}

#[tokio::test]
async fn a_restarted_frontend_loses_nothing_and_idempotent_retries_find_the_same_workflow() {
    let mut stack = Stack::start("mcp-restart", &[]).await;
    let url = stack.frontend.url();
    // Long enough (seconds a block, eight blocks) that the kill below lands
    // during the wait: with three, a fast run ended before the waiting
    // client had registered its wait (seen once under load).
    let start = json!({"difficulty": 26, "blocks": 8, "wait_seconds": 0, "idempotency_key": "agent-run-1"});
    let first = structured(&Sdk::TypeScript.call(&url, None, "start_mining", start.clone()).await).clone();
    let id = first["workflow_id"].as_str().unwrap().to_string();

    // SIGKILL between start and poll.
    stack.frontend = stack.frontend.restart().await;
    let again = structured(&Sdk::Python.call(&url, None, "start_mining", start.clone()).await).clone();
    assert_eq!(again["workflow_id"], id.as_str(), "the retry found the first workflow");

    // SIGKILL during a wait: the waiting client loses its connection and, as
    // SDK clients do, waits out its own request timeout (30 s here).
    let wait_args = json!({"workflow_id": id, "wait_seconds": 20}).to_string();
    let mut waiting = Sdk::TypeScript.command(&url, None, false, &["call", "get_mining_result", &wait_args]);
    let waiting = waiting.env("MCP_TIMEOUT_SECONDS", "30").spawn().unwrap();
    eventually("the wait to be registered", Duration::from_secs(30), || async {
        let (_, metrics) = stack.frontend.get("/metrics").await;
        metrics.lines().any(|l| l.starts_with("mcp_frontend_waiters ") && !l.ends_with(" 0")).then_some(())
    })
    .await;
    stack.frontend = stack.frontend.restart().await;
    let lost = collect(Sdk::TypeScript, waiting).await;
    assert!(
        lost.get("error").is_some() || lost["result"]["structuredContent"]["status"] != "completed",
        "{lost:#}"
    );

    let retried = structured(
        &Sdk::TypeScript
            .call(
                &url,
                None,
                "start_mining",
                json!({"difficulty": 26, "blocks": 8, "wait_seconds": 20, "idempotency_key": "agent-run-1"}),
            )
            .await,
    )
    .clone();
    assert_eq!(retried["workflow_id"], id.as_str());
    let finished = if retried["status"] == "completed" {
        retried
    } else {
        stack.poll_until_final(Sdk::TypeScript, None, &id).await
    };
    assert_eq!(finished["status"], "completed", "{finished:#}");
    assert_eq!(stack.workflows().await.len(), 1, "exactly one workflow for one idempotency key");

    // The same key with any argument that shapes the work changed is
    // refused, not silently answered with the first workflow.
    // Every field that differs is named, with what is stored and what was asked.
    for (changed, named) in [
        (json!({"difficulty": 25, "blocks": 8}), vec!["difficulty 26 (asked 25)"]),
        (json!({"difficulty": 26, "blocks": 7}), vec!["blocks 8 (asked 7)"]),
        (json!({"difficulty": 26, "blocks": 8, "parallelism": 2}), vec!["parallelism 1 (asked 2)"]),
        (json!({"difficulty": 25, "blocks": 7}), vec!["blocks 8 (asked 7)", "difficulty 26 (asked 25)"]),
    ] {
        let mut arguments = changed.clone();
        arguments["idempotency_key"] = json!("agent-run-1");
        let clash = Sdk::TypeScript.call(&url, None, "start_mining", arguments).await;
        let text = tool_error_text(&clash);
        assert!(text.contains("already started workflow") && text.contains(&id), "{changed}: {text}");
        assert!(named.iter().all(|field| text.contains(field)), "{changed}: {named:?} in {text}");
    }
    // How long to wait does not shape the work: the same key finds it.
    let same = json!({"difficulty": 26, "blocks": 8, "wait_seconds": 1, "idempotency_key": "agent-run-1"});
    let found = structured(&Sdk::Python.call(&url, None, "start_mining", same).await).clone();
    assert_eq!(found["workflow_id"], id.as_str());
    assert_eq!(stack.workflows().await.len(), 1, "still one workflow for one idempotency key");
}

#[tokio::test]
async fn cancel_stops_mining_and_list_finds_the_callers_workflows() {
    let stack = Stack::start("mcp-cancel", &[]).await;
    let url = stack.frontend.url();
    let started = structured(
        &Sdk::TypeScript
            .call(&url, None, "start_mining", json!({"difficulty": 30, "blocks": 8, "wait_seconds": 0}))
            .await,
    )
    .clone();
    let id = started["workflow_id"].as_str().unwrap().to_string();
    let small = structured(
        &Sdk::TypeScript.call(&url, None, "start_mining", json!({"difficulty": 8, "blocks": 1})).await,
    )
    .clone();
    assert_eq!(small["status"], "completed");

    let cancelled =
        structured(&Sdk::Python.call(&url, None, "cancel_mining", json!({"workflow_id": id})).await).clone();
    assert!(["cancelled", "running"].contains(&cancelled["status"].as_str().unwrap()), "{cancelled:#}");
    let api: Api<MiningWorkflow> = stack.ns.api();
    let phase = |w: Option<&MiningWorkflow>| w.and_then(|w| w.status.as_ref()).and_then(|s| s.phase);
    wait_for(
        &api,
        &id,
        move |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Cancelled),
        TIMEOUT,
    )
    .await;
    let after =
        structured(&Sdk::TypeScript.call(&url, None, "get_mining_result", json!({"workflow_id": id})).await)
            .clone();
    assert_eq!(after["status"], "cancelled");
    // Cancelling a finished workflow changes nothing.
    let again = structured(
        &Sdk::TypeScript
            .call(&url, None, "cancel_mining", json!({"workflow_id": small["workflow_id"]}))
            .await,
    )
    .clone();
    assert_eq!(again["status"], "completed");

    let listed = structured(&Sdk::Python.call(&url, None, "list_mining_workflows", json!({})).await).clone();
    let ids: Vec<&str> =
        listed["workflows"].as_array().unwrap().iter().map(|w| w["workflow_id"].as_str().unwrap()).collect();
    assert_eq!(listed["total"], 2);
    assert!(
        ids.contains(&id.as_str()) && ids.contains(&small["workflow_id"].as_str().unwrap()),
        "{listed:#}"
    );
    let only_cancelled = structured(
        &Sdk::TypeScript
            .call(&url, None, "list_mining_workflows", json!({"status": "cancelled", "limit": 5}))
            .await,
    )
    .clone();
    assert_eq!(only_cancelled["workflows"].as_array().unwrap().len(), 1);
    assert_eq!(only_cancelled["workflows"][0]["workflow_id"], id.as_str());
}

#[tokio::test]
async fn bad_input_gets_clear_errors_and_creates_nothing() {
    let stack = Stack::start("mcp-bad", &["--max-difficulty", "24"]).await;
    let url = stack.frontend.url();
    let cases = [
        (json!({"difficulty": 0}), "difficulty must be an integer from 1 to 24"),
        (json!({"difficulty": 25}), "from 1 to 24 (got 25)"),
        (json!({"difficulty": "hard"}), "invalid type: string"),
        (json!({"difficulty": 1e30}), "difficulty (integer 1-24"),
        (json!({"blocks": 65}), "blocks must be an integer from 1 to 64"),
        (json!({"parallelism": 65}), "parallelism must be an integer from 1 to 64"),
        (json!({"blocks": -3}), "blocks (integer 1-64"),
        (json!({"wait_seconds": 999}), "wait_seconds must be an integer from 0 to 20"),
        (json!({"difficult": 3}), "unknown field `difficult`"),
        (json!({"idempotency_key": ""}), "idempotency_key must be 1 to 128"),
    ];
    for (sdk, (arguments, expected)) in [Sdk::TypeScript, Sdk::Python].into_iter().cycle().zip(cases) {
        let document = sdk.call(&url, None, "start_mining", arguments.clone()).await;
        let text = tool_error_text(&document);
        assert!(text.contains(expected), "{sdk:?} {arguments}: {text}");
    }
    assert!(stack.workflows().await.is_empty(), "a refused start leaves nothing behind");

    // Unknown, garbled and foreign-looking ids are all simply not_found.
    for id in ["", "nope", "mw-aaaaaaaaaaaaaaaaaaaaaaaaaa", "mw-../../etc/passwd", &"x".repeat(10_000)] {
        let outcome =
            structured(&Sdk::Python.call(&url, None, "get_mining_result", json!({"workflow_id": id})).await)
                .clone();
        assert_eq!(outcome["status"], "not_found", "{id}");
        assert!(outcome["next"].as_str().unwrap().contains("list_mining_workflows"));
    }
    let missing = Sdk::TypeScript.call(&url, None, "get_mining_result", json!({})).await;
    assert!(tool_error_text(&missing).contains("missing field `workflow_id`"));
    let unknown_tool = Sdk::TypeScript.call(&url, None, "mine_faster", json!({})).await;
    assert!(unknown_tool["error"]["message"].as_str().unwrap().contains("unknown tool"), "{unknown_tool:#}");

    // Below the SDKs: garbage JSON, an oversized body, a foreign Host.
    let (code, _, body) = stack.frontend.post_mcp("localhost", &[], "{not json").await;
    assert_eq!(code, 400, "{body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], -32700, "{body}");
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"pad":"{}"}}}}"#,
        "x".repeat(300 * 1024)
    );
    assert_eq!(stack.frontend.post_mcp("localhost", &[], &huge).await.0, 413);
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    assert_eq!(stack.frontend.post_mcp("evil.example", &[], list).await.0, 403);
    assert_eq!(stack.frontend.post_mcp("localhost", &[], list).await.0, 200);
}

#[tokio::test]
async fn an_unreachable_api_server_gets_a_tool_error_within_the_budget() {
    // A kubeconfig whose API server refuses every connection.
    let dir = std::env::temp_dir().join(format!("mcp-unreachable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let frontend = FrontendProcess::spawn("default", &[], &[("KUBECONFIG", kubeconfig.to_str().unwrap())]);
    eventually("the frontend to listen", Duration::from_secs(30), || async {
        (frontend.get("/healthz").await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(frontend.get("/readyz").await.0, 503, "not ready without its cache");
    let started = std::time::Instant::now();
    let document = Sdk::TypeScript
        .call(&frontend.url(), None, "start_mining", json!({"difficulty": 8, "wait_seconds": 5}))
        .await;
    let text = tool_error_text(&document);
    assert!(text.contains("could not start mining") && text.contains("Kubernetes API"), "{text}");
    // An id of this caller's own (only those are looked up: any other is
    // `not_found` without asking the API server).
    let keys = OwnershipKeys::from_files(&ownership_key_file("default"), None).unwrap();
    let id = WorkId::random(&keys, &Caller::anonymous()).unwrap().as_str().to_string();
    let document =
        Sdk::Python.call(&frontend.url(), None, "get_mining_result", json!({"workflow_id": id})).await;
    assert!(tool_error_text(&document).contains("cannot read the workflow"));
    assert!(started.elapsed() < Duration::from_secs(25), "answered in {:?}", started.elapsed());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn two_replicas_racing_on_one_idempotency_key_make_one_workflow() {
    let stack = Stack::start("mcp-race", &[]).await;
    let second = FrontendProcess::start(&stack.ns.name, &[]).await;
    let start =
        json!({"difficulty": 10, "blocks": 2, "wait_seconds": 20, "idempotency_key": "raced"}).to_string();
    let clients: Vec<_> = [
        (Sdk::TypeScript, stack.frontend.url()),
        (Sdk::Python, second.url()),
        (Sdk::TypeScript, second.url()),
    ]
    .into_iter()
    .map(|(sdk, url)| {
        (sdk, sdk.command(&url, None, false, &["call", "start_mining", &start]).spawn().unwrap())
    })
    .collect();
    let mut ids = Vec::new();
    for (sdk, child) in clients {
        let outcome = structured(&collect(sdk, child).await).clone();
        assert_eq!(outcome["status"], "completed", "{outcome:#}");
        ids.push(outcome["workflow_id"].as_str().unwrap().to_string());
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "{ids:?}");
    assert_eq!(stack.workflows().await.len(), 1);
}
