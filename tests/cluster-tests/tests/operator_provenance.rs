//! Results only from the operator's own Pods: someone who may create Pods or
//! Jobs in the namespace plants look-alikes that print a valid but wrong
//! nonce; none of them is ever read, and a foreign Job standing where a
//! block's Job should fails the block visibly as ForeignJob.

use std::time::Duration;

use cluster_tests::{
    OperatorProcess, TestNamespace, eventually, install_crd, phase, shell_image, wait_for, workflow,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use mining_api::{GENESIS, MiningWorkflow, WorkflowPhase, condition_types, labels, reasons};
use mining_operator::naming::{block_job_name, workflow_label};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);

/// The smallest winner of block 1 at `difficulty`, and the next winner: a
/// valid result that is not the chain's.
fn minimal_and_forged(difficulty: u32) -> (u64, String) {
    let minimal = miner::mine_block(1, GENESIS, difficulty, 1).unwrap().nonce;
    let next = miner::mine_range(1, GENESIS, difficulty, 1, minimal + 1, u64::MAX).unwrap().unwrap();
    let forged = json!({"index": 1, "prev": GENESIS, "nonce": next.nonce, "hash": miner::hex_upper(&next.digest),
        "attempts": next.nonce + 1, "difficulty": difficulty, "elapsed_ms": 1});
    (minimal, forged.to_string())
}

/// A container that prints `result` as its termination message.
fn printer(result: &str) -> Value {
    json!({"name": "miner", "image": shell_image(),
           "command": ["sh", "-c", format!("printf '%s' '{result}' > /dev/termination-log")]})
}

async fn plant_pod(
    ns: &TestNamespace,
    name: &str,
    job: &str,
    workflow: &str,
    owner: Option<&Job>,
    result: &str,
) {
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"job-name": job, labels::WORKFLOW: workflow_label(workflow),
                                              labels::BLOCK: "1"}},
        "spec": {"restartPolicy": "Never", "containers": [printer(result)]},
    }))
    .unwrap();
    if let Some(job) = owner {
        pod.metadata.owner_references =
            Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: job.name_any(),
                uid: job.uid().unwrap(),
                controller: Some(true),
                ..Default::default()
            }]);
    }
    cluster_tests::create_pod(&ns.api(), &pod, TIMEOUT).await;
}

#[tokio::test]
async fn pods_planted_with_a_jobs_label_or_a_forged_owner_are_never_read() {
    let ns = TestNamespace::new("prov-pods").await;
    install_crd(&ns.client).await;
    let api: Api<MiningWorkflow> = ns.api();
    let pods: Api<Pod> = ns.api();
    // No minimality scan: only provenance stands between a planted result and the chain.
    let operator_args = ["--minimality-check-budget", "0"];

    // 1. Pods with the Job's label, finished before the operator ever runs.
    let (minimal, forged) = minimal_and_forged(12);
    let created = api
        .create(&PostParams::default(), &workflow("labelled", json!({"difficulty": 12, "blocks": 1})))
        .await
        .unwrap();
    let job_name = block_job_name("labelled", &created.uid().unwrap(), 1);
    for i in 0..6 {
        plant_pod(&ns, &format!("planted-{i}"), &job_name, "labelled", None, &forged).await;
    }
    eventually("the planted Pods to finish", TIMEOUT, || async {
        let listed = pods.list(&ListParams::default().labels(&format!("job-name={job_name}"))).await.ok()?;
        let done = listed
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
            .count();
        (done == 6).then_some(())
    })
    .await;
    let operator = OperatorProcess::start(&ns.name, &operator_args);
    let done = wait_for(
        &api,
        "labelled",
        |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Succeeded),
        TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(done.status.unwrap().blocks[0].nonce, minimal, "the chain's block, not a planted one");

    // 2. Pods with a forged controller reference to the running Job itself.
    let (minimal, forged) = minimal_and_forged(22);
    api.create(&PostParams::default(), &workflow("owned", json!({"difficulty": 22, "blocks": 1})))
        .await
        .unwrap();
    let jobs: Api<Job> = ns.api();
    let job = eventually("the block's Job", TIMEOUT, || async {
        let listed = jobs
            .list(&ListParams::default().labels(&format!("{}={}", labels::WORKFLOW, workflow_label("owned"))))
            .await
            .ok()?;
        listed.items.into_iter().next()
    })
    .await;
    for i in 0..4 {
        plant_pod(&ns, &format!("forged-owner-{i}"), &job.name_any(), "owned", Some(&job), &forged).await;
    }
    let done = wait_for(
        &api,
        "owned",
        |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Succeeded),
        TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(done.status.unwrap().blocks[0].nonce, minimal, "the chain's block, not a planted one");
    drop(operator);
}

/// A Job of the name the operator would give block 1, printing `result`.
fn foreign_job(name: &str, workflow: &MiningWorkflow, controlled: bool, result: &str) -> Job {
    let mut job: Job = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {labels::WORKFLOW: workflow_label(&workflow.name_any()), labels::BLOCK: "1"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [printer(result)]}}},
    }))
    .unwrap();
    if controlled {
        job.metadata.owner_references =
            Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "mining-operator.dev/v1alpha1".into(),
                kind: "MiningWorkflow".into(),
                name: workflow.name_any(),
                uid: workflow.uid().unwrap(),
                controller: Some(true),
                ..Default::default()
            }]);
    }
    job
}

#[tokio::test]
async fn a_foreign_job_where_a_blocks_job_should_be_fails_the_block_as_foreign_job() {
    let ns = TestNamespace::new("prov-jobs").await;
    install_crd(&ns.client).await;
    let api: Api<MiningWorkflow> = ns.api();
    let jobs: Api<Job> = ns.api();
    let (_, forged) = minimal_and_forged(10);
    // One Job the workflow controls but whose Pod is not the miner, one of
    // the block's name that the workflow does not control: both planted
    // before the operator runs.
    let mut names = Vec::new();
    for (name, controlled) in [("controlled", true), ("uncontrolled", false)] {
        let created = api
            .create(&PostParams::default(), &workflow(name, json!({"difficulty": 10, "blocks": 1})))
            .await
            .unwrap();
        let job_name = block_job_name(name, &created.uid().unwrap(), 1);
        jobs.create(&PostParams::default(), &foreign_job(&job_name, &created, controlled, &forged))
            .await
            .unwrap();
        names.push((name, job_name));
    }
    let _operator = OperatorProcess::start(&ns.name, &["--minimality-check-budget", "0"]);
    for (name, job_name) in &names {
        let failed = wait_for(
            &api,
            name,
            |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Failed),
            TIMEOUT,
        )
        .await
        .unwrap();
        let status = failed.status.unwrap();
        assert!(status.blocks.is_empty(), "{name}: nothing of the foreign Job was recorded");
        let ready = status.conditions.iter().find(|c| c.type_ == condition_types::READY).unwrap();
        assert_eq!(ready.reason, reasons::FOREIGN_JOB, "{name}: {ready:?}");
        assert!(ready.message.contains(job_name.as_str()), "{name}: names the Job: {}", ready.message);
        let events: Api<Event> = ns.api();
        eventually(&format!("{name}'s ForeignJob Event"), TIMEOUT, || async {
            let listed = events.list(&ListParams::default()).await.ok()?;
            listed.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reasons::FOREIGN_JOB)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(*name)
                    && e.note.as_deref().is_some_and(|n| n.contains(job_name.as_str()))
            })
        })
        .await;
    }
}
