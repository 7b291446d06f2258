//! Any container as a durable MCP tool, on the real control plane: an admin
//! applies `McpTool`s (the example image `mining-operator/sum-numbers`),
//! real SDK clients list and call them, and the operator runs each call as
//! one Job whose own Pod's termination message is the result.

use mining_api::Work as _;
use std::time::Duration;

use cluster_tests::mcp::{Sdk, inspector, ownership_key_file};
use cluster_tests::tasks::TaskClient;
use cluster_tests::{OperatorProcess, eventually};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use mining_api::{McpTool, ToolRun, ToolRunPhase, labels};
use serde_json::json;

use cluster_tests::tools::{ALICE, BOB, IMAGE, call, define, listed_names, settle, setup, setup_with, tool};

#[tokio::test]
async fn a_defined_tool_is_listed_answers_inline_polls_to_its_result_and_stays_its_callers() {
    let (ns, _operator, frontend) = setup("tools-call").await;
    let url = frontend.url();
    let tools: Api<McpTool> = ns.api();
    let read_only = json!({"hints": {"readOnly": true, "idempotent": true, "openWorld": false}});
    for defined in [tool("sum-numbers", 20, read_only), tool("slow-sum", 1, json!({}))] {
        tools.create(&PostParams::default(), &defined).await.unwrap();
    }
    eventually("both tools to be listed", Duration::from_secs(30), || async {
        let names = listed_names(&url).await;
        (names.contains(&"sum-numbers".to_string())
            && names.contains(&"slow-sum".to_string())
            && names.contains(&"get_tool_result".to_string()))
        .then_some(())
    })
    .await;
    // What each says it does reaches hosts as MCP tool annotations.
    let listed = Sdk::TypeScript.run(&url, ALICE, false, &["tools"]).await;
    let annotations = |name: &str| {
        let tools = listed["tools"].as_array().unwrap();
        tools.iter().find(|t| t["name"] == name).unwrap()["annotations"].clone()
    };
    assert_eq!(
        annotations("sum-numbers"),
        json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false}),
        "{listed:#}"
    );
    assert_eq!(annotations("slow-sum"), json!({"openWorldHint": true}), "{listed:#}");

    // Inline within the budget; shell in the arguments reaches the tool as data.
    let shell = "\"; rm -rf / $(reboot)\n`id` && echo pwned";
    let done =
        call(Sdk::TypeScript, &url, ALICE, "sum-numbers", json!({"numbers": [1, 2, 3], "label": shell}))
            .await;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(done["result"]["sum"], 6.0);
    assert_eq!(done["result"]["label"], shell, "the arguments arrived verbatim, as data");

    // FastMCP and the Inspector CLI call it alike.
    let fast = call(Sdk::FastMcp, &url, ALICE, "sum-numbers", json!({"numbers": [40, 2]})).await;
    assert_eq!(fast["result"]["sum"], 42.0, "{fast:#}");
    let (ok, inspected, output) = inspector(
        &url,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "sum-numbers",
            "--tool-arg",
            "numbers=[5,5]",
            "--header",
            "Authorization: Bearer alice-secret",
        ],
    )
    .await;
    assert!(ok, "{output}");
    assert_eq!(inspected["structuredContent"]["result"]["sum"], 10.0, "{output}");

    // Slower than its budget: running, then polled to its result.
    let running =
        call(Sdk::Python, &url, ALICE, "slow-sum", json!({"numbers": [2, 2], "delay_seconds": 4})).await;
    assert_eq!(running["status"], "running", "{running:#}");
    let id = running["workflow_id"].as_str().unwrap().to_string();
    assert!(running["poll_after_seconds"].as_u64().is_some());
    let polled = settle(Sdk::Python, &url, ALICE, &id).await;
    assert_eq!(polled["status"], "completed", "{polled:#}");
    assert_eq!(polled["result"]["sum"], 4.0);

    // Another caller sees nothing of it.
    let foreign = call(Sdk::Python, &url, BOB, "get_tool_result", json!({"workflow_id": id})).await;
    assert_eq!(foreign["status"], "not_found", "{foreign:#}");
    let bobs = call(Sdk::TypeScript, &url, BOB, "list_tool_runs", json!({})).await;
    assert_eq!(bobs["total"], 0, "{bobs:#}");
    let alices = call(Sdk::TypeScript, &url, ALICE, "list_tool_runs", json!({})).await;
    assert_eq!(alices["total"], 4, "{alices:#}");

    // A schema violation is a clear error and creates nothing.
    let runs: Api<ToolRun> = ns.api();
    let before = runs.list(&ListParams::default()).await.unwrap().items.len();
    let invalid = Sdk::Python.call(&url, ALICE, "sum-numbers", json!({"numbers": "many"})).await;
    let text = invalid.to_string();
    assert!(text.contains("inputSchema") && text.contains("numbers"), "{invalid:#}");
    assert_eq!(runs.list(&ListParams::default()).await.unwrap().items.len(), before, "nothing was created");

    // A failing Pod: its message and exit code are the run's error.
    let failed =
        call(Sdk::TypeScript, &url, ALICE, "sum-numbers", json!({"numbers": [1], "fail": "boom"})).await;
    assert_eq!(failed["status"], "failed", "{failed:#}");
    assert_eq!(failed["exit_code"], 3);
    assert!(failed["error"].as_str().unwrap().contains("asked to fail: boom"), "{failed:#}");

    // Arguments cannot choose the Pod: an open inputSchema lets any key
    // through, and still the Job runs the tool's image as the tool's account.
    define(&ns, &url, tool("open-sum", 1, json!({"inputSchema": {"type": "object"}}))).await;
    let posing = json!({"numbers": [1], "image": "attacker/image", "serviceAccountName": "admin",
        "command": ["/bin/sh", "-c", "id"], "jobTemplate": {"spec": {}}, "delay_seconds": 5});
    let running = call(Sdk::TypeScript, &url, ALICE, "open-sum", posing).await;
    let open_id = running["workflow_id"].as_str().expect("a run id").to_string();
    // Read while it runs: once its result is stored, the Job goes.
    let jobs: Api<Job> = ns.api();
    let job = jobs.get(&open_id).await.unwrap();
    let pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some(IMAGE));
    assert_eq!(pod.containers[0].command, None);
    assert_eq!(pod.service_account_name, None);
    let done = settle(Sdk::TypeScript, &url, ALICE, &open_id).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    // Its environment and its Pods' termination messages (readable with
    // `view`) go with it; the result stays in the run, which `view` cannot read.
    eventually("the finished run's Job to go", Duration::from_secs(30), || async {
        jobs.get_opt(&open_id).await.unwrap().is_none().then_some(())
    })
    .await;

    // What `kubectl get toolruns` shows.
    let stored = runs.get(&id).await.unwrap();
    assert_eq!(stored.phase(), ToolRunPhase::Succeeded);
    assert_eq!(stored.spec.tool, "slow-sum");
    assert_eq!(stored.status.unwrap().progress.as_deref(), Some("1/1"));
}

#[tokio::test]
async fn runs_keep_their_definition_cancel_count_against_limits_and_unproven_runs_never_run() {
    let (ns, _operator, frontend) = setup("tools-life").await;
    let url = frontend.url();
    let tools: Api<McpTool> = ns.api();
    define(&ns, &url, tool("slow-sum", 1, json!({"maxRunningPerCaller": 2}))).await;

    // Two long runs fill alice's limit of this tool; a third is refused.
    let mut ids = Vec::new();
    for _ in 0..2 {
        let running =
            call(Sdk::TypeScript, &url, ALICE, "slow-sum", json!({"numbers": [1], "delay_seconds": 300}))
                .await;
        assert_eq!(running["status"], "running", "{running:#}");
        ids.push(running["workflow_id"].as_str().unwrap().to_string());
    }
    // The tool's latest status line (MCP_PROGRESS …) is the run's message while it works.
    let working = eventually("the run's status line", Duration::from_secs(60), || async {
        let seen = call(Sdk::Python, &url, ALICE, "get_tool_result", json!({"workflow_id": ids[1]})).await;
        let message = seen["status_message"].as_str().unwrap_or_default().to_string();
        message.contains("adding: ").then_some(message)
    })
    .await;
    assert!(working.starts_with("Running"), "{working}");
    let refused = Sdk::Python.call(&url, ALICE, "slow-sum", json!({"numbers": [1]})).await.to_string();
    assert!(refused.contains("its limit is 2"), "{refused}");
    assert!(!refused.contains("bob"), "{refused}");
    // Bob's limit is his own.
    let bobs = call(Sdk::Python, &url, BOB, "slow-sum", json!({"numbers": [5], "delay_seconds": 3})).await;
    assert_eq!(bobs["status"], "running", "{bobs:#}");

    // Cancel: the Job goes, the run ends Cancelled; bob cannot cancel alice's.
    let foreign = call(Sdk::Python, &url, BOB, "cancel_tool_run", json!({"workflow_id": ids[0]})).await;
    assert_eq!(foreign["status"], "not_found", "{foreign:#}");
    call(Sdk::Python, &url, ALICE, "cancel_tool_run", json!({"workflow_id": ids[0]})).await;
    let cancelled = settle(Sdk::Python, &url, ALICE, &ids[0]).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled:#}");
    let jobs: Api<Job> = ns.api();
    eventually("the cancelled run's Job to go", Duration::from_secs(30), || async {
        jobs.get_opt(&ids[0])
            .await
            .unwrap()
            .is_none_or(|job| job.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;

    // Edited, then deleted, while bob's run is in flight: it finishes as defined at its start.
    let broken = json!({"spec": {"jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "tool", "image": "local/failing-miner"}]}}}}}});
    tools.patch("slow-sum", &PatchParams::default(), &Patch::Merge(&broken)).await.unwrap();
    tools.delete("slow-sum", &DeleteParams::default()).await.unwrap();
    let bob_id = bobs["workflow_id"].as_str().unwrap();
    let finished = settle(Sdk::Python, &url, BOB, bob_id).await;
    assert_eq!(finished["status"], "completed", "{finished:#}");
    assert_eq!(finished["result"]["sum"], 5.0);
    eventually("the deleted tool to leave the list", Duration::from_secs(30), || async {
        (!listed_names(&url).await.contains(&"slow-sum".to_string())).then_some(())
    })
    .await;

    // A template the API server refuses fails the run with its reason.
    let refused_template = json!({"jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
        "containers": [{"name": "Not_A_Name", "image": IMAGE}]}}}}});
    define(&ns, &url, tool("refused", 20, refused_template)).await;
    let failed = call(Sdk::Python, &url, ALICE, "refused", json!({"numbers": [1]})).await;
    assert_eq!(failed["status"], "failed", "{failed:#}");
    assert!(failed["error"].as_str().unwrap().contains("refused the tool's Job"), "{failed:#}");

    // A ToolRun made directly (alice's label, a template of one's choosing)
    // is never run, and is nobody's.
    let runs: Api<ToolRun> = ns.api();
    let alice_label = alice_label_of(&runs, &ids[1]).await;
    let planted: ToolRun = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
        "metadata": {"name": "planted-run", "labels": {labels::CALLER: alice_label}},
        "spec": {"tool": "slow-sum", "arguments": "{\"numbers\":[1]}", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "tool", "image": IMAGE}]}}}}},
    }))
    .unwrap();
    runs.create(&PostParams::default(), &planted).await.unwrap();
    let failed = eventually("the planted run to be refused", Duration::from_secs(30), || async {
        let run = runs.get("planted-run").await.ok()?;
        (run.phase() == ToolRunPhase::Failed).then_some(run)
    })
    .await;
    assert!(failed.status.unwrap().message.unwrap().contains("no valid proof"));
    assert!(
        jobs.get_opt("planted-run").await.unwrap().is_none(),
        "no Job for a run the frontend did not make"
    );
    let listed = call(Sdk::TypeScript, &url, ALICE, "list_tool_runs", json!({})).await;
    assert!(!listed.to_string().contains("planted-run"), "{listed:#}");
    let seen =
        call(Sdk::TypeScript, &url, ALICE, "get_tool_result", json!({"workflow_id": "planted-run"})).await;
    assert_eq!(seen["status"], "not_found");
}

async fn alice_label_of(runs: &Api<ToolRun>, id: &str) -> String {
    runs.get(id).await.unwrap().caller_label().unwrap().to_string()
}

#[tokio::test]
async fn a_run_survives_its_frontend_and_its_operator_being_killed() {
    let (ns, mut operator, frontend) = setup("tools-chaos").await;
    let url = frontend.url();
    define(&ns, &url, tool("slow-sum", 1, json!({}))).await;
    let running =
        call(Sdk::TypeScript, &url, ALICE, "slow-sum", json!({"numbers": [3, 4], "delay_seconds": 5})).await;
    assert_eq!(running["status"], "running", "{running:#}");
    let id = running["workflow_id"].as_str().unwrap().to_string();
    let jobs: Api<Job> = ns.api();
    let first = eventually("the run's Job", Duration::from_secs(30), || async {
        jobs.get_opt(&id).await.unwrap().and_then(|job| job.metadata.uid)
    })
    .await;
    // Both die mid-run, as an OOM kill or a node loss would end them.
    operator.kill();
    let frontend = frontend.restart().await;
    let key = ownership_key_file(&ns.name);
    let _operator = OperatorProcess::start(&ns.name, &["--ownership-key-file", key.to_str().unwrap()]);
    let done = settle(Sdk::Python, &frontend.url(), ALICE, &id).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(done["result"]["sum"], 7.0);
    // The result came from the Job made before the kill: no second one.
    let runs: Api<ToolRun> = ns.api();
    let recorded = runs.get(&id).await.unwrap().status.and_then(|s| s.job_uid);
    assert_eq!(recorded, Some(first), "one Job for the run, whoever reconciled it");
}

#[tokio::test]
async fn a_defined_tool_runs_as_a_task_of_both_generations() {
    let (ns, _operator, frontend) = setup("tools-tasks").await;
    let url = frontend.url();
    define(&ns, &url, tool("sum-numbers", 20, json!({}))).await;
    let arguments = json!({"numbers": [1, 2], "delay_seconds": 2}).to_string();

    // 2025-11-25, TypeScript SDK 1.x: create, then tasks/result.
    let run = TaskClient::TypeScript2025.run_tool("sum-numbers", &url, ALICE, &["run", &arguments]).await;
    assert_eq!(run["task"]["status"], "working", "{run:#}");
    let task_id = run["task"]["taskId"].as_str().unwrap().to_string();
    assert_eq!(run["result"]["structuredContent"]["result"]["sum"], 3.0, "{run:#}");
    assert_eq!(run["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task_id.as_str());
    let got = TaskClient::TypeScript2025.run_tool("sum-numbers", &url, ALICE, &["get", &task_id]).await;
    assert_eq!(got["task"]["status"], "completed", "{got:#}");
    // The task's ttl the client asked for (60 s) is the run's retention, as a workflow's.
    assert_eq!(got["task"]["ttl"], 60_000, "{got:#}");
    let kept = ns.api::<ToolRun>().get(&task_id).await.unwrap().spec.ttl_seconds_after_finished;
    assert_eq!(kept, Some(60), "the run is kept for the task's ttl");
    // Another caller: not found, and not listed.
    let foreign = TaskClient::TypeScript2025.run_tool("sum-numbers", &url, BOB, &["get", &task_id]).await;
    assert!(foreign["error"].is_object(), "{foreign:#}");
    let bobs = TaskClient::Python2025.run_tool("sum-numbers", &url, BOB, &["list"]).await;
    assert_eq!(bobs["tasks"].as_array().map(Vec::len), Some(0), "{bobs:#}");

    // 2025-11-25, Python SDK 1.x: call_tool_as_task, poll, result; then listed.
    let run = TaskClient::Python2025.run_tool("sum-numbers", &url, ALICE, &["run", &arguments]).await;
    assert_eq!(run["result"]["structuredContent"]["result"]["sum"], 3.0, "{run:#}");
    let listed = TaskClient::Python2025.run_tool("sum-numbers", &url, ALICE, &["list"]).await;
    let ids: Vec<&str> =
        listed["tasks"].as_array().unwrap().iter().filter_map(|t| t["taskId"].as_str()).collect();
    assert!(ids.contains(&task_id.as_str()), "{listed:#}");

    // 2025-11-25 cancel: cancelled at once, and a second cancel is refused.
    let slow = json!({"numbers": [1], "delay_seconds": 300}).to_string();
    let started = TaskClient::TypeScript2025.run_tool("sum-numbers", &url, ALICE, &["start", &slow]).await;
    let slow_id = started["task"]["taskId"].as_str().unwrap().to_string();
    let cancelled =
        TaskClient::TypeScript2025.run_tool("sum-numbers", &url, ALICE, &["cancel", &slow_id]).await;
    assert_eq!(cancelled["task"]["status"], "cancelled", "{cancelled:#}");

    // 2026-07-28 push: the client's own listen() is told the run's task until it completes.
    let listened =
        TaskClient::Extension2026.run_tool("sum-numbers", &url, ALICE, &["listen", &arguments]).await;
    let pushes = listened["pushes"].as_array().unwrap_or_else(|| panic!("{listened:#}"));
    let last = &pushes.last().unwrap_or_else(|| panic!("no push: {listened:#}"))["params"];
    assert_eq!(last["taskId"], listened["taskId"], "{listened:#}");
    assert_eq!(last["status"], "completed", "{listened:#}");
    assert_eq!(last["result"]["structuredContent"]["result"]["sum"], 3.0, "{listened:#}");
    assert_eq!(listened["ended"], "graceful", "{listened:#}");

    // 2026-07-28, the Tasks extension: callTool answers a task, settle() gets the result.
    let extension =
        TaskClient::Extension2026.run_tool("sum-numbers", &url, ALICE, &["run", &arguments]).await;
    assert_eq!(extension["kind"], "task", "{extension:#}");
    assert_eq!(extension["outcome"]["status"], "completed", "{extension:#}");
    assert_eq!(extension["outcome"]["result"]["structuredContent"]["result"]["sum"], 3.0, "{extension:#}");
}

#[tokio::test]
async fn the_operators_tool_run_slots_go_to_the_caller_holding_fewest() {
    let (ns, _operator, frontend) = setup_with("tools-fair", &["--max-concurrent-tool-runs", "2"]).await;
    let url = frontend.url();
    define(&ns, &url, tool("slow-sum", 0, json!({}))).await;
    let start = |token, delay: u64| {
        let url = url.clone();
        async move {
            let answer = call(
                Sdk::TypeScript,
                &url,
                token,
                "slow-sum",
                json!({"numbers": [1], "delay_seconds": delay}),
            )
            .await;
            answer["workflow_id"].as_str().unwrap_or_else(|| panic!("{answer:#}")).to_string()
        }
    };
    // Alice takes both slots, then queues a third run; bob queues one after hers.
    let a1 = start(ALICE, 300).await;
    let a2 = start(ALICE, 300).await;
    let runs: Api<ToolRun> = ns.api();
    for id in [&a1, &a2] {
        eventually("alice's first two runs to run", Duration::from_secs(30), || async {
            (runs.get(id).await.ok()?.phase() == ToolRunPhase::Running).then_some(())
        })
        .await;
    }
    let a3 = start(ALICE, 1).await;
    let b1 = start(BOB, 1).await;
    let queued = eventually("alice's third run to be queued", Duration::from_secs(30), || async {
        let message = runs.get(&a3).await.ok()?.status?.message?;
        message.starts_with("queued").then_some(message)
    })
    .await;
    assert!(queued.contains("2 of at most 2 tool runs are running"), "{queued}");
    // The order runs start in, as the API server stores it: a watch sees
    // every change in order (start times have whole seconds only).
    let started_order = started_in_order(runs.clone(), [a3.clone(), b1.clone()]).await;
    // A slot frees: bob, holding none, goes before alice's older run.
    call(Sdk::Python, &url, ALICE, "cancel_tool_run", json!({"workflow_id": a1})).await;
    let bobs = settle(Sdk::Python, &url, BOB, &b1).await;
    assert_eq!(bobs["status"], "completed", "{bobs:#}");
    // Then hers, started only after bob's.
    let alices = settle(Sdk::Python, &url, ALICE, &a3).await;
    assert_eq!(alices["status"], "completed", "{alices:#}");
    let order =
        tokio::time::timeout(Duration::from_secs(30), started_order).await.expect("both seen").unwrap();
    assert_eq!(order, [b1.clone(), a3.clone()], "bob's run started before alice's older one");
    call(Sdk::Python, &url, ALICE, "cancel_tool_run", json!({"workflow_id": a2})).await;
}

/// The order in which `names` are first seen holding a slot (or past it),
/// from a watch started (and listed) before this returns.
async fn started_in_order(runs: Api<ToolRun>, names: [String; 2]) -> tokio::task::JoinHandle<Vec<String>> {
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    let (listed, is_listed) = tokio::sync::oneshot::channel();
    let order = tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut order: Vec<String> = Vec::new();
        let mut events = std::pin::pin!(watcher(runs, watcher::Config::default()));
        while let Some(event) = events.next().await {
            let run = match event {
                Ok(watcher::Event::InitDone) => {
                    listed.take().map(|tx| tx.send(()));
                    continue;
                }
                Ok(watcher::Event::Apply(run) | watcher::Event::InitApply(run)) => run,
                _ => continue,
            };
            let name = run.metadata.name.clone().unwrap_or_default();
            let past_waiting = !matches!(run.phase(), ToolRunPhase::Pending);
            if names.contains(&name) && past_waiting && !order.contains(&name) {
                order.push(name);
            }
            if order.len() == names.len() {
                return order;
            }
        }
        order
    });
    is_listed.await.expect("the watch lists the runs");
    order
}
