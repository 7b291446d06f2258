//! The operator end to end: a real API server, the real Job controller, the
//! real miner. Each test has its own namespace and its own operator process
//! watching only that namespace.

use std::process::Command;
use std::time::Duration;

use cluster_tests::{
    OperatorProcess, TestNamespace, create_workflow, eventually, namespace_with_crd, reference_chain,
    wait_for, wait_phase,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use mining_api::{MiningWorkflow, WorkflowPhase, condition_types, labels};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);

async fn workflow_jobs(ns: &TestNamespace, workflow: &str) -> Vec<Job> {
    let jobs: Api<Job> = ns.api();
    jobs.list(&ListParams::default().labels(&format!("{}={workflow}", labels::WORKFLOW))).await.unwrap().items
}

fn ready_reason(workflow: &MiningWorkflow) -> String {
    let conditions = &workflow.status.as_ref().unwrap().conditions;
    conditions
        .iter()
        .find(|c| c.type_ == condition_types::READY)
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_four_block_workflow_succeeds_with_the_hashes_of_an_independent_implementation() {
    let ns = namespace_with_crd("mwf-success").await;
    let operator = OperatorProcess::start(&ns.name, &[]);
    let workflows = create_workflow(&ns, "chain", json!({"difficulty": 16, "blocks": 4})).await;
    let done = wait_phase(&workflows, "chain", WorkflowPhase::Succeeded).await;

    let status = done.status.clone().unwrap();
    assert_eq!(status.progress.as_deref(), Some("4/4"));
    assert!(status.finished_at.is_some() && status.started_at.is_some());
    assert_eq!(ready_reason(&done), mining_api::reasons::SUCCEEDED);
    let mined: Vec<(u64, String, u64)> =
        status.blocks.iter().map(|b| (b.nonce, b.hash.clone(), b.attempts)).collect();
    let reference: Vec<(u64, String, u64)> = reference_chain(4, 16)
        .iter()
        .map(|b| {
            (
                b["nonce"].as_u64().unwrap(),
                b["hash"].as_str().unwrap().to_string(),
                b["attempts"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(mined, reference);

    let jobs = workflow_jobs(&ns, "chain").await;
    assert_eq!(jobs.len(), 4, "one Job per block");

    // What a person sees.
    let output = Command::new("kubectl").args(["get", "mwf", "-n", &ns.name]).output().unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let row = table.lines().find(|l| l.starts_with("chain")).unwrap_or_else(|| panic!("{table}"));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&columns[1..4], ["Succeeded", "4/4", "16"], "{table}");

    let (code, metrics) = operator.get("/metrics").await;
    assert_eq!(code, 200);
    assert!(metrics.contains("mining_operator_reconciles_total"), "{metrics}");
    assert!(metrics.contains("mining_operator_block_duration_seconds_count 4"), "{metrics}");
    // Durations come from the miner's own milliseconds, not Jobs' 1 s clock.
    let sum: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mining_operator_block_duration_seconds_sum ")?.parse().ok())
        .unwrap_or(0.0);
    assert!(sum > 0.0, "{metrics}");
    assert_eq!(operator.get("/readyz").await.0, 200);

    let events: Api<k8s_openapi::api::events::v1::Event> = ns.api();
    // Events for what people read, not one per block: a workflow that
    // started on creation has just its WorkflowSucceeded (the blocks are in
    // its status).
    let reasons = eventually("a WorkflowSucceeded Event", TIMEOUT, || async {
        let reasons: Vec<String> = events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("MiningWorkflow"))
            .filter_map(|e| e.reason)
            .collect();
        reasons.iter().any(|r| r == "WorkflowSucceeded").then_some(reasons)
    })
    .await;
    assert_eq!(reasons, ["WorkflowSucceeded"], "the workflow's Events: none per block");
}

#[tokio::test]
async fn a_finished_workflow_is_deleted_with_its_jobs_after_its_ttl() {
    let ns = namespace_with_crd("mwf-ttl").await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let workflows =
        create_workflow(&ns, "brief", json!({"difficulty": 8, "blocks": 2, "ttlSecondsAfterFinished": 3}))
            .await;
    // Both blocks' Jobs exist once it succeeded, so "none left" below is the TTL's doing.
    wait_phase(&workflows, "brief", WorkflowPhase::Succeeded).await;
    let jobs: Vec<String> = workflow_jobs(&ns, "brief").await.iter().map(|j| j.name_any()).collect();
    assert_eq!(jobs.len(), 2, "one Job per block before the TTL: {jobs:?}");
    wait_for(&workflows, "brief", |w: Option<&MiningWorkflow>| w.is_none(), TIMEOUT).await;
    eventually("the workflow's Jobs to be collected", TIMEOUT, || async {
        workflow_jobs(&ns, "brief").await.is_empty().then_some(())
    })
    .await;
}

#[ignore = "needs the local cluster's local/forger image; tests/run.sh runs it there"]
#[tokio::test]
async fn a_forged_termination_message_is_rejected_and_fails_the_workflow() {
    let ns = namespace_with_crd("mwf-forged").await;
    let _operator = OperatorProcess::start(&ns.name, &["--miner-image", "local/forger"]);
    let workflows = create_workflow(&ns, "forged", json!({"difficulty": 16, "blocks": 2})).await;
    let failed = wait_phase(&workflows, "forged", WorkflowPhase::Failed).await;
    assert_eq!(ready_reason(&failed), mining_api::reasons::INVALID_RESULT);
    let message = failed.status.as_ref().unwrap().message.clone().unwrap();
    assert!(message.starts_with("block 1: result rejected"), "{message}");
    assert!(failed.status.unwrap().blocks.is_empty(), "nothing forged is recorded");
    assert_eq!(workflow_jobs(&ns, "forged").await.len(), 1, "no block is mined on top of a forgery");
}

#[ignore = "needs the local cluster's local/failing-miner image; tests/run.sh runs it there"]
#[tokio::test]
async fn a_failing_miner_ends_the_workflow_failed_with_the_reason_and_its_message() {
    let ns = namespace_with_crd("mwf-failing").await;
    let _operator = OperatorProcess::start(
        &ns.name,
        &["--miner-image", "local/failing-miner", "--job-backoff-limit", "0"],
    );
    let workflows = create_workflow(&ns, "broken", json!({"difficulty": 8, "blocks": 2})).await;
    let failed = wait_phase(&workflows, "broken", WorkflowPhase::Failed).await;
    assert_eq!(ready_reason(&failed), mining_api::reasons::JOB_FAILED);
    let message = failed.status.unwrap().message.unwrap();
    assert!(message.contains("BackoffLimitExceeded"), "{message}");
    assert!(message.contains("simulated failure"), "the Pod's own words reach the status: {message}");
}

/// A workflow whose first block takes minutes, with its Job running.
async fn long_running_workflow(ns: &TestNamespace, name: &str) -> (Api<MiningWorkflow>, String) {
    let workflows = create_workflow(ns, name, json!({"difficulty": 40, "blocks": 1})).await;
    wait_phase(&workflows, name, WorkflowPhase::Mining).await;
    let pods: Api<Pod> = ns.api();
    let job = eventually("the block's Job", TIMEOUT, || async {
        let jobs = workflow_jobs(ns, name).await;
        jobs.first().and_then(|j| j.metadata.name.clone())
    })
    .await;
    eventually("the block's Pod to run", TIMEOUT, || async {
        let list = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.ok()?;
        list.items
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .then_some(())
    })
    .await;
    (workflows, job)
}

#[tokio::test]
async fn cancel_ends_the_workflow_cancelled_and_removes_its_job_and_pods() {
    let ns = namespace_with_crd("mwf-cancel").await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let (workflows, job) = long_running_workflow(&ns, "slow").await;

    let patch = json!({"spec": {"cancel": true}});
    workflows.patch("slow", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let cancelled = wait_phase(&workflows, "slow", WorkflowPhase::Cancelled).await;
    assert_eq!(ready_reason(&cancelled), mining_api::reasons::CANCELLED);

    let jobs: Api<Job> = ns.api();
    wait_for(&jobs, &job, |j: Option<&Job>| j.is_none(), TIMEOUT).await;
    let pods: Api<Pod> = ns.api();
    eventually("the Job's Pods to go", TIMEOUT, || async {
        let list = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_workflow_removes_its_jobs() {
    let ns = namespace_with_crd("mwf-delete").await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let (workflows, job) = long_running_workflow(&ns, "doomed").await;
    workflows.delete("doomed", &DeleteParams::background()).await.unwrap();
    wait_for(&workflows, "doomed", |w: Option<&MiningWorkflow>| w.is_none(), TIMEOUT).await;
    let jobs: Api<Job> = ns.api();
    wait_for(&jobs, &job, |j: Option<&Job>| j.is_none(), TIMEOUT).await;
}

#[tokio::test]
async fn an_operator_killed_mid_workflow_resumes_and_succeeds_with_exactly_one_job_per_block() {
    let ns = namespace_with_crd("mwf-sigkill").await;
    let mut operator = OperatorProcess::start(&ns.name, &[]);
    // ~16 M attempts per block: long enough to be caught in the middle.
    let workflows = create_workflow(&ns, "survivor", json!({"difficulty": 24, "blocks": 4})).await;
    let progressed = |w: Option<&MiningWorkflow>| {
        w.and_then(|w| w.status.as_ref())
            .is_some_and(|s| !s.blocks.is_empty() && s.phase == Some(WorkflowPhase::Mining))
    };
    wait_for(&workflows, "survivor", progressed, TIMEOUT).await;
    operator.kill();
    let at_kill = workflows.get("survivor").await.unwrap().status.unwrap();
    assert_eq!(at_kill.phase, Some(WorkflowPhase::Mining), "killed in the middle");

    let _restarted = OperatorProcess::start(&ns.name, &[]);
    let done = wait_phase(&workflows, "survivor", WorkflowPhase::Succeeded).await;
    cluster_tests::assert_chain_verifies(&done, 24);
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.blocks.len(), 4);
    assert_eq!(
        &status.blocks[..at_kill.blocks.len()],
        &at_kill.blocks[..],
        "no mined block was lost or changed"
    );

    let jobs = workflow_jobs(&ns, "survivor").await;
    let mut blocks: Vec<String> =
        jobs.iter().map(|j| j.metadata.labels.as_ref().unwrap()[labels::BLOCK].clone()).collect();
    blocks.sort();
    assert_eq!(blocks, ["1", "2", "3", "4"], "exactly one Job per block");
}

#[tokio::test]
async fn a_workflow_above_the_operators_difficulty_limit_is_rejected_with_a_condition() {
    let ns = namespace_with_crd("mwf-limit").await;
    let _operator = OperatorProcess::start(&ns.name, &["--max-difficulty", "20"]);
    let workflows = create_workflow(&ns, "greedy", json!({"difficulty": 30, "blocks": 1})).await;
    let failed = wait_phase(&workflows, "greedy", WorkflowPhase::Failed).await;
    let admitted = failed
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == condition_types::ADMITTED)
        .cloned()
        .unwrap();
    assert_eq!(admitted.reason, mining_api::reasons::OVER_LIMIT);
    assert!(workflow_jobs(&ns, "greedy").await.is_empty());
}
