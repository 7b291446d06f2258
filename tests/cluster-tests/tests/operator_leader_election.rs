//! Two operator replicas, one Lease: one reconciles, the other takes over
//! when it dies or freezes, and a deposed leader cannot write an old status.

use std::time::{Duration, Instant};

use cluster_tests::{
    OperatorProcess, TestNamespace, create_workflow, eventually, install_crd, wait_for, wait_phase,
};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams};
use mining_api::{MiningWorkflow, WorkflowPhase, labels};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
const LEASE_SECONDS: u64 = 6;
const LEADER: &str = "mining_operator_leader";
const JOBS_CREATED: &str = r#"mining_operator_api_calls_total{verb="create",resource="jobs"}"#;

fn replica(namespace: &str, identity: &str) -> OperatorProcess {
    OperatorProcess::start_replica(namespace, identity, LEASE_SECONDS, &[])
}

/// Waits until exactly one of the replicas says it leads; returns its index.
async fn the_leader(replicas: &[&OperatorProcess]) -> usize {
    eventually("one replica to lead", TIMEOUT, || async {
        let mut leading = Vec::new();
        for (i, replica) in replicas.iter().enumerate() {
            if replica.metric(LEADER).await == 1.0 {
                leading.push(i);
            }
        }
        (leading.len() == 1).then(|| leading[0])
    })
    .await
}

fn blocks_of(workflow: Option<&MiningWorkflow>) -> usize {
    workflow.and_then(|w| w.status.as_ref()).map_or(0, |s| s.blocks.len())
}

/// The chain is valid, and each block had exactly one Job.
async fn assert_one_valid_job_per_block(ns: &TestNamespace, done: &MiningWorkflow, difficulty: u32) {
    let status = done.status.as_ref().unwrap();
    cluster_tests::assert_chain_verifies(done, difficulty);
    let jobs: Api<Job> = ns.api();
    let selector = format!("{}={}", labels::WORKFLOW, done.metadata.name.as_deref().unwrap());
    let mut blocks: Vec<String> = (jobs.list(&ListParams::default().labels(&selector)).await.unwrap().items)
        .iter()
        .map(|j| j.metadata.labels.as_ref().unwrap()[labels::BLOCK].clone())
        .collect();
    blocks.sort();
    let want: Vec<String> = (1..=status.blocks.len()).map(|b| b.to_string()).collect();
    assert_eq!(blocks, want, "exactly one Job per block, none mined twice");
}

#[tokio::test]
async fn a_standby_takes_over_within_the_lease_when_the_leader_is_killed() {
    let ns = TestNamespace::new("leader-kill").await;
    install_crd(&ns.client).await;
    let mut replicas = [replica(&ns.name, "a"), replica(&ns.name, "b")];
    let leader = the_leader(&[&replicas[0], &replicas[1]]).await;
    let standby = 1 - leader;

    // ~4 M attempts per block: each block takes a moment, the chain several.
    let workflows = create_workflow(&ns, "relay", json!({"difficulty": 22, "blocks": 5})).await;
    wait_for(&workflows, "relay", |w: Option<&MiningWorkflow>| blocks_of(w) >= 1, TIMEOUT).await;
    assert_eq!(replicas[standby].metric(JOBS_CREATED).await, 0.0, "a standby creates nothing");

    replicas[leader].kill();
    let killed = Instant::now();
    eventually("the standby to lead", TIMEOUT, || async {
        (replicas[standby].metric(LEADER).await == 1.0).then_some(())
    })
    .await;
    let took_over = killed.elapsed();
    eprintln!("the standby led {took_over:?} after the leader was killed (lease {LEASE_SECONDS} s)");
    // The lease runs out at most LEASE_SECONDS after the last renewal; the
    // standby checks it at least that often, plus a little for the watch.
    assert!(took_over < Duration::from_secs(LEASE_SECONDS + 3), "took over after {took_over:?}");

    let done = wait_phase(&workflows, "relay", WorkflowPhase::Succeeded).await;
    assert_eq!(done.status.as_ref().unwrap().blocks.len(), 5);
    assert_one_valid_job_per_block(&ns, &done, 22).await;
    assert!(replicas[standby].metric(JOBS_CREATED).await >= 1.0, "the new leader mined the rest");
}

#[tokio::test]
async fn a_frozen_leader_is_deposed_and_writes_nothing_when_it_wakes() {
    let ns = TestNamespace::new("leader-freeze").await;
    install_crd(&ns.client).await;
    let replicas = [replica(&ns.name, "a"), replica(&ns.name, "b")];
    let leader = the_leader(&[&replicas[0], &replicas[1]]).await;
    let standby = 1 - leader;
    let workflows = create_workflow(&ns, "frozen", json!({"difficulty": 22, "blocks": 6})).await;
    wait_for(&workflows, "frozen", |w: Option<&MiningWorkflow>| blocks_of(w) >= 1, TIMEOUT).await;

    // A stopped process renews nothing: the lease runs out and the standby leads.
    replicas[leader].signal("STOP");
    eventually("the standby to lead", TIMEOUT, || async {
        (replicas[standby].metric(LEADER).await == 1.0).then_some(())
    })
    .await;
    let before_wake = blocks_of(workflows.get_opt("frozen").await.unwrap().as_ref());
    wait_for(&workflows, "frozen", |w: Option<&MiningWorkflow>| blocks_of(w) > before_wake, TIMEOUT).await;
    let writes = r#"mining_operator_api_calls_total{verb="patch",resource="miningworkflows/status"}"#;
    replicas[leader].signal("CONT");
    let frozen_writes = replicas[leader].metric(writes).await;
    eventually("the woken replica to know it no longer leads", Duration::from_secs(2), || async {
        (replicas[leader].metric(LEADER).await == 0.0).then_some(())
    })
    .await;

    let done = wait_phase(&workflows, "frozen", WorkflowPhase::Succeeded).await;
    assert_one_valid_job_per_block(&ns, &done, 22).await;
    assert_eq!(replicas[leader].metric(writes).await, frozen_writes, "the deposed leader wrote no status");
}

#[tokio::test]
async fn a_status_write_based_on_an_older_version_is_refused() {
    let ns = TestNamespace::new("stale-write").await;
    install_crd(&ns.client).await;
    // No operator: this test plays two leaders with the operator's own write.
    let workflows = create_workflow(&ns, "contested", json!({"difficulty": 8, "blocks": 2})).await;
    let old = workflows.get("contested").await.unwrap();
    let old_version = old.metadata.resource_version.clone();
    let newer: mining_api::MiningWorkflowStatus = serde_json::from_value(json!({
        "phase": "Mining", "progress": "0/2", "message": "written by the new leader",
    }))
    .unwrap();
    let written =
        mining_operator::work::status::write_status(&workflows, "contested", &newer, old_version.as_deref())
            .await
            .expect("the write on the current version succeeds");
    assert_ne!(written, old_version);

    let stale: mining_api::MiningWorkflowStatus =
        serde_json::from_value(json!({"phase": "Pending", "message": "written by the deposed leader"}))
            .unwrap();
    let refused =
        mining_operator::work::status::write_status(&workflows, "contested", &stale, old_version.as_deref())
            .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 409),
        "a write on an older version must conflict: {refused:?}"
    );
    let now = workflows.get("contested").await.unwrap();
    assert_eq!(now.status.unwrap().message.as_deref(), Some("written by the new leader"));
}
