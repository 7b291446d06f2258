use k8s_openapi::jiff::Timestamp;
use mining_api::Work as _;
use mining_api::tool::MAX_RESULT_BYTES;
use mining_api::{ToolRun, ToolRunPhase, ToolRunStatus};
use serde_json::json;

use super::*;
use crate::admission::Slots;

fn run(output_schema: Option<serde_json::Value>, parts: i32) -> ToolRun {
    let mut value = json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
        "metadata": {"name": "mw-abc", "namespace": "tools", "uid": "run-uid"},
        "spec": {"tool": "sum", "arguments": "{}", "jobTemplate": {"spec": {"completions": parts,
            "template": {"spec": {"containers": [{"name": "tool", "image": "example/sum"}]}}}}},
    });
    if let Some(schema) = output_schema {
        value["spec"]["outputSchema"] = json!(schema.to_string());
    }
    serde_json::from_value(value).unwrap()
}

fn now() -> Timestamp {
    "2026-11-25T01:00:00Z".parse().unwrap()
}

fn observe<'a>(run: &'a ToolRun, job: JobState, pods: Vec<PodOutcome>) -> Observed<'a> {
    Observed {
        run,
        outputs: Ok(Vec::new()),
        slots: Slots::OPEN,
        arguments_intact: true,
        progress_line: None,
        proven: true,
        job,
        pods,
        answers: Default::default(),
        preempt: false,
        waiting_for_node: None,
        give_way: None,
        now: now(),
        default_ttl_seconds: 60,
        start: None,
        pod_start_timeout: Duration::from_secs(600),
    }
}

fn ours(phase: JobPhase, succeeded: i32) -> JobState {
    JobState::Ours { uid: "job-uid".into(), phase, succeeded }
}

fn pod(index: i32, succeeded: bool, exit_code: i32, message: &str) -> PodOutcome {
    PodOutcome {
        index,
        succeeded,
        exit_code: Some(exit_code),
        message: message.into(),
        finished_at: Some(now()),
    }
}

fn status(plan: &Plan) -> &ToolRunStatus {
    plan.status.as_ref().expect("a status to write")
}

/// A run of `preemptible` tool whose step 0 runs as Job "job-uid".
fn running(preemptible: bool) -> ToolRun {
    let mut run = run(None, 1);
    run.spec.preemptible = preemptible;
    run.status = Some(ToolRunStatus {
        phase: Some(ToolRunPhase::Running),
        job_uid: Some("job-uid".into()),
        progress: Some("0/1".into()),
        message: Some(RUNNING.into()),
        started_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now())),
        ..Default::default()
    });
    run
}

#[test]
fn a_preemptible_runs_step_gives_its_slot_back_and_is_queued_to_run_again() {
    let run = running(true);
    let plan = plan(&Observed { preempt: true, ..observe(&run, ours(JobPhase::Running, 0), vec![]) });
    assert!(plan.delete_job, "the running step's Job goes");
    assert!(!plan.create_job);
    let status = status(&plan);
    assert_eq!(status.phase, Some(ToolRunPhase::Pending), "back in the queue, holding no slot");
    assert_eq!(status.job_uid, None);
    assert_eq!(status.preempted_job_uid.as_deref(), Some("job-uid"));
    assert_eq!(status.preemptions, Some(1));
    assert_eq!(status.started_at, run.status.as_ref().unwrap().started_at, "when it first started stays");
    let message = status.message.as_deref().unwrap();
    assert!(message.starts_with("queued: gave its slot back"), "{message}");
    assert!(message.contains("runs again from its start"), "{message}");
    // Preempted again later: counted.
    let mut again = run.clone();
    again.status.as_mut().unwrap().preemptions = Some(1);
    let plan =
        super::plan(&Observed { preempt: true, ..observe(&again, ours(JobPhase::Running, 0), vec![]) });
    assert_eq!(plan.status.unwrap().preemptions, Some(2));
}

#[test]
fn a_run_whose_tool_is_not_preemptible_keeps_running_whatever_it_is_asked() {
    let run = running(false);
    let plan = plan(&Observed { preempt: true, ..observe(&run, ours(JobPhase::Running, 0), vec![]) });
    assert!(!plan.delete_job);
    assert!(plan.status.is_none(), "still running: nothing to write");
}

#[test]
fn the_preempted_steps_job_is_waited_out_never_adopted_nor_called_lost() {
    let mut run = running(true);
    let preempted = plan(&Observed { preempt: true, ..observe(&run, ours(JobPhase::Running, 0), vec![]) });
    run.status = preempted.status;
    // The watch still shows the old Job: it is deleted (again), nothing else.
    let plan = super::plan(&observe(&run, JobState::Preempted { uid: "job-uid".into() }, vec![]));
    assert!(plan.delete_job);
    assert!(!plan.create_job);
    assert!(plan.status.is_none(), "still queued: nothing to write");
    assert_eq!(plan.requeue_after, Some(PREEMPTED_RECHECK));
    // Gone: the run waits for a slot like any other, then makes the step's Job again.
    let queued = Slots { taken: 1, limit: 1, ..Slots::OPEN };
    let waiting = super::plan(&Observed { slots: queued, ..observe(&run, JobState::Missing, vec![]) });
    assert!(!waiting.create_job);
    assert_eq!(
        waiting.status.as_ref().map_or(Some(ToolRunPhase::Pending), |s| s.phase),
        Some(ToolRunPhase::Pending)
    );
    let admitted = super::plan(&observe(&run, JobState::Missing, vec![]));
    assert!(admitted.create_job, "a preempted run is not a run whose Job was lost");
    assert_eq!(status(&admitted).phase, Some(ToolRunPhase::Running));
}

#[test]
fn a_run_without_the_frontends_proof_never_gets_a_job() {
    let run = run(None, 1);
    let plan = plan(&Observed { proven: false, ..observe(&run, JobState::Missing, vec![]) });
    assert!(!plan.create_job);
    assert_eq!(status(&plan).phase, Some(ToolRunPhase::Failed));
    assert!(status(&plan).message.as_deref().unwrap().contains("no valid proof"));
}

#[test]
fn a_new_run_creates_its_job_and_says_running() {
    let run = run(None, 3);
    let plan = plan(&observe(&run, JobState::Missing, vec![]));
    assert!(plan.create_job);
    assert_eq!(status(&plan).phase, Some(ToolRunPhase::Running));
    assert_eq!(status(&plan).progress.as_deref(), Some("0/3"));
}

#[test]
fn the_jobs_first_look_after_admission_has_nothing_to_write() {
    // The admission's status is what the running Job's first reconcile
    // would say: one status write a run fewer.
    let mut run = run(None, 1);
    let admitted = plan(&observe(&run, JobState::Missing, vec![]));
    let mut status = admitted.status.expect("the admission is written");
    status.job_uid = Some("job-uid".into()); // recorded with the create
    run.status = Some(status);
    assert_eq!(plan(&observe(&run, ours(JobPhase::Running, 0), vec![])).status, None);
}

#[test]
fn progress_counts_completed_parts_and_an_unchanged_status_is_not_written() {
    let mut run = run(None, 4);
    let first = plan(&observe(&run, ours(JobPhase::Running, 2), vec![]));
    assert_eq!(status(&first).progress.as_deref(), Some("2/4"));
    run.status = first.status;
    assert_eq!(plan(&observe(&run, ours(JobPhase::Running, 2), vec![])).status, None);
}

#[test]
fn a_result_is_the_termination_message_checked_against_the_output_schema() {
    let schema = json!({"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]});
    let run = run(Some(schema), 1);
    let done = plan(&observe(&run, ours(JobPhase::Complete, 1), vec![pod(0, true, 0, "{\"sum\": 6}\n")]));
    assert_eq!(status(&done).phase, Some(ToolRunPhase::Succeeded));
    assert_eq!(status(&done).result.as_deref(), Some(r#"{"sum":6}"#));
    for (message, expect) in [
        ("{\"total\": 6}", "does not match its outputSchema"),
        ("six", "is not JSON"),
        ("", "wrote no result"),
    ] {
        let failed = plan(&observe(&run, ours(JobPhase::Complete, 1), vec![pod(0, true, 0, message)]));
        assert_eq!(status(&failed).phase, Some(ToolRunPhase::Failed), "{message}");
        assert!(
            status(&failed).message.as_deref().unwrap().contains(expect),
            "{:?}",
            status(&failed).message
        );
        assert_eq!(status(&failed).result, None);
    }
}

#[test]
fn without_an_output_schema_the_result_is_text() {
    let run = run(None, 1);
    let done = plan(&observe(&run, ours(JobPhase::Complete, 1), vec![pod(0, true, 0, "hello\n")]));
    assert_eq!(status(&done).result.as_deref(), Some("hello"));
}

#[test]
fn parts_give_an_array_in_index_order_and_a_lost_part_fails_the_run() {
    let run = run(None, 2);
    let pods = vec![pod(1, true, 0, "b"), pod(0, false, 1, "crash"), pod(0, true, 0, "a")];
    let done = plan(&observe(&run, ours(JobPhase::Complete, 2), pods));
    assert_eq!(status(&done).result.as_deref(), Some(r#"["a","b"]"#));
    let lost = plan(&observe(&run, ours(JobPhase::Complete, 2), vec![pod(1, true, 0, "b")]));
    assert!(status(&lost).message.as_deref().unwrap().contains("part 0 was lost"));
}

#[test]
fn a_failed_pods_message_and_exit_code_become_the_error() {
    let run = run(None, 1);
    let failed = JobPhase::Failed { reason: "BackoffLimitExceeded".into(), message: "too many".into() };
    let plan_ = plan(&observe(&run, ours(failed.clone(), 0), vec![pod(0, false, 3, "no such file\n")]));
    assert_eq!(status(&plan_).phase, Some(ToolRunPhase::Failed));
    assert_eq!(status(&plan_).exit_code, Some(3));
    assert_eq!(status(&plan_).message.as_deref(), Some("the tool failed (exit code 3): no such file"));
    let deadline = JobPhase::Failed { reason: "DeadlineExceeded".into(), message: "ran too long".into() };
    let plan_ = plan(&observe(&run, ours(deadline, 0), vec![]));
    assert_eq!(
        status(&plan_).message.as_deref(),
        Some("the tool's Job failed (DeadlineExceeded): ran too long")
    );
}

#[test]
fn a_foreign_job_or_a_deleted_one_fails_the_run_and_no_result_is_taken() {
    let run_ = run(None, 1);
    let plan_ = plan(&observe(&run_, JobState::Foreign, vec![pod(0, true, 0, "planted")]));
    assert_eq!(status(&plan_).phase, Some(ToolRunPhase::Failed));
    assert_eq!(status(&plan_).result, None);
    assert!(!plan_.create_job);
    let mut started = run(None, 1);
    started.status = Some(ToolRunStatus { job_uid: Some("job-uid".into()), ..Default::default() });
    let plan_ = plan(&observe(&started, JobState::Missing, vec![]));
    assert!(!plan_.create_job, "a run's Job is made once");
    assert!(status(&plan_).message.as_deref().unwrap().contains("deleted"));
}

#[test]
fn cancel_deletes_the_job_and_ends_cancelled() {
    let mut run = run(None, 1);
    run.spec.cancel = true;
    let plan_ = plan(&observe(&run, ours(JobPhase::Running, 0), vec![]));
    assert!(plan_.delete_job);
    assert_eq!(status(&plan_).phase, Some(ToolRunPhase::Cancelled));
}

#[test]
fn a_finished_run_is_kept_for_its_ttl_then_deleted() {
    let mut run = run(None, 1);
    let finished_at = Time("2026-11-25T00:59:30Z".parse().unwrap());
    run.status = Some(ToolRunStatus {
        phase: Some(ToolRunPhase::Succeeded),
        finished_at: Some(finished_at),
        ..Default::default()
    });
    let kept = plan(&observe(&run, ours(JobPhase::Complete, 1), vec![]));
    assert_eq!((kept.delete_run, kept.requeue_after), (false, Some(Duration::from_secs(30))));
    assert!(kept.delete_job, "the result is stored: the Job and its Pods (readable with view) go");
    assert!(!plan(&observe(&run, JobState::Missing, vec![])).delete_job);
    assert_eq!(plan(&observe(&run, JobState::Missing, vec![])).status, None, "nothing to write once gone");
    run.spec.ttl_seconds_after_finished = Some(10);
    assert!(plan(&observe(&run, ours(JobPhase::Complete, 1), vec![])).delete_run);
}

#[test]
fn the_last_status_line_of_the_log_is_the_running_message_clipped_and_polled_again() {
    let log = "starting\nMCP_PROGRESS step 1/3\nnoise\nMCP_PROGRESS step 2/3 \x1b[31m\nafter\n";
    assert_eq!(progress_line(log).as_deref(), Some("step 2/3 [31m"), "control characters are dropped");
    assert_eq!(progress_line("no status lines\n"), None);
    assert_eq!(progress_line(&format!("MCP_PROGRESS {}", "é".repeat(300))).unwrap().len(), 200);
    let run = run(None, 1);
    let observed =
        Observed { progress_line: progress_line(log), ..observe(&run, ours(JobPhase::Running, 0), vec![]) };
    let plan_ = plan(&observed);
    assert_eq!(status(&plan_).message.as_deref(), Some("running: step 2/3 [31m"));
    assert_eq!(plan_.requeue_after, Some(PROGRESS_POLL));
}

#[test]
fn a_queued_run_waits_pending_says_why_and_looks_again() {
    let run = run(None, 1);
    let queued = Slots { taken: 20, limit: 20, ahead: 3, binding: crate::admission::Limit::Kind };
    let plan_ = plan(&Observed { slots: queued, ..observe(&run, JobState::Missing, vec![]) });
    assert!(!plan_.create_job);
    assert_eq!(status(&plan_).phase, Some(ToolRunPhase::Pending));
    let message = status(&plan_).message.clone().unwrap();
    assert_eq!(message, "queued: 3 ahead of it; 20 of at most 20 tool runs are running");
    assert_eq!(plan_.requeue_after, Some(QUEUED_RETRY));
}

#[test]
fn a_template_that_runs_the_arguments_as_a_command_line_never_gets_a_job() {
    let mut shell = run(None, 1);
    let pod = shell.spec.job_template.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    pod.containers[0].args = Some(vec!["sh".into(), "-c".into(), "sum $(MCP_TOOL_ARGUMENTS)".into()]);
    let plan = plan(&observe(&shell, JobState::Missing, vec![]));
    assert!(!plan.create_job);
    assert_eq!(status(&plan).phase, Some(ToolRunPhase::Failed));
    assert!(status(&plan).message.as_ref().unwrap().contains("command line"), "{:?}", status(&plan).message);
}

#[test]
fn results_that_cannot_be_stored_fail_the_run_with_the_reason() {
    // 100 parts of 4 KiB of control characters: each escapes to about 24 KiB.
    let parts = 100;
    let big = run(None, parts);
    let noise = "\u{1}".repeat(MAX_RESULT_BYTES);
    let pods = (0..parts).map(|i| pod(i, true, 0, &noise)).collect();
    let plan = plan(&observe(&big, ours(JobPhase::Complete, parts), pods));
    assert_eq!(status(&plan).phase, Some(ToolRunPhase::Failed));
    assert_eq!(status(&plan).result, None);
    assert!(status(&plan).message.as_ref().unwrap().contains("more than the"), "{:?}", status(&plan).message);
}

#[test]
fn a_deleted_run_kept_by_a_finalizer_stops_and_ends_cancelled() {
    let mut held = run(None, 1);
    held.metadata.deletion_timestamp = Some(Time(now()));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let plan = plan(&observe(&held, ours(JobPhase::Running, 0), vec![]));
    assert!(plan.delete_job);
    assert_eq!(status(&plan).phase, Some(ToolRunPhase::Cancelled));
    assert!(!held.holds_place(), "it holds no quota place either");
}

#[test]
fn a_replaced_arguments_secret_fails_the_run_and_no_result_is_taken() {
    let run = run(None, 1);
    let swapped = Observed {
        arguments_intact: false,
        ..observe(&run, ours(JobPhase::Complete, 1), vec![pod(0, true, 0, "forged")])
    };
    let plan = plan(&swapped);
    assert_eq!(status(&plan).phase, Some(ToolRunPhase::Failed));
    assert_eq!(status(&plan).result, None);
    assert!(status(&plan).message.as_ref().unwrap().contains("arguments Secret"));
}

#[test]
fn a_success_records_the_files_stored_and_files_it_cannot_take_fail_the_run() {
    let run = run(None, 1);
    let file = mining_api::tool_outputs::ToolOutput {
        name: "report.csv".into(),
        media_type: "text/csv".into(),
        size: 16 << 20,
        sha256: "0".repeat(64),
    };
    let done = observe(&run, ours(JobPhase::Complete, 1), vec![pod(0, true, 0, "done")]);
    let stored = plan(&Observed { outputs: Ok(vec![file.clone()]), ..done });
    assert_eq!(status(&stored).phase, Some(ToolRunPhase::Succeeded));
    assert_eq!(status(&stored).outputs, vec![file]);
    let done = observe(&run, ours(JobPhase::Complete, 1), vec![pod(0, true, 0, "done")]);
    let refused = plan(&Observed { outputs: Err("the run stored more than 16 files".into()), ..done });
    assert_eq!(status(&refused).phase, Some(ToolRunPhase::Failed));
    assert_eq!(status(&refused).message.as_deref(), Some("the run stored more than 16 files"));
    assert_eq!(status(&refused).result, None);
}

/// `now()` plus `seconds`.
fn later(seconds: i64) -> Timestamp {
    now().checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds)).unwrap()
}

#[test]
fn a_running_step_whose_pod_cannot_start_fails_at_once_or_after_the_shorter_bound() {
    use mining_api::pod_start::{Blocked, Cause, reasons as start};
    let mut run = run(None, 1);
    let blocked = |cause| Some(Blocked::new(cause, "what the node said", now()));
    let refused = Observed {
        start: blocked(Cause::MissingConfig),
        ..observe(&run, ours(JobPhase::Running, 0), vec![])
    };
    let plan_ = plan(&refused);
    assert!(plan_.delete_job && plan_.start_event == Some(start::CANNOT_START));
    assert_eq!(status(&plan_).phase, Some(ToolRunPhase::Failed));
    assert!(status(&plan_).message.as_deref().unwrap().contains("(CannotStart): its Pod needs a Secret"));
    // A pull back-off waits, saying so, its slot kept; the tool's own
    // bound (30 s) is shorter than the operator's (600 s) and wins.
    run.spec.pod_start_timeout_seconds = Some(30);
    let waiting = Observed {
        start: blocked(Cause::ImagePull),
        now: later(10),
        ..observe(&run, ours(JobPhase::Running, 0), vec![])
    };
    let plan_ = plan(&waiting);
    assert!(!plan_.delete_job && plan_.start_event == Some(start::WAITING_TO_START));
    let said = status(&plan_).message.clone().unwrap();
    assert!(
        said.starts_with("running: waiting for its image to be pulled") && said.contains("30 s"),
        "{said}"
    );
    assert!(plan_.requeue_after.is_some_and(|after| after <= Duration::from_secs(5)));
    // Said already: no second Event.
    run.status = Some(status(&plan_).clone());
    let again = Observed {
        start: blocked(Cause::ImagePull),
        now: later(15),
        ..observe(&run, ours(JobPhase::Running, 0), vec![])
    };
    assert_eq!(plan(&again).start_event, None);
    let past = Observed {
        start: blocked(Cause::ImagePull),
        now: later(30),
        ..observe(&run, ours(JobPhase::Running, 0), vec![])
    };
    let plan_ = plan(&past);
    assert!(plan_.delete_job && plan_.start_event == Some(start::START_TIMED_OUT));
    assert_eq!(status(&plan_).phase, Some(ToolRunPhase::Failed));
}

mod input;

#[test]
fn a_step_waiting_for_a_node_says_since_when_and_gives_way_even_if_its_tool_is_not_preemptible() {
    use crate::admission::node::GiveWay;
    use mining_api::pod_start::{Blocked, Cause};
    let run = running(false);
    let since = now() - k8s_openapi::jiff::SignedDuration::from_secs(30);
    let waiting = Observed {
        start: Some(Blocked::new(Cause::NoCapacity, "0/1 nodes are available: 1 Too many pods.", since)),
        waiting_for_node: Some(since),
        ..observe(&run, ours(JobPhase::Running, 0), vec![])
    };
    let plan_ = plan(&waiting);
    assert_eq!(status(&plan_).phase, Some(ToolRunPhase::Running), "it keeps its slot");
    assert_eq!(status(&plan_).waiting_for_node_since.as_ref().map(|t| t.0), Some(since));
    assert_eq!(plan_.start_event, Some(mining_api::pod_start::reasons::WAITING_TO_START));
    // Waiting less than `NODE_WAIT_SAID_AFTER`: a busy node's normal, not said.
    let lately = now() - k8s_openapi::jiff::SignedDuration::from_secs(5);
    let quiet = plan(&Observed {
        start: Some(Blocked::new(Cause::NoCapacity, "0/1 nodes are available: 1 Too many pods.", lately)),
        waiting_for_node: Some(lately),
        ..observe(&run, ours(JobPhase::Running, 0), vec![])
    });
    assert_eq!(quiet.status, None, "nothing to write: it runs, as its status says");
    assert_eq!(quiet.start_event, None);
    assert_eq!(quiet.requeue_after, Some(PROGRESS_POLL), "as a running step is looked at");
    let gave = plan(&Observed { give_way: Some(GiveWay::ToLess), ..waiting });
    assert!(gave.delete_job, "its Job goes (its Pod never ran)");
    let status = status(&gave);
    assert_eq!(status.phase, Some(ToolRunPhase::Pending), "back in the queue");
    assert_eq!((status.job_uid.as_deref(), status.preempted_job_uid.as_deref()), (None, Some("job-uid")));
    assert_eq!(status.preemptions, None, "its step never ran: no preemption counted");
    assert_eq!(status.waiting_for_node_since, None);
    assert!(status.message.as_deref().unwrap().starts_with("no capacity: requeued"), "{status:?}");
}

#[test]
fn content_blocks_are_a_result_of_one_part_without_a_schema_and_bad_ones_fail_the_run() {
    let written = r#"MCP_CONTENT [{"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}]"#;
    let settled = |schema: Option<serde_json::Value>, parts: i32, message: &str| {
        let run = run(schema, parts);
        let pods = (0..parts).map(|i| pod(i, true, 0, message)).collect();
        status(&plan(&observe(&run, ours(JobPhase::Complete, parts), pods))).clone()
    };
    let taken = settled(None, 1, written);
    assert_eq!((taken.phase, taken.result.as_deref()), (Some(ToolRunPhase::Succeeded), Some(written)));
    let with_schema = settled(Some(json!({"type": "object"})), 1, written);
    assert!(with_schema.message.unwrap().contains("answers JSON"), "a schema's tool answers JSON");
    assert!(settled(None, 2, written).message.unwrap().contains("several parts"));
    let bad = settled(None, 1, r#"MCP_CONTENT [{"type": "video"}]"#);
    assert_eq!(bad.phase, Some(ToolRunPhase::Failed));
    assert!(bad.message.unwrap().contains("content block 0"), "it says which block");
}
