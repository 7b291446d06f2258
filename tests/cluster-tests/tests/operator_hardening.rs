//! The operator against input a hostile or careless user can send: values at
//! and past the schema's bounds, and a miner whose result no status can hold.

use std::time::Duration;

use cluster_tests::{OperatorProcess, TestNamespace, install_crd, phase, wait_for, workflow};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, PostParams};
use mining_api::bounds::MAX_DURATION_SECONDS;
use mining_api::{MiningWorkflow, WorkflowPhase, condition_types, labels, reasons};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn durations_past_the_bounds_are_refused_and_the_largest_allowed_ones_mine() {
    let ns = TestNamespace::new("mwf-bounds").await;
    install_crd(&ns.client).await;
    let operator = OperatorProcess::start(&ns.name, &[]);
    let api: Api<MiningWorkflow> = ns.api();
    // Values that used to make `plan` panic in a loop are refused at the door.
    for (field, value) in
        [("activeDeadlineSeconds", 300_000_000_000i64), ("ttlSecondsAfterFinished", i64::MAX)]
    {
        let err = api
            .create(&PostParams::default(), &workflow("too-far", json!({"difficulty": 8, field: value})))
            .await
            .expect_err(field);
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 422), "{field}: {err}");
    }
    // A status wider than the Rust types can no longer be stored either.
    api.create(&PostParams::default(), &workflow("wide", json!({"difficulty": 8, "cancel": true})))
        .await
        .unwrap();
    let wide = json!({"status": {"currentBlock": 99_999_999_999u64}});
    let err = api
        .patch_status("wide", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&wide))
        .await
        .expect_err("currentBlock above its bound");
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 422), "{err}");
    // The largest allowed values are mined, and the operator stays up.
    let spec = json!({"difficulty": 8, "blocks": 2, "activeDeadlineSeconds": MAX_DURATION_SECONDS,
                      "ttlSecondsAfterFinished": MAX_DURATION_SECONDS});
    api.create(&PostParams::default(), &workflow("far", spec)).await.unwrap();
    let done = move |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Succeeded);
    wait_for(&api, "far", done, TIMEOUT).await;
    assert_eq!(operator.get("/healthz").await.0, 200);
    assert_eq!(operator.get("/readyz").await.0, 200);
}

#[ignore = "needs the local cluster's local/oversize-nonce image; tests/run.sh runs it there"]
#[tokio::test]
async fn a_nonce_no_status_can_hold_fails_the_block_instead_of_looping() {
    let ns = TestNamespace::new("mwf-oversize").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &["--miner-image", "local/oversize-nonce"]);
    let api: Api<MiningWorkflow> = ns.api();
    api.create(&PostParams::default(), &workflow("huge", json!({"difficulty": 1, "blocks": 3})))
        .await
        .unwrap();
    let failed = move |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Failed);
    let workflow = wait_for(&api, "huge", failed, TIMEOUT).await.unwrap();
    let status = workflow.status.unwrap();
    assert!(status.blocks.is_empty(), "nothing unstorable is recorded");
    let ready = status.conditions.iter().find(|c| c.type_ == condition_types::READY).unwrap();
    assert_eq!(ready.reason, reasons::INVALID_RESULT);
    assert!(ready.message.contains("largest a status can hold"), "{}", ready.message);
    let jobs: Api<Job> = ns.api();
    let listed =
        jobs.list(&ListParams::default().labels(&format!("{}=huge", labels::WORKFLOW))).await.unwrap();
    assert_eq!(listed.items.len(), 1, "no Job is built on the refused block");
}

#[tokio::test]
async fn workflows_named_like_each_others_jobs_or_recreated_never_share_a_job() {
    let ns = TestNamespace::new("mwf-names").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let api: Api<MiningWorkflow> = ns.api();
    let succeeded = |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Succeeded);
    let long = format!("long-{}", "x".repeat(120));
    api.create(&PostParams::default(), &workflow(&long, json!({"difficulty": 8, "blocks": 1})))
        .await
        .unwrap();
    let first = wait_for(&api, &long, succeeded, TIMEOUT).await.unwrap();
    let first_job = first.status.unwrap().blocks[0].job_name.clone();
    // A second workflow named exactly like the first one's Job stem.
    let stem = first_job.trim_end_matches("-b1").to_string();
    api.create(&PostParams::default(), &workflow(&stem, json!({"difficulty": 9, "blocks": 1})))
        .await
        .unwrap();
    let second = wait_for(&api, &stem, succeeded, TIMEOUT).await.unwrap();
    let second_job = second.status.unwrap().blocks[0].job_name.clone();
    assert_ne!(first_job, second_job);
    // The same name deleted and created again mines at once, with Jobs of its own.
    api.delete(&stem, &Default::default()).await.unwrap();
    wait_for(&api, &stem, |w: Option<&MiningWorkflow>| w.is_none(), TIMEOUT).await;
    api.create(&PostParams::default(), &workflow(&stem, json!({"difficulty": 9, "blocks": 1})))
        .await
        .unwrap();
    let again = wait_for(&api, &stem, succeeded, TIMEOUT).await.unwrap();
    assert_ne!(again.status.unwrap().blocks[0].job_name, second_job);
}

#[tokio::test]
async fn a_very_long_name_gets_its_event_and_a_deleted_job_is_told() {
    use k8s_openapi::api::events::v1::Event;
    let ns = TestNamespace::new("mwf-events").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let api: Api<MiningWorkflow> = ns.api();
    let name = format!("e{}", "v".repeat(240));
    api.create(&PostParams::default(), &workflow(&name, json!({"difficulty": 8, "blocks": 3})))
        .await
        .unwrap();
    wait_for(&api, &name, |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Succeeded), TIMEOUT)
        .await;
    let events: Api<Event> = ns.api();
    let notes = cluster_tests::eventually("its WorkflowSucceeded Event", TIMEOUT, || async {
        let notes: Vec<String> = (events.list(&ListParams::default()).await.ok()?.items.into_iter())
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str()))
            .map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect();
        notes.iter().any(|n| n.starts_with("WorkflowSucceeded")).then_some(notes)
    })
    .await;
    // Named after the whole workflow however long its name; the blocks are
    // in its status, not one Event each.
    assert_eq!(notes, ["WorkflowSucceeded: mined and verified 3 blocks"]);

    // A running block's Job deleted by hand is created again, and an Event says so.
    api.create(&PostParams::default(), &workflow("slow", json!({"difficulty": 40, "blocks": 1})))
        .await
        .unwrap();
    let jobs: Api<Job> = ns.api();
    let selector = format!("{}=slow", labels::WORKFLOW);
    let first = cluster_tests::eventually("the block's Job", TIMEOUT, || async {
        jobs.list(&ListParams::default().labels(&selector)).await.ok()?.items.into_iter().next()
    })
    .await;
    jobs.delete(&first.metadata.name.clone().unwrap(), &kube::api::DeleteParams::background()).await.unwrap();
    cluster_tests::eventually("a JobRecreated Event and a new Job", TIMEOUT, || async {
        let told = (events.list(&ListParams::default()).await.ok()?.items.iter())
            .any(|e| e.reason.as_deref() == Some("JobRecreated"));
        let again = (jobs.list(&ListParams::default().labels(&selector)).await.ok()?.items.iter())
            .any(|j| j.metadata.uid != first.metadata.uid && j.metadata.deletion_timestamp.is_none());
        (told && again).then_some(())
    })
    .await;
}

#[ignore = "needs the local cluster's local/non-minimal image; tests/run.sh runs it there"]
#[tokio::test]
async fn a_valid_but_not_smallest_nonce_fails_the_block_and_honest_blocks_say_they_were_checked() {
    let ns = TestNamespace::new("mwf-minimal").await;
    install_crd(&ns.client).await;
    let api: Api<MiningWorkflow> = ns.api();
    {
        let _operator = OperatorProcess::start(&ns.name, &["--miner-image", "local/non-minimal"]);
        api.create(&PostParams::default(), &workflow("liar", json!({"difficulty": 1, "blocks": 2})))
            .await
            .unwrap();
        let failed = wait_for(
            &api,
            "liar",
            |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Failed),
            TIMEOUT,
        )
        .await
        .unwrap();
        let status = failed.status.unwrap();
        assert!(status.blocks.is_empty());
        let ready = status.conditions.iter().find(|c| c.type_ == condition_types::READY).unwrap();
        assert_eq!(ready.reason, reasons::INVALID_RESULT);
        assert!(ready.message.contains("nonce 2 is not the smallest; nonce 1"), "{}", ready.message);
    }
    let _operator = OperatorProcess::start(&ns.name, &[]);
    api.create(&PostParams::default(), &workflow("honest", json!({"difficulty": 12, "blocks": 2})))
        .await
        .unwrap();
    let done = wait_for(
        &api,
        "honest",
        |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Succeeded),
        TIMEOUT,
    )
    .await
    .unwrap();
    assert!(done.status.unwrap().blocks.iter().all(|b| b.minimality_checked));
}

#[tokio::test]
async fn the_concurrency_limit_holds_exactly_and_a_freed_slot_is_taken_at_once() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    use std::collections::HashMap;
    const LIMIT: usize = 5;
    const WORKFLOWS: usize = 100;
    let ns = TestNamespace::new("mwf-limit").await;
    install_crd(&ns.client).await;
    let _operator = OperatorProcess::start(&ns.name, &["--max-concurrent-workflows", &LIMIT.to_string()]);
    let api: Api<MiningWorkflow> = ns.api();
    let mut phases: HashMap<String, Option<WorkflowPhase>> = HashMap::new();
    let mut stream =
        Box::pin(watcher(api.clone(), watcher::Config::default()).default_backoff().applied_objects());
    let creator = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..WORKFLOWS {
                let spec = json!({"difficulty": 8, "blocks": 2});
                api.create(&PostParams::default(), &workflow(&format!("q{i:03}"), spec)).await.unwrap();
            }
        })
    };
    let (mut most_mining, mut longest_idle) = (0, Duration::ZERO);
    let mut idle_since: Option<std::time::Instant> = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while std::time::Instant::now() < deadline {
        let Ok(Some(Ok(wf))) = tokio::time::timeout(Duration::from_secs(5), stream.next()).await else {
            continue;
        };
        phases.insert(wf.metadata.name.clone().unwrap(), phase(Some(&wf)));
        let mining = phases.values().filter(|p| **p == Some(WorkflowPhase::Mining)).count();
        let waiting = phases.values().filter(|p| matches!(p, None | Some(WorkflowPhase::Pending))).count();
        most_mining = most_mining.max(mining);
        // A slot stands idle while work waits: measure how long.
        match (mining < LIMIT && waiting > 0, idle_since) {
            (true, None) => idle_since = Some(std::time::Instant::now()),
            (false, Some(since)) => {
                longest_idle = longest_idle.max(since.elapsed());
                idle_since = None;
            }
            _ => {}
        }
        let done = phases.values().filter(|p| **p == Some(WorkflowPhase::Succeeded)).count();
        if done == WORKFLOWS {
            break;
        }
    }
    creator.await.unwrap();
    let done = phases.values().filter(|p| **p == Some(WorkflowPhase::Succeeded)).count();
    assert_eq!(done, WORKFLOWS, "all workflows finished");
    assert!(most_mining <= LIMIT, "{most_mining} mined at once with a limit of {LIMIT}");
    assert_eq!(most_mining, LIMIT, "the limit was reached");
    // A finished workflow wakes the queue at once; without that wake-up a
    // slot would wait for the 30 s queue refresh. The bound sits far below
    // that refresh and far above scheduling noise on a loaded machine.
    assert!(
        longest_idle < Duration::from_secs(10),
        "a slot stood idle for {longest_idle:?} while workflows waited"
    );
}

#[tokio::test]
async fn a_block_whose_pod_is_lost_before_its_result_was_read_is_mined_again() {
    use k8s_openapi::api::core::v1::Pod;
    let ns = TestNamespace::new("mwf-lost").await;
    install_crd(&ns.client).await;
    let api: Api<MiningWorkflow> = ns.api();
    let jobs: Api<Job> = ns.api();
    let pods: Api<Pod> = ns.api();
    let selector = format!("{}=lost", labels::WORKFLOW);
    // Block 1's Job is created, then the operator dies before it can read the result.
    let mut operator = OperatorProcess::start(&ns.name, &[]);
    api.create(&PostParams::default(), &workflow("lost", json!({"difficulty": 25, "blocks": 2})))
        .await
        .unwrap();
    let job = cluster_tests::eventually("block 1's Job", TIMEOUT, || async {
        jobs.list(&ListParams::default().labels(&selector)).await.ok()?.items.into_iter().next()
    })
    .await;
    operator.kill();
    let name = job.metadata.name.clone().unwrap();
    let complete = |j: Option<&Job>| {
        j.and_then(|j| j.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Complete" && c.status == "True"))
    };
    wait_for(&jobs, &name, complete, TIMEOUT).await;
    // Hard enough (about a second) that the kill lands before the result is read.
    let recorded = api.get("lost").await.unwrap().status.map_or(0, |s| s.blocks.len());
    assert_eq!(recorded, 0, "the operator read block 1 before it was killed");
    // The Pod, and with it the result, is gone.
    pods.delete_collection(&Default::default(), &ListParams::default().labels(&format!("job-name={name}")))
        .await
        .unwrap();
    cluster_tests::eventually("the Pod to be gone", TIMEOUT, || async {
        pods.list(&ListParams::default().labels(&format!("job-name={name}")))
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    let _operator = OperatorProcess::start(&ns.name, &[]);
    let done = wait_for(
        &api,
        "lost",
        |w: Option<&MiningWorkflow>| phase(w) == Some(WorkflowPhase::Succeeded),
        TIMEOUT,
    )
    .await
    .unwrap();
    let status = done.status.unwrap();
    assert_eq!(status.blocks.len(), 2);
    assert_eq!(status.results_lost, Some(1), "block 1 was mined again");
}
