//! Which Pods and Jobs a run reads: only its own Job's, made from its template.

use serde_json::json;

use super::*;
use crate::tools::plan::PodOutcome;

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
    number_without_indexes(outcomes_of(&own))
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
    assert_eq!(job_state(&run, Some(&job("someone-else"))), JobState::Foreign);
    assert_eq!(
        job_state(&run, Some(&job("run-uid"))),
        JobState::Ours { uid: "job-uid".into(), phase: JobPhase::Complete, succeeded: 1 }
    );
    assert_eq!(job_state(&run, None), JobState::Missing);
    // A Job re-made under the run's name by someone else, owned by the run.
    let mut replaced = job("run-uid");
    replaced.metadata.uid = Some("planted-uid".into());
    assert_eq!(job_state(&run, Some(&replaced)), JobState::Foreign);
}
