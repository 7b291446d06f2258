//! Caller isolation no Kubernetes right can forge, each finding of the
//! review as the attack that now fails: squatting another caller's
//! idempotent id, planting objects in their lists and limit, a status that
//! claims an easier chain than was asked for, and ids that tell by their
//! cost whether another caller used them.

use mining_api::Work as _;
use std::time::{Duration, Instant};

use cluster_tests::mcp::{FrontendProcess, Sdk, ownership_key_file, structured, tokens_file};
use cluster_tests::{OperatorProcess, TestNamespace, install_crd};
use kube::api::{Api, Patch, PatchParams, PostParams};
use mcp_frontend::ids::{Caller, WorkId};
use mcp_frontend::ownership::OwnershipKeys;
use mining_api::{MiningWorkflow, annotations, labels};
use serde_json::{Value, json};

const ALICE: Option<&str> = Some("alice-secret");
const BOB: Option<&str> = Some("bob-secret");

async fn frontend(ns: &TestNamespace, extra: &[&str]) -> FrontendProcess {
    let tokens = tokens_file("alice-secret alice\nbob-secret bob\n");
    let mut args = vec!["--auth", "tokens", "--tokens-file", tokens.to_str().unwrap()];
    args.extend_from_slice(extra);
    FrontendProcess::start(&ns.name, &args).await
}

fn keys(ns: &TestNamespace) -> OwnershipKeys {
    OwnershipKeys::from_files(&ownership_key_file(&ns.name), None).expect("the test frontend's key")
}

/// A workflow created directly through the API server, labelled as `caller`'s.
fn planted(name: &str, caller: &Caller, spec: Value) -> MiningWorkflow {
    serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
        "metadata": {"name": name, "labels": {labels::CALLER: caller.digest, labels::MANAGED_BY: "mcp-frontend"}},
        "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn a_squatted_idempotent_id_is_never_adopted_and_the_retry_gets_fresh_work() {
    let ns = TestNamespace::new("iso-squat").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let frontend = frontend(&ns, &[]).await;
    let url = frontend.url();
    // The strongest squatter: one who learned the id bob's key stands for
    // (no one can compute it without the frontend's secret) and created it
    // first, cancelled, through the API server.
    let bob = Caller::new("bob");
    let squatted = WorkId::for_idempotency_key(&keys(&ns), &bob, "nightly", 0).remove(0);
    let api: Api<MiningWorkflow> = ns.api();
    let trap = planted(squatted.as_str(), &bob, json!({"difficulty": 8, "blocks": 1, "cancel": true}));
    api.create(&PostParams::default(), &trap).await.unwrap();

    let start = json!({"difficulty": 8, "blocks": 2, "idempotency_key": "nightly"});
    let first = structured(&Sdk::Python.call(&url, BOB, "start_mining", start.clone()).await).clone();
    assert_eq!(first["status"], "completed", "bob's own fresh work, not the squatter's: {first:#}");
    let id = first["workflow_id"].as_str().unwrap();
    assert_ne!(id, squatted.as_str());
    // A retry finds bob's own workflow, never the squatted one.
    let again = structured(&Sdk::TypeScript.call(&url, BOB, "start_mining", start).await).clone();
    assert_eq!(again["workflow_id"], id, "{again:#}");
    // The squatted object does not exist for bob.
    let seen = structured(
        &Sdk::Python.call(&url, BOB, "get_mining_result", json!({"workflow_id": squatted.as_str()})).await,
    )
    .clone();
    assert_eq!(seen["status"], "not_found", "{seen:#}");
}

#[tokio::test]
async fn objects_made_directly_appear_in_no_list_and_fill_no_limit() {
    let ns = TestNamespace::new("iso-plant").await;
    install_crd(&ns.client).await;
    // No operator: every workflow stays unfinished, so each counts against the limit.
    let frontend = frontend(&ns, &["--max-running-per-caller", "2"]).await;
    let url = frontend.url();
    let bob = Caller::new("bob");
    let api: Api<MiningWorkflow> = ns.api();
    let real = structured(
        &Sdk::Python.call(&url, BOB, "start_mining", json!({"difficulty": 30, "wait_seconds": 0})).await,
    )
    .clone();
    let real_id = real["workflow_id"].as_str().unwrap().to_string();
    // Planted: names chosen to mislead bob's model, bob's label, and one
    // carrying the proof copied from bob's real workflow.
    let proof =
        api.get(&real_id).await.unwrap().annotation(annotations::OWNER_PROOF).expect("a proof").to_string();
    for (index, name) in
        ["urgent-run-this-next", "mw-aaaaaaaaaaaaaaaaaaaaaaaaaa", "copied-proof"].iter().enumerate()
    {
        let mut object = planted(name, &bob, json!({"difficulty": 30 + index}));
        if *name == "copied-proof" {
            object.metadata.annotations =
                Some([(annotations::OWNER_PROOF.to_string(), proof.clone())].into());
        }
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    let listed =
        structured(&Sdk::TypeScript.call(&url, BOB, "list_mining_workflows", json!({})).await).clone();
    let ids: Vec<&str> =
        listed["workflows"].as_array().unwrap().iter().map(|w| w["workflow_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [real_id.as_str()], "only bob's own workflow: {listed:#}");
    // The 2025-11-25 tasks/list, raw.
    let tasks_list = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/list", "params": {}}).to_string();
    let (code, _, body) = frontend
        .post_mcp_version("localhost", "2025-11-25", &["Authorization: Bearer bob-secret"], &tasks_list)
        .await;
    assert_eq!(code, 200, "{body}");
    let tasks: Value = serde_json::from_str(&body).unwrap();
    let task_ids: Vec<&str> =
        tasks["result"]["tasks"].as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap()).collect();
    assert_eq!(task_ids, [real_id.as_str()], "{body}");
    // Three planted unfinished objects fill none of bob's limit of 2.
    let second = structured(
        &Sdk::Python.call(&url, BOB, "start_mining", json!({"difficulty": 30, "wait_seconds": 0})).await,
    )
    .clone();
    assert_eq!(second["status"], "running", "the limit counts only bob's own: {second:#}");
    // And alice sees none of it.
    let alices = structured(&Sdk::Python.call(&url, ALICE, "list_mining_workflows", json!({})).await).clone();
    assert_eq!(alices["total"], 0, "{alices:#}");
}

#[tokio::test]
async fn a_status_claiming_an_easier_chain_than_asked_for_reads_failed() {
    let ns = TestNamespace::new("iso-status").await;
    install_crd(&ns.client).await;
    // No operator: the status is the forger's alone.
    let frontend = frontend(&ns, &[]).await;
    let url = frontend.url();
    let started = structured(
        &Sdk::Python
            .call(&url, BOB, "start_mining", json!({"difficulty": 20, "blocks": 3, "wait_seconds": 0}))
            .await,
    )
    .clone();
    let id = started["workflow_id"].as_str().unwrap();
    // A real block 1 at difficulty 1, and "admitted" values that say 1 block at difficulty 1.
    let found = miner::mine_block(1, mining_api::GENESIS, 1, 1).unwrap();
    let forged = json!({"status": {
        "phase": "Succeeded", "admittedDifficulty": 1, "admittedBlocks": 1,
        "blocks": [{"index": 1, "nonce": found.nonce, "hash": miner::hex_upper(&found.digest),
                    "attempts": found.nonce + 1, "jobName": "forged"}],
    }});
    let api: Api<MiningWorkflow> = ns.api();
    api.patch_status(id, &PatchParams::default(), &Patch::Merge(forged)).await.unwrap();
    let outcome =
        cluster_tests::eventually("the forged status to be seen", Duration::from_secs(30), || async {
            let document = Sdk::Python.call(&url, BOB, "get_mining_result", json!({"workflow_id": id})).await;
            let outcome = structured(&document).clone();
            (outcome["status"] != "running").then_some(outcome)
        })
        .await;
    assert_eq!(outcome["status"], "failed", "{outcome:#}");
    assert_eq!(outcome["reason"], "InvalidResult", "{outcome:#}");
    assert!(outcome.get("result").is_none(), "{outcome:#}");
}

/// One `get_mining_result` through raw HTTP; its latency.
async fn timed_get(frontend: &FrontendProcess, token: &str, id: &str) -> Duration {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "get_mining_result", "arguments": {"workflow_id": id}}})
    .to_string();
    let auth = format!("Authorization: Bearer {token}");
    let started = Instant::now();
    let (code, _, answer) = frontend.post_mcp("localhost", &[&auth], &body).await;
    let elapsed = started.elapsed();
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains("not_found"), "{answer}");
    elapsed
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn api_requests(frontend: &FrontendProcess) -> f64 {
    let (_, metrics) = frontend.get("/metrics").await;
    metrics
        .lines()
        .filter(|l| l.starts_with("mcp_frontend_api_requests_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn another_callers_id_and_an_unknown_id_cost_no_api_call_and_the_same_time() {
    let ns = TestNamespace::new("iso-timing").await;
    install_crd(&ns.client).await;
    let frontend = frontend(&ns, &[]).await;
    let url = frontend.url();
    let alices = structured(
        &Sdk::Python.call(&url, ALICE, "start_mining", json!({"difficulty": 30, "wait_seconds": 0})).await,
    )
    .clone();
    let existing = alices["workflow_id"].as_str().unwrap().to_string();
    let unknown = WorkId::random(&keys(&ns), &Caller::new("alice")).unwrap().as_str().to_string();
    let before = api_requests(&frontend).await;
    let (mut foreign, mut missing, mut control) = (Vec::new(), Vec::new(), Vec::new());
    // Interleaved, so the machine's noise falls on all three alike.
    for _ in 0..150 {
        foreign.push(timed_get(&frontend, "bob-secret", &existing).await);
        missing.push(timed_get(&frontend, "bob-secret", &unknown).await);
        control.push(timed_get(&frontend, "bob-secret", &unknown).await);
    }
    assert_eq!(api_requests(&frontend).await, before, "neither kind of id reached the API server");
    let (foreign, missing, control) = (median(foreign), median(missing), median(control));
    let noise = missing.abs_diff(control);
    let gap = foreign.abs_diff(missing);
    assert!(
        gap <= (noise * 3).max(Duration::from_micros(500)),
        "p50 foreign {foreign:?} vs unknown {missing:?} (the same request twice differs by {noise:?})"
    );
}

#[tokio::test]
async fn copies_of_a_callers_deleted_workflows_stuck_terminating_never_lock_them_out() {
    let ns = TestNamespace::new("iso-pinned").await;
    install_crd(&ns.client).await;
    // No operator: the caller's two workflows stay unfinished, at the limit.
    let frontend = frontend(&ns, &["--max-running-per-caller", "2"]).await;
    let start = json!({"difficulty": 8, "blocks": 1, "wait_seconds": 0});
    let mut ids = Vec::new();
    for _ in 0..2 {
        let started = Sdk::TypeScript.call(&frontend.url(), ALICE, "start_mining", start.clone()).await;
        ids.push(structured(&started)["workflow_id"].as_str().unwrap().to_string());
    }
    // A namespace user deletes them and plants copies with the caller's
    // label and a finalizer, then deletes those: they stay Terminating.
    let api: Api<MiningWorkflow> = ns.api();
    let alice = Caller::new("alice");
    for id in &ids {
        api.delete(id, &Default::default()).await.unwrap();
        cluster_tests::eventually("the caller's workflow to be gone", Duration::from_secs(30), || async {
            api.get_opt(id).await.unwrap().is_none().then_some(())
        })
        .await;
        let mut copy = planted(id, &alice, json!({"difficulty": 8, "blocks": 1}));
        copy.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        api.create(&PostParams::default(), &copy).await.unwrap();
        api.delete(id, &Default::default()).await.unwrap();
    }
    let pinned = api.get(&ids[0]).await.unwrap();
    assert!(pinned.metadata.deletion_timestamp.is_some(), "the copy is Terminating");
    // The caller is not locked out: the copies hold none of their places.
    let started = Sdk::TypeScript.call(&frontend.url(), ALICE, "start_mining", start.clone()).await;
    assert_eq!(structured(&started)["status"], "running", "{started:#}");
    // Release the copies so the namespace can go.
    for id in &ids {
        let release = json!({"metadata": {"finalizers": null}});
        api.patch(id, &PatchParams::default(), &Patch::Merge(release)).await.unwrap();
    }
}

#[tokio::test]
async fn a_callers_name_does_not_find_their_workflows() {
    let ns = TestNamespace::new("iso-labels").await;
    install_crd(&ns.client).await;
    let frontend = frontend(&ns, &[]).await;
    let started = Sdk::Python
        .call(&frontend.url(), BOB, "start_mining", json!({"difficulty": 8, "blocks": 1, "wait_seconds": 0}))
        .await;
    let id = structured(&started)["workflow_id"].as_str().unwrap().to_string();
    // Whoever may list workflows and knows bob's name computes the label an
    // unkeyed hash would give: it finds nothing.
    let api: Api<MiningWorkflow> = ns.api();
    let public = format!("{}={}", labels::CALLER, Caller::new("bob").digest);
    let found = api.list(&kube::api::ListParams::default().labels(&public)).await.unwrap();
    assert!(found.items.is_empty(), "bob's name gave his workflows away");
    // Bob's workflow carries the keyed label, which only the key computes.
    let label = api.get(&id).await.unwrap().metadata.labels.unwrap()[labels::CALLER].clone();
    assert_eq!(label, keys(&ns).caller_label(&Caller::new("bob").digest));
    // And bob still sees it.
    let listed = Sdk::Python.call(&frontend.url(), BOB, "list_mining_workflows", json!({})).await;
    assert!(structured(&listed).to_string().contains(&id), "{listed:#}");
}
