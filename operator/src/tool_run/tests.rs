//! Which Pods and Jobs a run reads: only its own Job's, made from its template.

use serde_json::json;

use super::*;
use crate::tool_run::plan::PodOutcome;
use kube::runtime::watcher;

fn pod(owner_uid: &str, index: Option<&str>, phase: &str, message: &str) -> Pod {
    let mut annotations = serde_json::Map::new();
    if let Some(index) = index {
        annotations.insert(COMPLETION_INDEX.into(), json!(index));
    }
    serde_json::from_value(json!({
        "metadata": {"name": "p", "labels": {"job-name": "mw-abc"}, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "mw-abc", "uid": owner_uid, "controller": true}]},
        "spec": {"containers": [{"name": "tool", "image": "x"}, {"name": "sidecar", "image": "y"}]},
        "status": {"phase": phase, "containerStatuses": [
            {"name": "sidecar", "ready": false, "restartCount": 0, "image": "y", "imageID": "",
             "state": {"terminated": {"exitCode": 0, "message": "not the tool"}}},
            {"name": "tool", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
             "state": {"terminated": {"exitCode": 0, "message": message}}}]},
    }))
    .unwrap()
}

fn the_job() -> Job {
    serde_json::from_value(json!({"metadata": {"name": "mw-abc", "uid": "job-uid"},
        "spec": {"template": {"spec": {"containers": [{"name": "tool", "image": "x"}, {"name": "sidecar", "image": "y"}]}}}}))
    .unwrap()
}

fn read(pods: &[Pod]) -> Vec<PodOutcome> {
    let job = the_job();
    let own: Vec<&Pod> = pods.iter().filter(|pod| made_by(pod, &job)).collect();
    number_without_indexes(outcomes_of(&own, "tool"))
}

#[test]
fn a_planted_pod_with_the_jobs_labels_is_never_read() {
    // Finding 2: a Pod of the attacker's, labelled and owned as the Job's
    // (the Job controller adopts it), running a command of its own.
    let mut adopted = pod("job-uid", Some("0"), "Succeeded", "{\"sum\":1337}");
    adopted.spec.as_mut().unwrap().containers[0].command = Some(vec!["echo".into()]);
    let pods = [
        pod("job-uid", Some("0"), "Succeeded", "{\"sum\":1}"),
        pod("planted", Some("0"), "Succeeded", "forged"),
        adopted,
    ];
    let read = read(&pods);
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].message, "{\"sum\":1}", "the first container's message, from the Job's own Pod");
}

#[test]
fn a_proxy_admission_put_first_is_not_read_as_the_tool() {
    // A mesh that injects its proxy ahead of the template's containers (as
    // Istio's holdApplicationUntilProxyStarts does): the result is still the
    // tool's, the template's first container, not the Pod's.
    let mut injected = pod("job-uid", Some("0"), "Succeeded", "{\"sum\":3}");
    let proxy = serde_json::from_value(json!({"name": "mesh-proxy", "image": "mesh"})).unwrap();
    injected.spec.as_mut().unwrap().containers.insert(0, proxy);
    let statuses = injected.status.as_mut().unwrap().container_statuses.as_mut().unwrap();
    statuses.insert(
        0,
        serde_json::from_value(json!({"name": "mesh-proxy", "ready": false, "restartCount": 0,
        "image": "mesh", "imageID": "", "state": {"terminated": {"exitCode": 0, "message": "proxy"}}}))
        .unwrap(),
    );
    let read = read(&[injected]);
    assert_eq!(read.len(), 1, "admission's proxy leaves the Pod the Job's");
    assert_eq!(read[0].message, "{\"sum\":3}");
}

#[test]
fn without_indexes_succeeded_pods_are_numbered_in_order() {
    let pods = [pod("job-uid", None, "Failed", "x"), pod("job-uid", None, "Succeeded", "a")];
    let read = read(&pods);
    let succeeded: Vec<_> = read.iter().filter(|o| o.succeeded).map(|o| o.index).collect();
    assert_eq!(succeeded, [0]);
}

#[test]
fn a_job_the_run_does_not_control_is_foreign() {
    let run: ToolRun = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
        "metadata": {"name": "mw-abc", "uid": "run-uid"},
        "spec": {"tool": "t", "arguments": "{}", "jobTemplate": {}},
        "status": {"jobUid": "job-uid"},
    }))
    .unwrap();
    let job = |owner: &str| -> Job {
        serde_json::from_value(json!({"metadata": {"name": "mw-abc", "uid": "job-uid", "ownerReferences": [
            {"apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun", "name": "mw-abc", "uid": owner, "controller": true}]},
            "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}))
        .unwrap()
    };
    assert_eq!(job_state(&run, Some(&job("someone-else")), None), JobState::Foreign);
    assert_eq!(
        job_state(&run, Some(&job("run-uid")), None),
        JobState::Ours { uid: "job-uid".into(), phase: JobPhase::Complete, succeeded: 1 }
    );
    assert_eq!(job_state(&run, None, None), JobState::Missing);
    // A Job re-made under the run's name by someone else, owned by the run.
    let mut replaced = job("run-uid");
    replaced.metadata.uid = Some("planted-uid".into());
    assert_eq!(job_state(&run, Some(&replaced), None), JobState::Foreign);
    // The Job a preempted step left, still seen going: not the new step's,
    // though the run records none and it runs what the run asks.
    let mut preempted = run.clone();
    let status = preempted.status.as_mut().unwrap();
    (status.job_uid, status.preempted_job_uid) = (None, Some("job-uid".into()));
    assert_eq!(
        job_state(&preempted, Some(&job("run-uid")), None),
        JobState::Preempted { uid: "job-uid".into() }
    );
}

/// The Pod watch as it would hold `pods` (projected, first list done).
fn watched(pods: &[Pod]) -> kube::runtime::reflector::Store<Pod> {
    let (store, mut writer) = kube::runtime::reflector::store::<Pod>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for (i, pod) in pods.iter().enumerate() {
        let mut pod = pod.clone();
        pod.metadata.name = Some(format!("p-{i}"));
        crate::projection::project_pod(&mut pod);
        writer.apply_watcher_event(&watcher::Event::InitApply(pod));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

#[test]
fn a_planted_pod_in_the_pod_watch_is_never_taken_for_the_runs() {
    // The attack of the test above, through the watch instead of a list: a
    // Pod controlled by the run's Job (the Job controller adopts it) that
    // runs a command of its own, and one another Job controls.
    let mut adopted = pod("job-uid", Some("0"), "Succeeded", "{\"sum\":1337}");
    adopted.spec.as_mut().unwrap().containers[0].command = Some(vec!["echo".into()]);
    let planted = pod("planted", Some("0"), "Succeeded", "forged");
    let finished = Some(Finished::Complete { parts: 1 });
    // The adopted one is the Job's, yet not made from its template: the
    // watch cannot vouch for it, so the API server is asked.
    let store = watched(&[adopted, planted.clone()]);
    assert!(cached_own_pods(&store, &the_job(), finished).is_none());
    // One another Job controls is not the run's: with only it, no part
    // succeeded, so a finished run's result is not taken from the watch.
    let store = watched(std::slice::from_ref(&planted));
    assert!(cached_own_pods(&store, &the_job(), finished).is_none());
    // The Job's own Pod beside it: its message, and only its.
    let store = watched(&[planted, pod("job-uid", Some("0"), "Succeeded", "{\"sum\":1}")]);
    let (outcomes, _) = cached_own_pods(&store, &the_job(), finished).expect("from the watch");
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].message, "{\"sum\":1}");
}

#[test]
fn a_later_steps_pods_are_found_by_that_steps_job() {
    // Step 1 of run mw-abc runs as Job mw-abc-s1: its Pods carry that name,
    // and the first step's (another Job, gone) are not its.
    let mut step = the_job();
    step.metadata.name = Some("mw-abc-s1".into());
    step.metadata.uid = Some("step-uid".into());
    let mut own = pod("step-uid", Some("0"), "Succeeded", "{\"deployed\":true}");
    own.metadata.labels = Some([("job-name".to_string(), "mw-abc-s1".to_string())].into());
    let first = pod("job-uid", Some("0"), "Succeeded", "MCP_INPUT_REQUIRED {}");
    let finished = Some(Finished::Complete { parts: 1 });
    let (outcomes, _) = cached_own_pods(&watched(&[first, own]), &step, finished).expect("from the watch");
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].message, "{\"deployed\":true}");
}
