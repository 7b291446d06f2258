//! What a run's reconcile reads from the watches (its Job, its Pods) and
//! when it asks the API server instead.

use super::*;

#[tokio::test]
async fn a_running_run_reads_its_recorded_job_from_the_watch_not_the_api_server() {
    let mut run = run_of(&keys());
    run.status = Some(ToolRunStatus {
        phase: Some(ToolRunPhase::Running),
        job_uid: Some("job-uid".into()),
        ..Default::default()
    });
    let job = controlled_job(&run, json!({"active": 1}));
    // The watch keeps what the run's Pods are checked against.
    let mut projected = job.clone();
    crate::projection::project_tool_job(&mut projected);
    assert_eq!(projected.spec, job.spec, "a controlled Job's spec is kept");
    assert_eq!(projected.metadata.uid, job.metadata.uid);
    // The API server's copy is scripted too: reading it would be seen.
    let script = Script { job: Some(serde_json::to_value(&job).unwrap()), ..Script::default() };
    let scenario = Scenario::with_watched_job(&run, script, job);
    scenario.reconcile(&run).await;
    let calls = scenario.calls();
    assert!(!calls.iter().any(|c| c.starts_with("GET /batch/v1/namespaces/ns/jobs")), "{calls:#?}");
    assert!(
        calls.iter().any(|c| c.starts_with("GET /v1/namespaces/ns/pods")),
        "its Pods are still read: {calls:#?}"
    );
}

#[tokio::test]
async fn with_the_job_watch_listed_an_admission_asks_nothing_before_creating() {
    let run = run_of(&keys());
    let scenario = Scenario::with_synced_watch(&run, Script::default());
    scenario.reconcile(&run).await;
    assert_eq!(
        scenario.calls(),
        [
            "POST /v1/namespaces/ns/secrets",
            "POST /batch/v1/namespaces/ns/jobs",
            "PATCH /mining-operator.dev/v1alpha1/namespaces/ns/toolruns/mw-run/status",
        ],
        "the watch says there is no Job yet: no GET"
    );
}

#[tokio::test]
async fn a_job_the_watch_does_not_hold_is_read_after_its_create_is_refused() {
    // Someone made a Job of the run's name without our label: the watch
    // never brings it, so the create's 409 makes the next reconcile read it
    // (and find it foreign) instead of trying to create it for ever.
    let foreign = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "mw-run", "namespace": "ns", "uid": "planted"}, "spec": {"template": {}}});
    let script = Script { job: Some(foreign), job_unwatched: true, ..Script::default() };
    let run = run_of(&keys());
    let scenario = Scenario::with_synced_watch(&run, script);
    assert_eq!(scenario.reconcile(&run).await, Requeue::requeue(Duration::from_millis(500)));
    assert!(!scenario.calls().iter().any(|c| c.starts_with("GET")), "{:?}", scenario.calls());
    scenario.log.lock().unwrap().clear();
    scenario.reconcile(&run).await;
    let calls = scenario.calls();
    assert_eq!(
        calls.first().map(String::as_str),
        Some("GET /batch/v1/namespaces/ns/jobs/mw-run"),
        "{calls:?}"
    );
    assert!(!calls.iter().any(|c| c == "POST /batch/v1/namespaces/ns/jobs"), "no second create: {calls:?}");
    let failed = scenario.status_write().body["status"]["phase"].clone();
    assert_eq!(failed, "Failed", "a foreign Job fails the run");
}

#[tokio::test]
async fn a_job_event_before_the_cache_shows_the_written_status_writes_nothing_again() {
    // The cache still holds the run as it was before this operator wrote
    // "running" with the Job's uid; a Job event reconciles it from there.
    let stale = run_of(&keys());
    let job = controlled_job(&stale, json!({"active": 1}));
    let scenario = Scenario::with_watched_job(&stale, Script::default(), job);
    scenario.reconcile(&stale).await;
    assert_eq!(scenario.status_write().body["status"]["jobUid"], "job-uid");
    scenario.log.lock().unwrap().clear();
    scenario.reconcile(&stale).await;
    let calls = scenario.calls();
    assert!(
        !calls.iter().any(|c| c.starts_with("PATCH")),
        "the status written is what the plan says again: nothing to write ({calls:#?})"
    );
}

#[tokio::test]
async fn a_finished_jobs_result_is_read_from_the_pod_watch_when_it_shows_the_pod() {
    let mut run = run_of(&keys());
    run.status = Some(ToolRunStatus {
        phase: Some(ToolRunPhase::Running),
        job_uid: Some("job-uid".into()),
        ..Default::default()
    });
    let mut job =
        controlled_job(&run, json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}));
    // As the API server stores it: its defaults are in the template (and so
    // in the Pod), and the projection must keep what provenance compares.
    let container = &mut job.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0];
    container.termination_message_policy = Some("File".into());
    let template = job.spec.as_ref().unwrap().template.clone();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "mw-run-x", "namespace": "ns",
            "labels": {"job-name": "mw-run", labels::MANAGED_BY: MANAGER},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "mw-run",
                "uid": "job-uid", "controller": true}]},
        "spec": template.spec,
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "tool", "ready": false,
            "restartCount": 0, "image": "example/sum", "imageID": "",
            "state": {"terminated": {"exitCode": 0, "message": "{\"sum\":3}"}}}]},
    }))
    .unwrap();
    // Before the watch shows the Pod finished, the API server is asked.
    let mut running = pod.clone();
    running.status.as_mut().unwrap().phase = Some("Running".into());
    let lagging = Scenario::with_watched_job_and_pods(&run, Script::default(), job.clone(), vec![running]);
    lagging.reconcile(&run).await;
    assert!(
        lagging.calls().iter().any(|c| c.starts_with("GET /v1/namespaces/ns/pods")),
        "{:#?}",
        lagging.calls()
    );
    // Once it does, the result comes from the watch: no Pod list.
    let scenario = Scenario::with_watched_job_and_pods(&run, Script::default(), job, vec![pod]);
    scenario.reconcile(&run).await;
    let calls = scenario.calls();
    assert!(!calls.iter().any(|c| c.contains("/pods")), "{calls:#?}");
    let status = scenario.status_write().body["status"].clone();
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(status["result"], "{\"sum\":3}", "{status:#}");
}

#[tokio::test]
async fn a_recorded_job_the_watch_has_not_brought_yet_is_read_not_taken_for_deleted() {
    // The status says which Job was made; the watch has not shown it yet.
    let mut run = run_of(&keys());
    run.status = Some(ToolRunStatus {
        phase: Some(ToolRunPhase::Running),
        job_uid: Some("job-uid".into()),
        message: Some("running".into()),
        progress: Some("0/1".into()),
        started_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::testing::at(0))),
        ..Default::default()
    });
    let job = controlled_job(&run, json!({}));
    let script = Script { job: Some(serde_json::to_value(&job).unwrap()), ..Script::default() };
    let scenario = Scenario::with_synced_watch(&run, script);
    scenario.reconcile(&run).await;
    let calls = scenario.calls();
    assert_eq!(
        calls.first().map(String::as_str),
        Some("GET /batch/v1/namespaces/ns/jobs/mw-run"),
        "{calls:#?}"
    );
    assert!(!calls.iter().any(|c| c.starts_with("PATCH")), "still running, nothing to write: {calls:#?}");
    // Gone from the API server too: then it was deleted.
    let scenario = Scenario::with_synced_watch(&run, Script::default());
    scenario.reconcile(&run).await;
    let failed = scenario.status_write().body["status"].clone();
    assert_eq!(failed["phase"], "Failed", "{failed:#}");
}
