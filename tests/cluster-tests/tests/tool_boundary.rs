//! The tool boundary's attacks that need the API server, each as the red
//! team ran it (the pure decisions are unit tests beside the code:
//! provenance of a planted Pod, parts × result size, a command line made of
//! the arguments, the ledger's per-tool limit).

use std::time::Duration;

use cluster_tests::mcp::{FrontendProcess, Sdk, structured};
use cluster_tests::tools::{ALICE, BOB, IMAGE, call, define, listed_names, settle, setup, setup_with, tool};
use cluster_tests::{OperatorProcess, TestNamespace, eventually, install_crd};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use mining_api::{McpTool, MiningWorkflow, ToolRun, ToolRunPhase, Work as _, WorkflowPhase};
use serde_json::{Value, json};

/// Creates `value` as it is, bypassing the typed client (which could not
/// even express an ill-typed field).
async fn create_raw<K: kube::Resource<DynamicType = ()>>(ns: &TestNamespace, value: Value) {
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let object: DynamicObject = serde_json::from_value(value).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

fn pod_template(container: Value) -> Value {
    json!({"spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}})
}

/// Findings 3, 7 and 8: a caller's `$(…)` reaches the tool as text, a
/// template that runs the arguments as a command line is never offered, and
/// an ill-typed McpTool costs a frontend that starts beside it nothing.
#[tokio::test]
async fn arguments_reach_the_tool_as_validated_and_no_definition_can_fail_the_others() {
    let (ns, _operator, _frontend) = setup("tb-args").await;
    let tools: Api<McpTool> = ns.api();
    let keyed = pod_template(json!({"name": "tool", "image": IMAGE,
        "env": [{"name": "API_KEY", "value": "s3cret-value"}]}));
    tools
        .create(&PostParams::default(), &tool("keyed-sum", 20, json!({"jobTemplate": keyed})))
        .await
        .unwrap();
    let shell = pod_template(json!({"name": "tool", "image": IMAGE, "args": ["$(MCP_TOOL_ARGUMENTS)"]}));
    tools
        .create(&PostParams::default(), &tool("shell-sum", 20, json!({"jobTemplate": shell})))
        .await
        .unwrap();
    let mut ill_typed = serde_json::to_value(tool("ill-typed", 20, json!({}))).unwrap();
    ill_typed["spec"]["jobTemplate"]["spec"]["backoffLimit"] = json!("many");
    create_raw::<McpTool>(&ns, ill_typed).await;

    // A frontend that starts with the ill-typed definition there: its
    // catalog syncs (it is ready) and offers every good definition.
    let fresh = FrontendProcess::start_with_tokens(&ns.name, "alice-secret alice\n", &[]).await;
    let url = fresh.url();
    let names = eventually("the good tool to be listed", Duration::from_secs(30), || async {
        let names = listed_names(&url).await;
        names.contains(&"keyed-sum".to_string()).then_some(names)
    })
    .await;
    assert!(!names.contains(&"ill-typed".to_string()), "{names:?}");
    assert!(!names.contains(&"shell-sum".to_string()), "a command line made of the arguments: {names:?}");
    // Their authors read the verdicts with `kubectl get mcptools`.
    let accepted = |name: &'static str| {
        let tools = tools.clone();
        async move {
            let tool = tools.get(name).await.ok()?;
            let condition = tool.status?.conditions.into_iter().find(|c| c.type_ == "Accepted")?;
            Some((condition.status, condition.message))
        }
    };
    let (status, _) =
        eventually("keyed-sum's verdict", Duration::from_secs(30), || accepted("keyed-sum")).await;
    assert_eq!(status, mining_api::ConditionStatus::True);
    let (status, why) =
        eventually("shell-sum's verdict", Duration::from_secs(30), || accepted("shell-sum")).await;
    assert_eq!(status, mining_api::ConditionStatus::False);
    assert!(why.contains("command line"), "{why}");

    let label = "$(API_KEY) $$(API_KEY) $(MCP_TOOL_RUN) $";
    let done =
        call(Sdk::TypeScript, &url, ALICE, "keyed-sum", json!({"numbers": [1, 2], "label": label})).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(done["result"]["label"], label, "the tool got the validated text, nothing expanded");
    assert!(!done.to_string().contains("s3cret-value"), "{done:#}");
}

/// Finding 6: a ToolRun whose template is ill-typed, there when the
/// operator starts, fails alone; every other run still runs.
#[tokio::test]
async fn one_ill_typed_run_fails_only_itself() {
    let ns = TestNamespace::new("tb-ill-run").await;
    install_crd(&ns.client).await;
    let mut template = pod_template(json!({"name": "tool", "image": IMAGE}));
    template["spec"]["backoffLimit"] = json!("many");
    create_raw::<ToolRun>(
        &ns,
        json!({"apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun", "metadata": {"name": "ill-typed"},
            "spec": {"tool": "sum-numbers", "arguments": "{}", "jobTemplate": template}}),
    )
    .await;
    let key = cluster_tests::mcp::ownership_key_file(&ns.name);
    let _operator = OperatorProcess::start(&ns.name, &["--ownership-key-file", key.to_str().unwrap()]);
    let frontend = FrontendProcess::start_with_tokens(&ns.name, "alice-secret alice\n", &[]).await;
    let url = frontend.url();
    define(&ns, &url, tool("sum-numbers", 20, json!({}))).await;
    let done = call(Sdk::Python, &url, ALICE, "sum-numbers", json!({"numbers": [20, 22]})).await;
    let done = if done["status"] == "running" {
        settle(Sdk::Python, &url, ALICE, done["workflow_id"].as_str().unwrap()).await
    } else {
        done
    };
    assert_eq!(done["result"]["sum"], 42.0, "{done:#}");
    let runs: Api<ToolRun> = ns.api();
    let failed = eventually("the ill-typed run to fail", Duration::from_secs(30), || async {
        let run = runs.get("ill-typed").await.ok()?;
        (run.phase() == ToolRunPhase::Failed).then_some(run)
    })
    .await;
    assert!(failed.status.unwrap().message.is_some());
}

/// Findings 4 and 5: deleting a caller's mining workflow behind a finalizer
/// used to keep its slot (the operator's only one here) and the caller's
/// only quota place for ever. Now it is stopped, ends Cancelled (reason
/// Deleted), and the caller's next workflow mines at once.
#[tokio::test]
async fn a_finalizer_on_a_deleted_workflow_holds_no_slot_and_no_quota_place() {
    let ns = TestNamespace::new("tb-finalizer").await;
    install_crd(&ns.client).await;
    let key = cluster_tests::mcp::ownership_key_file(&ns.name);
    let _operator = OperatorProcess::start(
        &ns.name,
        &["--ownership-key-file", key.to_str().unwrap(), "--max-concurrent-workflows", "1"],
    );
    let frontend = FrontendProcess::start_with_tokens(
        &ns.name,
        "alice-secret alice\n",
        &["--max-running-per-caller", "1"],
    )
    .await;
    let url = frontend.url();
    let started = structured(
        &Sdk::Python
            .call(&url, ALICE, "start_mining", json!({"difficulty": 32, "blocks": 64, "wait_seconds": 0}))
            .await,
    )
    .clone();
    let id = started["workflow_id"].as_str().expect("a workflow id").to_string();
    let workflows: Api<MiningWorkflow> = ns.api();
    eventually("the long workflow to mine", Duration::from_secs(60), || async {
        (workflows.get(&id).await.ok()?.phase() == WorkflowPhase::Mining).then_some(())
    })
    .await;

    // The editor's attack: a finalizer, then a delete.
    let hold = Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}}));
    workflows.patch(&id, &PatchParams::default(), &hold).await.unwrap();
    workflows.delete(&id, &DeleteParams::default()).await.unwrap();

    let next = call(
        Sdk::Python,
        &url,
        ALICE,
        "start_mining",
        json!({"difficulty": 8, "blocks": 1, "wait_seconds": 20}),
    )
    .await;
    let next = if next["status"] == "completed" {
        next
    } else {
        let other = next["workflow_id"].as_str().unwrap_or_else(|| panic!("refused: {next:#}")).to_string();
        call(Sdk::Python, &url, ALICE, "get_mining_result", json!({"workflow_id": other, "wait_seconds": 20}))
            .await
    };
    assert_eq!(next["status"], "completed", "the slot and the quota place were free: {next:#}");

    let held = workflows.get(&id).await.unwrap();
    assert_eq!(held.phase(), WorkflowPhase::Cancelled);
    let status = held.status.clone().unwrap();
    let reasons: Vec<_> = status.conditions.iter().map(|c| c.reason.clone()).collect();
    assert!(reasons.contains(&mining_api::reasons::DELETED.to_string()), "{reasons:?}");
    let listed = call(Sdk::Python, &url, ALICE, "get_mining_result", json!({"workflow_id": id})).await;
    assert_eq!(listed["status"], "cancelled", "{listed:#}");

    // Let the namespace go.
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    workflows.patch(&id, &PatchParams::default(), &release).await.unwrap();
}

/// Finding 12: three calls at once of a tool whose limit is one per caller
/// make one run.
#[tokio::test]
async fn a_tools_limit_per_caller_holds_under_a_burst() {
    let (ns, _operator, frontend) = setup("tb-burst").await;
    let url = frontend.url();
    define(&ns, &url, tool("one-at-a-time", 1, json!({"maxRunningPerCaller": 1}))).await;
    let arguments = json!({"numbers": [1], "delay_seconds": 60});
    let one = || Sdk::Python.call(&url, ALICE, "one-at-a-time", arguments.clone());
    let answers = tokio::join!(one(), one(), one());
    let answers = [answers.0, answers.1, answers.2].map(|a| a.to_string());
    let refused = answers.iter().filter(|a| a.contains("its limit is 1")).count();
    assert_eq!(refused, 2, "{answers:#?}");
    let runs: Api<ToolRun> = ns.api();
    let made = runs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(made.iter().filter(|run| run.spec.tool == "one-at-a-time").count(), 1);
}

/// One queue for every kind of work: with the one slot of the budget held
/// by alice's tool run and another of hers waiting (older), the slot that
/// frees goes to bob's workflow, and alice's next run waits its turn.
#[tokio::test]
async fn a_budget_full_of_one_callers_runs_serves_anothers_workflow_next() {
    let (ns, _operator, frontend) = setup_with("tb-one-queue", &["--max-concurrent-work", "1"]).await;
    let url = frontend.url();
    define(&ns, &url, tool("slow-sum", 1, json!({}))).await;
    let slow = json!({"numbers": [1], "delay_seconds": 600});
    let first = call(Sdk::Python, &url, ALICE, "slow-sum", slow.clone()).await;
    let first_id = first["workflow_id"].as_str().unwrap_or_else(|| panic!("{first:#}")).to_string();
    let runs: Api<ToolRun> = ns.api();
    eventually("alice's first run to hold the slot", Duration::from_secs(60), || async {
        (runs.get(&first_id).await.ok()?.phase() == ToolRunPhase::Running).then_some(())
    })
    .await;
    let second = call(Sdk::Python, &url, ALICE, "slow-sum", slow).await;
    let second_id = second["workflow_id"].as_str().unwrap_or_else(|| panic!("{second:#}")).to_string();
    let started = call(
        Sdk::Python,
        &url,
        BOB,
        "start_mining",
        json!({"difficulty": 8, "blocks": 1, "wait_seconds": 0}),
    )
    .await;
    let bob_id = started["workflow_id"].as_str().unwrap_or_else(|| panic!("{started:#}")).to_string();
    let workflows: Api<MiningWorkflow> = ns.api();
    let queued = eventually("bob's workflow to say it is queued", Duration::from_secs(30), || async {
        let workflow = workflows.get(&bob_id).await.ok()?;
        let message = workflow.status.as_ref()?.message.clone()?;
        message.starts_with("queued").then_some(message)
    })
    .await;
    assert!(queued.contains("slots (all kinds) are taken"), "{queued}");
    assert_eq!(runs.get(&second_id).await.unwrap().phase(), ToolRunPhase::Pending);

    let cancelled = call(Sdk::Python, &url, ALICE, "cancel_tool_run", json!({"workflow_id": first_id})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled:#}");
    // Had alice's waiting run (600 s of work) taken the freed slot, bob's
    // workflow would wait for it: it finishes within the minute only if the
    // slot was its.
    eventually("bob's workflow to take the freed slot", Duration::from_secs(60), || async {
        workflows.get(&bob_id).await.ok()?.is_finished().then_some(())
    })
    .await;
    assert_eq!(workflows.get(&bob_id).await.unwrap().phase(), WorkflowPhase::Succeeded);
}

/// A retry of a tool call with the same idempotency key (in `_meta`, from
/// the official TypeScript SDK) finds the first call's run instead of
/// making a second; the same key with other arguments is refused, and the
/// key names another id for `start_mining`. While the call waits, the
/// tool's status lines arrive as `notifications/progress`.
#[tokio::test]
async fn a_retried_tool_call_finds_its_run_and_its_wait_reports_progress() {
    let (ns, _operator, frontend) = setup("tb-retry").await;
    let url = frontend.url();
    define(&ns, &url, tool("retry-sum", 20, json!({}))).await;
    let call_with_key = |arguments: Value, progress: bool| {
        let url = url.clone();
        async move {
            let mut command = Sdk::TypeScript.command(
                &url,
                ALICE,
                progress,
                &["call", "retry-sum", &arguments.to_string()],
            );
            command.env("MCP_META", json!({"mining-operator.dev/idempotency-key": "retry-1"}).to_string());
            cluster_tests::mcp::collect(Sdk::TypeScript, command.spawn().unwrap()).await
        }
    };
    let first = call_with_key(json!({"numbers": [1, 2], "delay_seconds": 25}), true).await;
    let first_id =
        structured(&first)["workflow_id"].as_str().unwrap_or_else(|| panic!("{first:#}")).to_string();
    let lines: Vec<String> = first["progress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["message"].as_str().map(str::to_string))
        .collect();
    assert!(
        lines.iter().any(|line| line.contains("adding:")),
        "the tool's status line as progress: {first:#}"
    );

    let retried = call_with_key(json!({"numbers": [1, 2], "delay_seconds": 25}), false).await;
    assert_eq!(structured(&retried)["workflow_id"], first_id.as_str(), "{retried:#}");
    let runs: Api<ToolRun> = ns.api();
    let made = runs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(made.iter().filter(|run| run.spec.tool == "retry-sum").count(), 1, "one run for two calls");
    let run = made.iter().find(|run| run.spec.tool == "retry-sum").unwrap();
    assert!(run.annotation(mining_api::annotations::TRACEPARENT).is_some(), "the run joins the call's trace");

    let other = call_with_key(json!({"numbers": [5]}), false).await;
    assert!(other.to_string().contains("with other arguments"), "{other:#}");
    let mut mining = Sdk::TypeScript.command(
        &url,
        ALICE,
        false,
        &[
            "call",
            "start_mining",
            &json!({"difficulty": 4, "blocks": 1, "idempotency_key": "retry-1"}).to_string(),
        ],
    );
    mining.env("MCP_META", "{}");
    let mined = cluster_tests::mcp::collect(Sdk::TypeScript, mining.spawn().unwrap()).await;
    let mined_id =
        structured(&mined)["workflow_id"].as_str().unwrap_or_else(|| panic!("{mined:#}")).to_string();
    assert_ne!(mined_id, first_id, "one key, one id per kind");
}

/// A task id resolves once to the caller's own work of whichever kind: a
/// MiningWorkflow a namespace user plants under the name (and caller label)
/// of the caller's tool run hides nothing — `tasks/get` of both generations
/// and `tasks/cancel` still reach the run, and the planted object is never
/// answered for.
#[tokio::test]
async fn a_workflow_planted_under_a_runs_id_hides_nothing_of_the_run() {
    let (ns, _operator, frontend) = setup("tb-squat").await;
    let url = frontend.url();
    define(&ns, &url, tool("squat-sum", 1, json!({}))).await;
    let started =
        call(Sdk::TypeScript, &url, ALICE, "squat-sum", json!({"numbers": [1, 2], "delay_seconds": 60}))
            .await;
    assert_eq!(started["status"], "running", "{started:#}");
    let id = started["workflow_id"].as_str().unwrap().to_string();
    let runs: Api<ToolRun> = ns.api();
    let run = runs.get(&id).await.unwrap();
    let mut planted = MiningWorkflow::new(&id, mining_api::MiningWorkflowSpec::new(4));
    planted.metadata.labels = run.metadata.labels.clone();
    let workflows: Api<MiningWorkflow> = ns.api();
    workflows.create(&PostParams::default(), &planted).await.unwrap();

    let token = format!("Authorization: Bearer {}", ALICE.unwrap());
    let ask = |version: &'static str, method: &'static str| {
        let (frontend, token, id) = (&frontend, token.clone(), id.clone());
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": {"taskId": id}});
            let (code, _, text) =
                frontend.post_mcp_version("localhost", version, &[token.as_str()], &body.to_string()).await;
            assert_eq!(code, 200, "{text}");
            let start = text.find('{').unwrap_or_else(|| panic!("{text}"));
            serde_json::from_str::<Value>(text[start..].lines().next().unwrap().trim()).unwrap()
        }
    };
    // Let the watch deliver the planted workflow first.
    eventually("the planted workflow in the frontend's cache", Duration::from_secs(10), || async {
        workflows.get_opt(&id).await.ok().flatten().map(|_| ())
    })
    .await;
    let old = ask("2025-11-25", "tasks/get").await;
    assert_eq!(old["result"]["taskId"], id.as_str(), "{old:#}");
    assert_eq!(old["result"]["status"], "working", "{old:#}");
    let params = json!({"taskId": id}).to_string();
    let new = cluster_tests::tasks::TaskClient::Extension2026
        .run(&url, ALICE, false, &["raw", "tasks/get", &params])
        .await;
    assert_eq!(new["message"]["result"]["taskId"], id.as_str(), "{new:#}");
    let cancelled = ask("2025-11-25", "tasks/cancel").await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled:#}");
    assert!(runs.get(&id).await.unwrap().spec.cancel, "the run, not the planted workflow, was cancelled");
    assert!(!workflows.get(&id).await.unwrap().spec.cancel, "the planted workflow was left alone");
}
