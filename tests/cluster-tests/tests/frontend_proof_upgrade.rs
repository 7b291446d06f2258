//! An upgrade from the release whose ownership proofs had no version: every
//! workflow it started stays its caller's (visible, listed, cancellable), the
//! frontend writes the current version over each old proof, and an old proof
//! moved to other work stays worthless and is never proven anew.

use mining_api::Work as _;
use std::time::Duration;

use cluster_tests::mcp::{FrontendProcess, Sdk, ownership_key_file, structured, tokens_file};
use cluster_tests::{TestNamespace, eventually, install_crd};
use kube::api::{Api, PostParams};
use mcp_frontend::ids::{Caller, WorkId};
use mcp_frontend::ownership::OwnershipKeys;
use mining_api::{MiningWorkflow, MiningWorkflowSpec, ProofVersion, annotations, labels};
use serde_json::json;

const ALICE: Option<&str> = Some("alice-secret");

/// A workflow as the previous release's frontend created it for `caller`.
fn made_by_previous_release(
    keys: &OwnershipKeys,
    ns: &str,
    caller: &Caller,
    difficulty: u32,
) -> MiningWorkflow {
    let id = WorkId::random(keys, caller).unwrap();
    let mut workflow = MiningWorkflow::new(
        id.as_str(),
        MiningWorkflowSpec { blocks: 2, ..MiningWorkflowSpec::new(difficulty) },
    );
    workflow.metadata.namespace = Some(ns.to_string());
    workflow.metadata.labels = Some(
        [
            (labels::CALLER.to_string(), caller.digest.clone()),
            (labels::MANAGED_BY.to_string(), "mcp-frontend".into()),
        ]
        .into(),
    );
    let proof = keys.proof_in(ProofVersion::V1, &workflow);
    workflow.metadata.annotations = Some([(annotations::OWNER_PROOF.to_string(), proof)].into());
    workflow
}

fn proof_of(workflow: &MiningWorkflow) -> String {
    workflow.annotation(annotations::OWNER_PROOF).unwrap_or_default().to_string()
}

#[tokio::test]
async fn workflows_proven_before_versions_stay_their_callers_and_get_the_current_proof() {
    let ns = TestNamespace::new("fe-proof-upgrade").await;
    install_crd(&ns.client).await;
    let keys = OwnershipKeys::from_files(&ownership_key_file(&ns.name), None).unwrap();
    let alice = Caller::new("alice");
    let api: Api<MiningWorkflow> = ns.api();
    // Yesterday's two workflows (no operator runs: both stay unfinished).
    let kept = made_by_previous_release(&keys, &ns.name, &alice, 30);
    let cancelled = made_by_previous_release(&keys, &ns.name, &alice, 31);
    // And an old proof moved onto easier work: it must not verify, nor be re-proven.
    let mut forged = made_by_previous_release(&keys, &ns.name, &alice, 32);
    forged.spec.difficulty = 1;
    for workflow in [&kept, &cancelled, &forged] {
        api.create(&PostParams::default(), workflow).await.unwrap();
    }
    let name = |w: &MiningWorkflow| w.metadata.name.clone().unwrap();

    let tokens = tokens_file("alice-secret alice\n");
    let frontend =
        FrontendProcess::start(&ns.name, &["--auth", "tokens", "--tokens-file", tokens.to_str().unwrap()])
            .await;
    let url = frontend.url();

    let seen = Sdk::Python.call(&url, ALICE, "get_mining_result", json!({"workflow_id": name(&kept)})).await;
    assert_eq!(structured(&seen)["status"], "running", "yesterday's workflow is still alice's: {seen:#}");
    let listed = Sdk::Python.call(&url, ALICE, "list_mining_workflows", json!({})).await;
    let mut ids: Vec<String> = structured(&listed)["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workflow_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    let mut expected = vec![name(&kept), name(&cancelled)];
    expected.sort();
    assert_eq!(ids, expected, "both listed, the forgery not: {listed:#}");

    // The frontend writes the current proof over each valid old one by itself.
    let upgraded = eventually("the current proof on both old workflows", Duration::from_secs(60), || {
        let api = api.clone();
        let names = [name(&kept), name(&cancelled)];
        async move {
            let mut proofs = Vec::new();
            for name in names {
                proofs.push(proof_of(&api.get(&name).await.ok()?));
            }
            proofs.iter().all(|p| p.starts_with("v2.")).then_some(proofs)
        }
    })
    .await;
    assert!(upgraded.iter().all(|p| p.len() == 3 + 64), "{upgraded:?}");
    let after = api.get(&name(&kept)).await.unwrap();
    assert!(keys.proves(&after) && keys.reproof(&after).is_none(), "the written proof is current and valid");

    let answer =
        Sdk::TypeScript.call(&url, ALICE, "cancel_mining", json!({"workflow_id": name(&cancelled)})).await;
    let status = structured(&answer)["status"].as_str().unwrap().to_string();
    assert!(status == "running" || status == "cancelled", "alice may cancel it: {answer:#}");
    assert!(api.get(&name(&cancelled)).await.unwrap().spec.cancel, "the cancel was written");

    let untouched = api.get(&name(&forged)).await.unwrap();
    assert_eq!(proof_of(&untouched), proof_of(&forged), "a proof that does not verify is never re-proven");
    let seen =
        Sdk::Python.call(&url, ALICE, "get_mining_result", json!({"workflow_id": name(&forged)})).await;
    assert_eq!(structured(&seen)["status"], "not_found", "{seen:#}");
}

/// The upgrade to a workflow namespace: the release before made MCP
/// workflows in the release namespace, with unkeyed caller labels and
/// unversioned proofs. After it, they stay their callers': found, listed,
/// counted against the quota and cancellable where they are, while new work
/// goes to the workflow namespace.
#[tokio::test]
async fn workflows_left_in_the_release_namespace_stay_visible_countable_and_cancellable() {
    let release_ns = TestNamespace::new("fe-ns-upgrade").await;
    let work = TestNamespace::new("fe-ns-upgrade-work").await;
    install_crd(&release_ns.client).await;
    // One key for both (the chart's Secret): the test frontend's key file is named by its namespace.
    let key_file = ownership_key_file(&release_ns.name);
    let keys = OwnershipKeys::from_files(&key_file, None).unwrap();
    let alice = Caller::new("alice");
    let old: Api<MiningWorkflow> = release_ns.api();
    let kept = made_by_previous_release(&keys, &release_ns.name, &alice, 30);
    let cancelled = made_by_previous_release(&keys, &release_ns.name, &alice, 31);
    for workflow in [&kept, &cancelled] {
        old.create(&PostParams::default(), workflow).await.unwrap();
    }
    let name = |w: &MiningWorkflow| w.metadata.name.clone().unwrap();

    let tokens = tokens_file("alice-secret alice\n");
    let frontend = FrontendProcess::start(
        &work.name,
        &[
            "--auth",
            "tokens",
            "--tokens-file",
            tokens.to_str().unwrap(),
            "--ownership-key-file",
            key_file.to_str().unwrap(),
            "--ledger-namespace",
            &release_ns.name,
            "--previous-namespace",
            &release_ns.name,
            "--max-running-per-caller",
            "2",
        ],
    )
    .await;
    let url = frontend.url();

    // Found and listed where they are.
    let seen = Sdk::Python.call(&url, ALICE, "get_mining_result", json!({"workflow_id": name(&kept)})).await;
    assert_eq!(structured(&seen)["status"], "running", "{seen:#}");
    let listed = Sdk::Python.call(&url, ALICE, "list_mining_workflows", json!({})).await;
    assert_eq!(structured(&listed)["workflows"].as_array().unwrap().len(), 2, "{listed:#}");
    // Counted: two unfinished of a limit of two.
    let refused =
        Sdk::Python.call(&url, ALICE, "start_mining", json!({"difficulty": 8, "wait_seconds": 0})).await;
    let text = refused["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
    assert!(text.contains("the limit is 2"), "the old workflows count: {refused:#}");
    // Cancelled where they are.
    let answer =
        Sdk::TypeScript.call(&url, ALICE, "cancel_mining", json!({"workflow_id": name(&cancelled)})).await;
    let status = structured(&answer)["status"].as_str().unwrap().to_string();
    assert!(status == "running" || status == "cancelled", "{answer:#}");
    assert!(old.get(&name(&cancelled)).await.unwrap().spec.cancel, "the cancel was written");
    // New work goes to the workflow namespace, with a keyed label.
    let _ = old.delete(&name(&kept), &Default::default()).await;
    let started = eventually("a start once a place is free", Duration::from_secs(90), || async {
        let started =
            Sdk::Python.call(&url, ALICE, "start_mining", json!({"difficulty": 8, "wait_seconds": 0})).await;
        structured(&started)["workflow_id"].as_str().map(str::to_string)
    })
    .await;
    let new: Api<MiningWorkflow> = work.api();
    let made = new.get(&started).await.expect("new work is in the workflow namespace");
    assert_eq!(made.metadata.labels.unwrap()[labels::CALLER], keys.caller_label(&alice.digest));
    assert!(old.get_opt(&started).await.unwrap().is_none());
}
