//! A step that asks its caller: waiting without a Pod, the answers, the
//! deadline, and the askers that fail.

use super::*;

fn approval() -> serde_json::Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Deploy?",
        "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}}}}})
}

fn asking(key: &str) -> String {
    format!("MCP_INPUT_REQUIRED {}", json!({"inputRequests": {key: approval()}, "state": "s1"}))
}

/// `run` as a step that asked `key` left it (the status `plan` wrote).
fn waiting_for(key: &str) -> ToolRun {
    let mut run = run(None, 1);
    run.status = Some(ToolRunStatus {
        phase: Some(ToolRunPhase::Running),
        job_uid: Some("job-uid".into()),
        ..Default::default()
    });
    let plan = plan(&observe(&run, ours(JobPhase::Complete, 1), vec![pod(0, true, 0, &asking(key))]));
    run.status = plan.status;
    run
}

#[test]
fn a_step_that_asks_waits_without_a_pod_with_its_requests_and_state_recorded() {
    let run = waiting_for("approve");
    let status = run.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(ToolRunPhase::InputRequired));
    assert_eq!(status.input_requests.as_ref().unwrap()["approve"], approval());
    assert_eq!(status.input_state.as_deref(), Some("s1"));
    assert_eq!(status.asked_keys, ["approve"]);
    assert_eq!(status.result, None);
    assert_eq!(status.finished_at, None);
    // The Job that asked goes; nothing runs while it waits, and it holds no slot.
    let plan = plan(&observe(&run, ours(JobPhase::Complete, 1), vec![]));
    assert!(plan.delete_job && !plan.create_job);
    assert_eq!(plan.status, None, "nothing changed: nothing to write");
    assert_eq!(run.lifecycle(), mining_api::Lifecycle::AwaitingInput);
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(24 * 3600)), "woken at its deadline");
}

#[test]
fn once_every_request_is_answered_the_next_step_is_queued_with_the_answers_and_the_state() {
    let run = waiting_for("approve");
    let mut observed = observe(&run, JobState::Missing, vec![]);
    observed.answers = [
        ("approve".to_string(), json!({"action": "accept", "content": {"approve": true}})),
        ("stale".to_string(), json!({"action": "decline"})),
    ]
    .into();
    let plan = plan(&observed);
    let status = status(&plan);
    assert_eq!(status.phase, Some(ToolRunPhase::Pending));
    assert_eq!(
        (status.step, status.job_uid.as_deref(), status.input_requests.as_ref()),
        (Some(1), None, None)
    );
    let (step, data) = plan.input_secret.clone().unwrap();
    assert_eq!(step, 1);
    assert_eq!(data.state, "s1");
    assert_eq!(data.input, r#"{"approve":{"action":"accept","content":{"approve":true}}}"#);
    assert!(!plan.create_job, "the next step waits in the queue like any run");
}

#[test]
fn a_partial_answer_keeps_it_waiting_and_the_deadline_ends_it() {
    let mut run = run(None, 1);
    run.status = Some(ToolRunStatus {
        phase: Some(ToolRunPhase::Running),
        job_uid: Some("job-uid".into()),
        ..Default::default()
    });
    let two = format!("MCP_INPUT_REQUIRED {}", json!({"inputRequests": {"a": approval(), "b": approval()}}));
    run.status = plan(&observe(&run, ours(JobPhase::Complete, 1), vec![pod(0, true, 0, &two)])).status;
    let mut observed = observe(&run, JobState::Missing, vec![]);
    observed.answers = [("a".to_string(), json!({"action": "decline"}))].into();
    assert_eq!(plan(&observed).status, None, "still waiting for b");
    observed.now = now().checked_add(k8s_openapi::jiff::SignedDuration::from_secs(24 * 3600)).unwrap();
    let ended = plan(&observed);
    assert_eq!(status(&ended).phase, Some(ToolRunPhase::Failed));
    assert!(status(&ended).message.as_deref().unwrap().contains("did not answer"));
    // Cancel works while it waits.
    let mut cancelled = run.clone();
    cancelled.spec.cancel = true;
    assert_eq!(
        status(&plan(&observe(&cancelled, JobState::Missing, vec![]))).phase,
        Some(ToolRunPhase::Cancelled)
    );
}

#[test]
fn an_endless_asker_a_reused_key_and_an_asking_part_fail_with_the_reason() {
    let mut run = waiting_for("approve");
    // Answered and moved on: the next step asks the same key again.
    let status_of = |run: &ToolRun, message: &str| {
        let mut run = run.clone();
        let status = run.status.as_mut().unwrap();
        status.phase = Some(ToolRunPhase::Running);
        status.job_uid = Some("job-uid".into());
        plan(&observe(&run, ours(JobPhase::Complete, 1), vec![pod(0, true, 0, message)])).status.unwrap()
    };
    let reused = status_of(&run, &asking("approve"));
    assert_eq!(reused.phase, Some(ToolRunPhase::Failed));
    assert!(reused.message.unwrap().contains("earlier round"));
    run.status.as_mut().unwrap().step = Some(MAX_ROUNDS);
    let endless = status_of(&run, &asking("again"));
    assert!(endless.message.unwrap().contains(&format!("at most {MAX_ROUNDS} rounds")));
    let mut parts = self::run(None, 2);
    parts.status = Some(ToolRunStatus {
        phase: Some(ToolRunPhase::Running),
        job_uid: Some("job-uid".into()),
        ..Default::default()
    });
    let asked = plan(&observe(
        &parts,
        ours(JobPhase::Complete, 2),
        vec![pod(0, true, 0, &asking("k")), pod(1, true, 0, "x")],
    ));
    assert!(status(&asked).message.as_deref().unwrap().contains("several parts"));
}
