//! A tool that asks and waits, on the real control plane: the example
//! `deploy-gate` (image `mining-operator/deploy-gate`) ends a step with
//! `MCP_INPUT_REQUIRED`, the run waits with no Pod, and clients this project
//! did not write answer — the Tasks extension client through `tasks/update`,
//! the TypeScript SDK 1.x through its elicitation and sampling handlers on a
//! 2025-11-25 `tasks/result` stream, the Python SDK through the two-tool
//! path (`respond_tool_run`). Each step is its own Job, made once.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cluster_tests::mcp::{FrontendProcess, Sdk, ownership_key_file, tool_error_text};
use cluster_tests::tasks::TaskClient;
use cluster_tests::tools::{ALICE, BOB, call, define, deploy_gate, settle, setup};
use cluster_tests::{OperatorProcess, eventually};
use futures::StreamExt as _;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use mining_api::{ToolRun, ToolRunPhase, labels};
use serde_json::{Value, json};

fn approve() -> Value {
    json!({"action": "accept", "content": {"approve": true}})
}

/// Every Job a run of `ns` was given, by uid, for as long as it is kept:
/// a step made twice (a restart between create and record) shows here even
/// once the Jobs are gone.
/// (run, Job uid) of every Job seen.
type SeenJobs = Arc<Mutex<BTreeSet<(String, String)>>>;

fn record_jobs(jobs: Api<Job>) -> (SeenJobs, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let into = seen.clone();
    let watching = tokio::spawn(async move {
        let config = watcher::Config::default().labels(labels::TOOL_RUN);
        let mut events = watcher(jobs, config).applied_objects().boxed();
        while let Some(Ok(job)) = events.next().await {
            let run = job.metadata.labels.as_ref().and_then(|l| l.get(labels::TOOL_RUN)).cloned();
            if let (Some(run), Some(uid)) = (run, job.metadata.uid) {
                into.lock().unwrap().insert((run, uid));
            }
        }
    });
    (seen, watching)
}

/// Answers `approve` of alice's run `id` through `respond_tool_run` (the
/// run then goes on) and polls it to its end, which must be `completed`.
async fn answer_and_settle(sdk: Sdk, url: &str, id: &str, answer: Value) -> Value {
    let responses = json!({"workflow_id": id, "responses": {"approve": answer}});
    let responded = call(sdk, url, ALICE, "respond_tool_run", responses).await;
    assert_eq!(responded["status"], "running", "{responded:#}");
    let done = settle(Sdk::Python, url, ALICE, id).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    done
}

fn jobs_of(seen: &Mutex<BTreeSet<(String, String)>>, run: &str) -> usize {
    seen.lock().unwrap().iter().filter(|(of, _)| of == run).count()
}

#[tokio::test]
async fn each_generation_and_the_two_tool_path_answer_what_the_tool_asks() {
    let (ns, _operator, frontend) = setup("tools-asks").await;
    let url = frontend.url();
    let (jobs, _watching) = record_jobs(ns.api());
    define(&ns, &url, deploy_gate(2)).await;

    // 2026-07-28, the Tasks extension: ext-tasks' own onInputRequest answers
    // the elicitation, then the sampling request, each by tasks/update.
    let answers = json!({"elicitation": approve(), "sampling":
        {"role": "assistant", "model": "test-model", "content": {"type": "text", "text": "API 1.2 ships."}}});
    let arguments = json!({"service": "api", "version": "1.2", "release_note": true}).to_string();
    let run = TaskClient::Extension2026
        .run_tool_answering("deploy-gate", &url, ALICE, &answers, &["run", &arguments])
        .await;
    assert_eq!(run["outcome"]["status"], "completed", "{run:#}");
    let result = &run["outcome"]["result"]["structuredContent"]["result"];
    assert_eq!(
        (result["deployed"].clone(), result["release_note"].clone()),
        (json!(true), json!("API 1.2 ships.")),
        "{run:#}"
    );
    let kinds: Vec<&str> =
        run["asked"].as_array().unwrap().iter().filter_map(|a| a["kind"].as_str()).collect();
    assert_eq!(kinds, ["elicitation", "sampling"], "{run:#}");
    assert!(run["asked"][0]["params"]["message"].as_str().unwrap().contains("Deploy api 1.2"), "{run:#}");
    assert_eq!(run["asked"][0]["delivery"], "task-update", "{run:#}");
    let id = run["taskId"].as_str().unwrap().to_string();
    let stored = ns.api::<ToolRun>().get(&id).await.unwrap().status.unwrap();
    assert_eq!(
        (stored.step, stored.asked_keys.clone()),
        (Some(2), vec!["approve".to_string(), "release_note".to_string()])
    );
    assert_eq!(jobs_of(&jobs, &id), 3, "one Job per step: ask, ask, deploy");

    // 2025-11-25, TypeScript SDK 1.x: tasks/result puts the elicitation to
    // the client's handler on its stream, tied to the task; declined.
    let answers = json!({"elicitation": {"action": "decline"}});
    let arguments = json!({"service": "web", "version": "2"}).to_string();
    let streamed = TaskClient::TypeScript2025
        .run_tool_answering("deploy-gate", &url, ALICE, &answers, &["stream", &arguments])
        .await;
    let messages = streamed["messages"].as_array().unwrap_or_else(|| panic!("{streamed:#}"));
    let last = messages.last().unwrap();
    assert_eq!(last["type"], "result", "{streamed:#}");
    assert_eq!(last["result"]["structuredContent"]["result"]["deployed"], false, "{streamed:#}");
    assert_eq!(
        last["result"]["structuredContent"]["result"]["reason"], "the approval was declined",
        "{streamed:#}"
    );
    let asked = &streamed["asked"][0];
    assert_eq!(asked["method"], "elicitation/create", "{streamed:#}");
    let task_id = messages[0]["task"]["taskId"].as_str().unwrap();
    assert_eq!(
        asked["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task_id,
        "{streamed:#}"
    );
    assert_eq!(jobs_of(&jobs, task_id), 2);

    // The two-tool path, Python SDK 1.x: input_required names the question
    // and respond_tool_run takes the answer.
    let arguments = json!({"service": "db", "version": "9"});
    let asked = call(Sdk::Python, &url, ALICE, "deploy-gate", arguments).await;
    let asked = if asked["status"] == "running" {
        let id = asked["workflow_id"].as_str().unwrap();
        settle(Sdk::Python, &url, ALICE, id).await
    } else {
        asked
    };
    assert_eq!(asked["status"], "input_required", "{asked:#}");
    assert!(
        asked["input_requests"]["approve"]["params"]["message"].as_str().unwrap().contains("Deploy db 9")
    );
    assert!(asked["next"].as_str().unwrap().contains("respond_tool_run"), "{asked:#}");
    let id = asked["workflow_id"].as_str().unwrap().to_string();
    let done = answer_and_settle(Sdk::Python, &url, &id, approve()).await;
    assert_eq!(done["result"]["deployed"], true, "{done:#}");
}

#[tokio::test]
async fn only_its_caller_answers_and_bad_or_planted_answers_are_not_taken() {
    let (ns, _operator, frontend) = setup("tools-asks-hostile").await;
    let url = frontend.url();
    define(&ns, &url, deploy_gate(20)).await;
    let asked =
        call(Sdk::Python, &url, ALICE, "deploy-gate", json!({"service": "api", "version": "1"})).await;
    assert_eq!(asked["status"], "input_required", "{asked:#}");
    let id = asked["workflow_id"].as_str().unwrap().to_string();

    // Another caller: the two-tool path says not found, tasks/update is refused.
    let foreign = call(
        Sdk::Python,
        &url,
        BOB,
        "respond_tool_run",
        json!({"workflow_id": id, "responses": {"approve": approve()}}),
    )
    .await;
    assert_eq!(foreign["status"], "not_found", "{foreign:#}");
    let params = json!({"taskId": id, "inputResponses": {"approve": approve()}}).to_string();
    let update = TaskClient::Extension2026.run(&url, BOB, false, &["raw", "tasks/update", &params]).await;
    assert!(update["message"]["error"].is_object(), "{update:#}");

    // An answer that does not fit the request, and an oversized one: refused, nothing written.
    let refused = [
        (json!({"approve": "yes"}), "requested schema"),
        (json!({"approve": true, "reason": "x".repeat(9000)}), "bytes"),
    ];
    for (content, why) in refused {
        let answer = json!({"approve": {"action": "accept", "content": content}});
        let arguments = json!({"workflow_id": id, "responses": answer});
        let answered = Sdk::Python.call(&url, ALICE, "respond_tool_run", arguments).await;
        assert!(tool_error_text(&answered).contains(why), "{answered:#}");
    }
    let runs: Api<ToolRun> = ns.api();
    assert!(runs.get(&id).await.unwrap().spec.input_responses.is_empty(), "nothing was recorded");

    // An approval planted through the API server by someone who may edit
    // runs, with and without a proof lifted from elsewhere: not taken.
    let planted = json!({"spec": {"inputResponses": {"approve": {
        "response": approve().to_string(), "proof": "ab".repeat(32)}}}});
    runs.patch(&id, &PatchParams::default(), &Patch::Merge(planted)).await.unwrap();
    // The caller's own answer (a decline) still counts: the planted one is
    // not an answer, so the key is still open to its caller.
    let done = answer_and_settle(Sdk::Python, &url, &id, json!({"action": "decline"})).await;
    assert_eq!(done["result"]["deployed"], false, "the planted approval was not taken: {done:#}");

    // Cancel works while it waits, and frees nothing it did not hold.
    let waiting =
        call(Sdk::Python, &url, ALICE, "deploy-gate", json!({"service": "api", "version": "2"})).await;
    let id = waiting["workflow_id"].as_str().unwrap().to_string();
    assert_eq!(waiting["status"], "input_required", "{waiting:#}");
    let cancelled = call(Sdk::Python, &url, ALICE, "cancel_tool_run", json!({"workflow_id": id})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled:#}");
    assert_eq!(runs.get(&id).await.unwrap().phase(), ToolRunPhase::Cancelled);
}

#[tokio::test]
async fn a_question_outlives_its_frontend_and_operator_and_is_answered_through_another_replica() {
    let (ns, mut operator, frontend) = setup("tools-asks-chaos").await;
    let url = frontend.url();
    let (jobs, _watching) = record_jobs(ns.api());
    define(&ns, &url, deploy_gate(20)).await;
    let asked =
        call(Sdk::Python, &url, ALICE, "deploy-gate", json!({"service": "api", "version": "3"})).await;
    assert_eq!(asked["status"], "input_required", "{asked:#}");
    let id = asked["workflow_id"].as_str().unwrap().to_string();
    // No Pod waits with it: the step's Job is deleted once it asked.
    let job_api: Api<Job> = ns.api();
    eventually("the asking step's Job to go", Duration::from_secs(30), || async {
        job_api.get_opt(&id).await.unwrap().is_none().then_some(())
    })
    .await;

    // Both die while it waits, as an OOM kill or a node loss would end them.
    operator.kill();
    let mut frontend = frontend;
    frontend.kill();
    // Another replica (another process, another port) takes the answer.
    let replica =
        FrontendProcess::start_with_tokens(&ns.name, "alice-secret alice\nbob-secret bob\n", &[]).await;
    let key = ownership_key_file(&ns.name);
    let _operator = OperatorProcess::start(&ns.name, &["--ownership-key-file", key.to_str().unwrap()]);
    let seen =
        call(Sdk::TypeScript, &replica.url(), ALICE, "get_tool_result", json!({"workflow_id": id})).await;
    assert_eq!(seen["status"], "input_required", "the question outlived both: {seen:#}");
    let done = answer_and_settle(Sdk::TypeScript, &replica.url(), &id, approve()).await;
    assert_eq!(done["result"]["deployed"], true, "{done:#}");
    assert_eq!(jobs_of(&jobs, &id), 2, "exactly one Job per step, whoever reconciled it");
}

/// The shell example of docs/TOOLS.md ("Asking the caller and waiting"), as printed.
fn documented_shell_tool() -> String {
    let docs = std::fs::read_to_string(cluster_tests::repo_root().join("docs/TOOLS.md")).unwrap();
    let section = docs.split("## Asking the caller and waiting").nth(1).expect("the section");
    let block = section.split("```sh\n").nth(1).and_then(|rest| rest.split("\n```").next());
    block.expect("a sh block").to_string()
}

#[tokio::test]
async fn the_documented_shell_tool_asks_and_reads_the_answer_and_its_state() {
    let (ns, _operator, frontend) = setup("tools-asks-shell").await;
    let url = frontend.url();
    let mut defined = deploy_gate(20);
    defined.metadata.name = Some("shell-gate".into());
    let template = defined.spec.job_template.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    template.containers[0].image = Some("local/shell".into());
    template.containers[0].command = Some(vec!["/bin/sh".into(), "-c".into(), documented_shell_tool()]);
    define(&ns, &url, defined).await;
    let asked =
        call(Sdk::Python, &url, ALICE, "shell-gate", json!({"service": "api", "version": "1.2"})).await;
    assert_eq!(asked["status"], "input_required", "{asked:#}");
    assert_eq!(asked["input_requests"]["approve"]["params"]["message"], "Deploy api 1.2 to production?");
    let id = asked["workflow_id"].as_str().unwrap().to_string();
    let done = answer_and_settle(Sdk::Python, &url, &id, approve()).await;
    assert_eq!(done["result"], json!({"deployed": true, "what": "api@1.2"}), "{done:#}");
}
