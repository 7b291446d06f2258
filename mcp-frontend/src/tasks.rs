//! MCP tasks over any kind of work (pure): what a workflow or a tool run
//! looks like as a task to each of the two task generations this server speaks.
//!
//! The task id is the workflow name and the workflow is the only record, so a
//! task survives frontend restarts and reads the same from every replica.
//! The two generations differ only where their specs do:
//! - 2025-11-25 core tasks: a mining failure is a `failed` task, and a cancel
//!   is recorded in `spec.cancel`, so every read after `tasks/cancel` says
//!   `cancelled` (that spec wants the new state in the cancel's answer).
//! - the 2026-07-28 extension: a mining failure is a `completed` task whose
//!   tool result has `isError: true`; `cancelled` once the operator stopped it.

use k8s_openapi::jiff::Timestamp;
use rmcp::model::CallToolResult;

use crate::contract::{Details as _, OutcomeStatus};
use crate::core::{Any, Served};
use crate::operator_presence::Presence;

/// Which task protocol a request speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generation {
    /// Core tasks of protocol 2025-11-25 (`tasks/get|result|list|cancel`).
    Core2025,
    /// The `io.modelcontextprotocol/tasks` extension of 2026-07-28.
    Extension2026,
}

/// A task's status, as both generations spell it on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    Working,
    /// Waiting for the requestor's answers (`inputRequests`).
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Working | Self::InputRequired)
    }
}

/// One workflow seen as a task at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSnapshot {
    pub task_id: String,
    pub state: TaskState,
    pub status_message: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339: the newest time the status records.
    pub last_updated_at: String,
    /// How long the task is kept after it finishes, in milliseconds.
    pub ttl_ms: u64,
    /// While working: when to poll again, from the same estimate as `poll_after_seconds`.
    pub poll_interval_ms: Option<u64>,
    /// The operator has finished the workflow, so its tool result is final.
    pub result_ready: bool,
    /// The tool result as the synchronous tool gives it.
    pub result: CallToolResult,
    /// While `input_required`: what the work asks, key → request.
    pub input_requests: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The work (of any kind) as a task of `generation`, with what is known
/// of the operator; `default_ttl_seconds` is the operator's retention for
/// work that sets none.
pub fn snapshot<K: Served>(
    work: &K,
    now: Timestamp,
    generation: Generation,
    default_ttl_seconds: u64,
    operator: Presence,
) -> TaskSnapshot {
    let answer = work.outcome(now).with_operator(operator);
    let result_ready = !matches!(answer.status, OutcomeStatus::Running | OutcomeStatus::InputRequired);
    let input_requests = answer.details.input_requests().cloned();
    let state = match (generation, answer.status) {
        // The cancel's answer said `cancelled`; no later read may say
        // otherwise. A recorded cancel ends in Cancelled (the cancel and the
        // operator's status write are both made on a read version, so one
        // of them conflicts): a success or failure beside `spec.cancel` was
        // there first, and someone's later edit does not undo it.
        (
            Generation::Core2025,
            OutcomeStatus::Running | OutcomeStatus::NotFound | OutcomeStatus::Cancelled,
        ) if work.cancel_requested() => TaskState::Cancelled,
        (_, OutcomeStatus::Running | OutcomeStatus::NotFound) => TaskState::Working,
        (_, OutcomeStatus::InputRequired) => TaskState::InputRequired,
        (_, OutcomeStatus::Completed) => TaskState::Completed,
        (Generation::Core2025, OutcomeStatus::Failed) => TaskState::Failed,
        // SEP-2663: `failed` is for protocol-level failures; a tool that
        // ran and reported an error completes with `isError`.
        (Generation::Extension2026, OutcomeStatus::Failed) if work.failure_is_its_own() => {
            TaskState::Completed
        }
        (Generation::Extension2026, OutcomeStatus::Failed) => TaskState::Failed,
        (_, OutcomeStatus::Cancelled) => TaskState::Cancelled,
    };
    let status_message = match (&answer.error, answer.status) {
        (Some(error), OutcomeStatus::Failed) if !answer.status_message.contains(error.as_str()) => {
            format!("{}: {error}", answer.status_message)
        }
        _ if state == TaskState::Cancelled && !result_ready => {
            format!("Cancelled; {}", answer.status_message.trim_start_matches("Cancel requested; "))
        }
        _ => answer.status_message.clone(),
    };
    let ttl_seconds = work
        .ttl_seconds_after_finished()
        .and_then(|seconds| u64::try_from(seconds).ok())
        .unwrap_or(default_ttl_seconds);
    let poll_interval_ms = match state {
        TaskState::Working => answer.poll_after_seconds.map(|seconds| u64::from(seconds) * 1000),
        _ => None,
    };
    let created = work.meta().creation_timestamp.as_ref().map(|t| t.0);
    TaskSnapshot {
        task_id: answer.workflow_id.clone(),
        state,
        status_message,
        created_at: created.unwrap_or(now).to_string(),
        last_updated_at: work.last_updated().or(created).unwrap_or(now).to_string(),
        ttl_ms: ttl_seconds.saturating_mul(1000),
        poll_interval_ms,
        result_ready,
        result: answer.into_result(),
        input_requests,
    }
}

/// [`snapshot`] of work of whichever kind.
pub fn snapshot_any(
    work: &Any,
    now: Timestamp,
    generation: Generation,
    default_ttl_seconds: u64,
    operator: Presence,
) -> TaskSnapshot {
    crate::each_kind!(work, work => snapshot(&**work, now, generation, default_ttl_seconds, operator))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mining_api::testing::{self, WorkflowExt};
    use mining_api::{ConditionStatus, MiningWorkflow, ToolRun, WorkflowPhase};

    use crate::tool_runs::contract::run_outcome;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    fn workflow(phase: WorkflowPhase, cancel: bool) -> MiningWorkflow {
        let mut status = testing::status(phase);
        if phase == WorkflowPhase::Failed {
            status.conditions.push(testing::condition(
                mining_api::condition_types::READY,
                ConditionStatus::False,
                "JobFailed",
                "the miner exited with code 3",
                at(1_030),
            ));
        }
        testing::workflow("mw-task", 1, 2).cancelled(cancel).created_at(at(1_000)).with_status(status)
    }

    #[test]
    fn running_workflows_are_working_in_both_generations() {
        for phase in [WorkflowPhase::Pending, WorkflowPhase::Mining] {
            for generation in [Generation::Core2025, Generation::Extension2026] {
                let task = snapshot(&workflow(phase, false), at(1_010), generation, 600, Presence::Unknown);
                assert_eq!(task.state, TaskState::Working, "{phase:?} {generation:?}");
                assert!(!task.result_ready);
                let interval = task.poll_interval_ms.expect("a working task suggests a poll interval");
                assert!((1_000..=60_000).contains(&interval), "{interval}");
                assert_eq!(task.ttl_ms, 600_000);
                assert_eq!(task.created_at, "1970-01-01T00:16:40Z");
            }
        }
    }

    #[test]
    fn a_mining_failure_is_failed_in_2025_and_completed_with_an_error_in_2026() {
        let failed = workflow(WorkflowPhase::Failed, false);
        let core = snapshot(&failed, at(1_100), Generation::Core2025, 60, Presence::Unknown);
        assert_eq!(core.state, TaskState::Failed);
        assert!(core.status_message.contains("the miner exited with code 3"), "{}", core.status_message);
        assert_eq!(core.poll_interval_ms, None);
        assert_eq!(core.last_updated_at, at(1_030).to_string());
        let extension = snapshot(&failed, at(1_100), Generation::Extension2026, 60, Presence::Unknown);
        assert_eq!(extension.state, TaskState::Completed);
        assert_eq!(extension.result.is_error, Some(true), "a failed outcome is a tool error");
        assert!(extension.result_ready);
    }

    #[test]
    fn a_recorded_cancel_reads_cancelled_at_once_in_2025_only() {
        let cancelling = workflow(WorkflowPhase::Mining, true);
        let core = snapshot(&cancelling, at(1_010), Generation::Core2025, 60, Presence::Unknown);
        assert_eq!(core.state, TaskState::Cancelled);
        assert!(!core.result_ready, "the operator has not stopped it yet");
        assert!(core.status_message.starts_with("Cancelled; Mined 0 of 2"), "{}", core.status_message);
        let extension = snapshot(&cancelling, at(1_010), Generation::Extension2026, 60, Presence::Unknown);
        assert_eq!(extension.state, TaskState::Working);
        let stopped = snapshot(
            &workflow(WorkflowPhase::Cancelled, true),
            at(1_010),
            Generation::Extension2026,
            60,
            Presence::Unknown,
        );
        assert_eq!(stopped.state, TaskState::Cancelled);
        assert!(stopped.result_ready);
    }

    #[test]
    fn a_cancel_set_after_the_work_finished_changes_no_outcome() {
        // An editor (or a cancel that lost the race) sets `spec.cancel` on a
        // finished workflow: what the caller reads stays what happened.
        for (phase, state) in
            [(WorkflowPhase::Succeeded, TaskState::Completed), (WorkflowPhase::Failed, TaskState::Failed)]
        {
            let mut finished = workflow(phase, true);
            if phase == WorkflowPhase::Succeeded {
                let mut prev = mining_api::GENESIS.to_string();
                for index in 1..=2 {
                    let found = miner::mine_block(u64::from(index), &prev, 1, 1).unwrap();
                    let hash = miner::hex_upper(&found.digest);
                    let block = testing::mined_block(index, found.nonce, &hash, at(1_001), at(1_002));
                    finished.status.as_mut().unwrap().blocks.push(block);
                    prev = hash;
                }
            }
            let task = snapshot(&finished, at(1_100), Generation::Core2025, 60, Presence::Unknown);
            assert_eq!(task.state, state, "{phase:?}");
            assert!(task.result_ready);
        }
    }

    #[test]
    fn the_workflows_own_retention_wins_and_huge_values_saturate() {
        let mut kept = workflow(WorkflowPhase::Mining, false);
        kept.spec.ttl_seconds_after_finished = Some(90);
        assert_eq!(snapshot(&kept, at(1_010), Generation::Core2025, 60, Presence::Unknown).ttl_ms, 90_000);
        kept.spec.ttl_seconds_after_finished = Some(-5);
        assert_eq!(snapshot(&kept, at(1_010), Generation::Core2025, 60, Presence::Unknown).ttl_ms, 60_000);
        assert_eq!(
            snapshot(&kept, at(1_010), Generation::Core2025, u64::MAX, Presence::Unknown).ttl_ms,
            u64::MAX
        );
    }

    #[test]
    fn last_updated_at_stops_when_the_work_finishes() {
        let mut failed = workflow(WorkflowPhase::Failed, false);
        let status = failed.status.as_mut().unwrap();
        status.finished_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(1_030)));
        // Someone's later edit (or a late condition) after the work finished.
        status.conditions.push(testing::condition(
            "Edited",
            ConditionStatus::True,
            "Edit",
            "later",
            at(5_000),
        ));
        let task = snapshot(&failed, at(6_000), Generation::Core2025, 60, Presence::Unknown);
        assert_eq!(task.last_updated_at, at(1_030).to_string());
        // While working, the newest change counts.
        let mut mining = workflow(WorkflowPhase::Mining, false);
        let status = mining.status.as_mut().unwrap();
        status.conditions.push(testing::condition(
            "Progress",
            ConditionStatus::True,
            "Mined",
            "1",
            at(1_020),
        ));
        let task = snapshot(&mining, at(1_050), Generation::Core2025, 60, Presence::Unknown);
        assert_eq!(task.last_updated_at, at(1_020).to_string());
    }

    fn run(phase: mining_api::ToolRunPhase, cancel: bool) -> ToolRun {
        let mut run: ToolRun = serde_json::from_value(serde_json::json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
            "metadata": {"name": "mw-run", "creationTimestamp": "1970-01-01T00:16:40Z"},
            "spec": {"tool": "sum", "arguments": "{}", "jobTemplate": {}, "cancel": cancel, "ttlSecondsAfterFinished": 90},
        }))
        .unwrap();
        run.status = Some(mining_api::ToolRunStatus {
            phase: Some(phase),
            message: Some("the tool failed (exit code 3): boom".into()),
            exit_code: Some(3),
            finished_at: phase
                .is_finished()
                .then(|| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(1_030))),
            ..Default::default()
        });
        run
    }

    #[test]
    fn a_tool_run_is_a_task_by_the_same_rules_as_a_workflow() {
        use mining_api::ToolRunPhase;
        let working = snapshot(
            &run(ToolRunPhase::Running, false),
            at(1_010),
            Generation::Core2025,
            60,
            Presence::Leading,
        );
        assert_eq!((working.state, working.ttl_ms), (TaskState::Working, 90_000));
        assert!(working.poll_interval_ms.is_some());
        let failed = run(ToolRunPhase::Failed, false);
        let core = snapshot(&failed, at(1_100), Generation::Core2025, 60, Presence::Leading);
        assert_eq!(core.state, TaskState::Failed);
        assert!(core.status_message.contains("boom"), "{}", core.status_message);
        assert_eq!(core.last_updated_at, at(1_030).to_string());
        let extension = snapshot(&failed, at(1_100), Generation::Extension2026, 60, Presence::Leading);
        assert_eq!((extension.state, extension.result.is_error), (TaskState::Completed, Some(true)));
        let cancelling = run(ToolRunPhase::Running, true);
        assert_eq!(
            snapshot(&cancelling, at(1_010), Generation::Core2025, 60, Presence::Leading).state,
            TaskState::Cancelled
        );
        assert_eq!(
            snapshot(&cancelling, at(1_010), Generation::Extension2026, 60, Presence::Leading).state,
            TaskState::Working
        );
    }

    #[test]
    fn a_run_the_tool_failed_completes_with_an_error_and_one_that_never_ran_fails_on_2026() {
        use mining_api::ToolRunPhase;
        let reported = run(ToolRunPhase::Failed, false);
        let task = snapshot(&reported, at(1_100), Generation::Extension2026, 60, Presence::Unknown);
        assert_eq!(task.state, TaskState::Completed, "a tool error is the tool's result");
        let mut never_started = run(ToolRunPhase::Failed, false);
        let status = never_started.status.as_mut().unwrap();
        status.exit_code = None;
        status.message =
            Some("the tool's Pod cannot start: container tool: CreateContainerConfigError".into());
        let task = snapshot(&never_started, at(1_100), Generation::Extension2026, 60, Presence::Unknown);
        assert_eq!(task.state, TaskState::Failed);
        assert!(task.status_message.contains("cannot start"), "{}", task.status_message);
        // 2025-11-25 tasks fail either way.
        for failed in [&reported, &never_started] {
            let task = snapshot(failed, at(1_100), Generation::Core2025, 60, Presence::Unknown);
            assert_eq!(task.state, TaskState::Failed);
        }
    }

    #[test]
    fn a_running_run_says_when_no_operator_carries_it_on() {
        use mining_api::ToolRunPhase;
        let absent = Presence::Absent { since: Some(at(1_000)) };
        let running = run(ToolRunPhase::Running, false);
        let task = snapshot(&running, at(1_010), Generation::Extension2026, 60, absent);
        assert_eq!(task.state, TaskState::Working);
        assert!(task.status_message.contains("No operator is running"), "{}", task.status_message);
        let answer = run_outcome(&running, at(1_010)).with_operator(absent);
        assert_eq!(answer.reason.as_deref(), Some(crate::contract::NO_OPERATOR));
        let led = run_outcome(&running, at(1_010)).with_operator(Presence::Leading);
        assert_eq!(led.reason, None);
        let failed = run_outcome(&run(ToolRunPhase::Failed, false), at(1_100)).with_operator(absent);
        assert_eq!(failed.reason, None, "a finished answer is left as it is");
    }
}
