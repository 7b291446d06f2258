//! `spec.parallelism`: one block mined by several Pods, each scanning a
//! range of its nonces, against the real Job controller and the real miner.
//! The answer must be the independent Python reference's, wherever in the
//! ranges the winner falls.

use std::time::Duration;

use cluster_tests::{OperatorProcess, TestNamespace, eventually, install_crd, reference_chain, wait_for};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, PostParams};
use mining_api::{MiningWorkflow, WorkflowPhase, annotations, labels};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(180);

async fn create(ns: &TestNamespace, name: &str, difficulty: u32, blocks: u32, parallelism: u32) {
    let workflows: Api<MiningWorkflow> = ns.api();
    let workflow: MiningWorkflow = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow", "metadata": {"name": name},
        "spec": {"difficulty": difficulty, "blocks": blocks, "parallelism": parallelism},
    }))
    .unwrap();
    workflows.create(&PostParams::default(), &workflow).await.expect("create workflow");
}

async fn succeeded(ns: &TestNamespace, name: &str) -> MiningWorkflow {
    let api: Api<MiningWorkflow> = ns.api();
    let finished = |w: Option<&MiningWorkflow>| {
        w.and_then(|w| w.status.as_ref()).and_then(|s| s.phase).is_some_and(WorkflowPhase::is_finished)
    };
    let done = wait_for(&api, name, finished, TIMEOUT).await.unwrap();
    let status = done.status.clone().unwrap();
    assert_eq!(status.phase, Some(WorkflowPhase::Succeeded), "{name}: {:?}", status.message);
    done
}

/// The workflow's blocks equal the reference, and each was recorded from
/// the range Job whose range holds its nonce.
fn assert_matches_reference(workflow: &MiningWorkflow, difficulty: u32, range_size: u64) -> Vec<u64> {
    let status = workflow.status.as_ref().unwrap();
    let reference = reference_chain(status.blocks.len() as u32, difficulty);
    let mut nonces = Vec::new();
    for (block, want) in status.blocks.iter().zip(&reference) {
        let nonce = want["nonce"].as_u64().unwrap();
        assert_eq!(
            (block.nonce, block.hash.as_str()),
            (nonce, want["hash"].as_str().unwrap()),
            "block {}",
            block.index
        );
        assert!(block.minimality_checked, "block {}", block.index);
        let start = nonce / range_size * range_size;
        let suffix = format!("-b{}-r{start:x}", block.index);
        assert!(
            block.job_name.ends_with(&suffix),
            "block {}: {} (want …{suffix})",
            block.index,
            block.job_name
        );
        nonces.push(nonce);
    }
    nonces
}

/// Once a block is recorded only its winner's Job remains: the others
/// (ranges below that found none, ranges above that were stopped) are gone.
async fn assert_one_job_per_block_remains(ns: &TestNamespace, name: &str, blocks: usize, range_size: u64) {
    let jobs: Api<Job> = ns.api();
    let selector = format!("{}={name}", labels::WORKFLOW);
    let remaining = eventually("only the winners' range Jobs remain", TIMEOUT, || async {
        let items = jobs.list(&ListParams::default().labels(&selector)).await.ok()?.items;
        let live: Vec<Job> = items.into_iter().filter(|j| j.metadata.deletion_timestamp.is_none()).collect();
        (live.len() == blocks).then_some(live)
    })
    .await;
    for job in remaining {
        let annotations = job.metadata.annotations.unwrap_or_default();
        let count: u64 = annotations[annotations::NONCE_COUNT].parse().unwrap();
        assert_eq!(count, range_size, "{:?}", job.metadata.name);
    }
}

/// Small ranges (2,000 nonces) put the winners everywhere: in the first
/// range (difficulty 12, block 1: nonce 904), in the last of the first wave
/// (difficulty 14, block 1: nonce 4,789 in the third of three ranges), and
/// many ranges in (difficulty 12, block 2: nonce 14,250 in the eighth range,
/// after seven that found none).
#[tokio::test]
async fn parallel_blocks_find_the_python_references_nonces_wherever_the_winner_falls() {
    let ns = TestNamespace::new("mwf-parallel").await;
    install_crd(&ns.client).await;
    let range_size = 2_000;
    let _operator = OperatorProcess::start(&ns.name, &["--nonce-range-size", "2000"]);
    create(&ns, "two-pods", 12, 3, 2).await;
    create(&ns, "three-pods", 14, 3, 3).await;

    let two = succeeded(&ns, "two-pods").await;
    let nonces = assert_matches_reference(&two, 12, range_size);
    assert!(nonces[0] < range_size, "a winner in the first range: {nonces:?}");
    assert!(nonces.iter().any(|n| n / range_size >= 7), "a winner past many empty ranges: {nonces:?}");
    let three = succeeded(&ns, "three-pods").await;
    let nonces = assert_matches_reference(&three, 14, range_size);
    assert_eq!(nonces[0] / range_size, 2, "a winner in the last range of the first wave: {nonces:?}");

    assert_one_job_per_block_remains(&ns, "two-pods", 3, range_size).await;
    assert_one_job_per_block_remains(&ns, "three-pods", 3, range_size).await;
    let events: Api<k8s_openapi::api::events::v1::Event> = ns.api();
    eventually("a BlockStarted Event naming the Pods and the range size", TIMEOUT, || async {
        let notes: Vec<String> = events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|e| e.note)
            .collect();
        notes.iter().any(|n| n.contains("in 3 Pods, ranges of 2000 nonces")).then_some(())
    })
    .await;
}

/// With the operator's own range size (the block's expected work cut into
/// four ranges per Pod, at least 2^22 nonces) a difficulty-16 block is won
/// in the first range, and the second Pod's range is stopped.
#[tokio::test]
async fn default_ranges_mine_the_reference_chain_with_two_pods() {
    let ns = TestNamespace::new("mwf-parallel-default").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    create(&ns, "default-ranges", 16, 2, 2).await;
    let done = succeeded(&ns, "default-ranges").await;
    assert_matches_reference(&done, 16, 1 << 22);
    assert_one_job_per_block_remains(&ns, "default-ranges", 2, 1 << 22).await;
}

/// A hard block in ranges survives what a single block Job does: a range
/// Job deleted by hand is created again (same range, same name), a restarted
/// operator adopts the running ranges instead of duplicating them, and
/// cancelling stops every range.
#[tokio::test]
async fn range_jobs_are_recreated_adopted_after_a_restart_and_stopped_by_cancel() {
    let ns = TestNamespace::new("mwf-parallel-life").await;
    install_crd(&ns.client).await;
    let mut operator = OperatorProcess::start(&ns.name, &[]);
    // Difficulty 34: ranges of 2^31 nonces, about a minute each on one core.
    create(&ns, "hard", 34, 1, 2).await;
    let jobs: Api<Job> = ns.api();
    let selector = format!("{}=hard", labels::WORKFLOW);
    let live_names = || async {
        let items = jobs.list(&ListParams::default().labels(&selector)).await.ok()?.items;
        let mut names: Vec<String> = items
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .filter_map(|j| j.metadata.name)
            .collect();
        names.sort();
        Some(names)
    };
    let first =
        eventually("two range Jobs", TIMEOUT, || async { live_names().await.filter(|n| n.len() == 2) }).await;
    assert!(first[0].ends_with("-b1-r0") || first[1].ends_with("-b1-r0"), "{first:?}");

    let old_uid = jobs.get(&first[1]).await.unwrap().metadata.uid;
    jobs.delete(&first[1], &kube::api::DeleteParams::background()).await.unwrap();
    eventually("the deleted range created again under its name", TIMEOUT, || async {
        let again = jobs.get_opt(&first[1]).await.ok().flatten()?;
        (again.metadata.uid != old_uid && again.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;
    assert_eq!(live_names().await.unwrap(), first);

    operator.kill();
    let restarted = OperatorProcess::start(&ns.name, &[]);
    // The new operator must reconcile the workflow and neither add nor replace ranges.
    let workflows: Api<MiningWorkflow> = ns.api();
    eventually("the restarted operator to reconcile", TIMEOUT, || async {
        (restarted.metric("mining_operator_reconciles_total").await >= 1.0).then_some(())
    })
    .await;
    assert_eq!(live_names().await.unwrap(), first, "the same two ranges after the restart");

    let patch = json!({"spec": {"cancel": true}});
    workflows
        .patch("hard", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .unwrap();
    let cancelled = |w: Option<&MiningWorkflow>| {
        w.and_then(|w| w.status.as_ref()).and_then(|s| s.phase) == Some(WorkflowPhase::Cancelled)
    };
    wait_for(&workflows, "hard", cancelled, TIMEOUT).await.unwrap();
    eventually("every range Job gone", TIMEOUT, || async { live_names().await.filter(Vec::is_empty) }).await;
}
