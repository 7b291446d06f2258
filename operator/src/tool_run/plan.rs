//! What to do with one tool run (pure): create its Job, read its result,
//! fail, cancel or delete it, and the status that says so.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use mining_api::pod_start::{self, Blocked, Verdict};
use mining_api::tool_input::{Ask, MAX_ROUNDS, input_document};
use mining_api::tool_template::template_problem;
use mining_api::{ToolRun, ToolRunPhase, ToolRunStatus};

use crate::admission::Slots;
use crate::admission::node::GiveWay;

/// How soon a queued run looks again whether a slot is free.
pub const QUEUED_RETRY: Duration = Duration::from_secs(3);

/// What the run's Job is, as observed.
#[derive(Debug, Clone, PartialEq)]
pub enum JobState {
    /// No Job of the run's name.
    Missing,
    /// A Job of the run's name that the run does not control.
    Foreign,
    /// The run's own Job.
    Ours { uid: String, phase: JobPhase, succeeded: i32 },
    /// The Job of a step this run gave its slot back from, still seen
    /// going: never the step's new Job, which comes once it is gone.
    Preempted { uid: String },
}

#[derive(Debug, Clone, PartialEq)]
pub enum JobPhase {
    Running,
    Complete,
    /// The Job controller gave up; its condition's reason and message.
    Failed {
        reason: String,
        message: String,
    },
}

/// What one Pod of the run's own Job (controlled by its uid) ended with.
#[derive(Debug, Clone, PartialEq)]
pub struct PodOutcome {
    /// The completion index (0 when the Job is not indexed).
    pub index: i32,
    pub succeeded: bool,
    /// The first container's exit code and termination message.
    pub exit_code: Option<i32>,
    pub message: String,
    /// When it finished, to tell the last failure.
    pub finished_at: Option<Timestamp>,
}

pub struct Observed<'a> {
    pub run: &'a ToolRun,
    /// Once a step completed: the files the run stored, or why they cannot
    /// be taken (more than a run may hand over).
    pub outputs: Result<Vec<mining_api::tool_outputs::ToolOutput>, String>,
    /// Whether a run without a Job may have one now (see [`super::admission`]).
    pub slots: Slots,
    /// The run's arguments Secret is still the one it made (see
    /// `arguments::intact`); read once its Job has ended.
    pub arguments_intact: bool,
    /// The latest status line the running tool printed (see [`progress_line`]).
    pub progress_line: Option<String>,
    /// The run carries the frontend's proof.
    pub proven: bool,
    pub job: JobState,
    /// The Pods of the run's own Job (read once it finished).
    pub pods: Vec<PodOutcome>,
    /// The caller's answers the frontend proved for this run, by key.
    pub answers: std::collections::BTreeMap<String, serde_json::Value>,
    /// Its running step gives its slot back now: the head of the queue has
    /// waited past the preemption delay and the run is over its share
    /// (`admission::yield_for`). Taken only of a preemptible run.
    pub preempt: bool,
    /// Since when its running step's Pods wait for a node, none running.
    pub waiting_for_node: Option<Timestamp>,
    /// Whether it gives its slot back for that, and why (`admission::node::gives_way`).
    pub give_way: Option<GiveWay>,
    pub now: Timestamp,
    pub default_ttl_seconds: u64,
    /// Why the running step's Pods cannot start, if they cannot
    /// (`crate::work::pod_start::observe`).
    pub start: Option<Blocked>,
    /// The operator's bound on waiting for them (the tool's may be shorter).
    pub pod_start_timeout: Duration,
}

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub create_job: bool,
    pub delete_job: bool,
    /// Every request of a round is answered: the Secret the next step
    /// reads (its number and contents) is made before the status says so.
    pub input_secret: Option<(u32, super::job::StepData)>,
    pub delete_run: bool,
    /// The status to write, when it changes.
    pub status: Option<ToolRunStatus>,
    /// The Pod-start reason of this change (`mining_api::pod_start::reasons`):
    /// its Event's reason, and what the metrics count.
    pub start_event: Option<&'static str>,
    pub requeue_after: Option<Duration>,
}

/// How often a running run's status line is read.
pub const PROGRESS_POLL: Duration = Duration::from_secs(10);
/// What a tool prints to say where it is: a line of its first container's
/// log (stdout or stderr) starting with this.
pub const PROGRESS_PREFIX: &str = "MCP_PROGRESS ";
pub use mining_api::tool::RUNNING_PREFIX;
/// Longest status line kept.
pub const MAX_PROGRESS_LINE_BYTES: usize = 200;
/// How much of the log's end is read for it.
pub const PROGRESS_TAIL_LINES: i64 = 20;
pub const PROGRESS_TAIL_BYTES: i64 = 8 * 1024;

/// The last status line in `log` (the tail of a container's log), clipped.
pub fn progress_line(log: &str) -> Option<String> {
    let line = log.lines().rev().find_map(|line| line.strip_prefix(PROGRESS_PREFIX))?.trim();
    let line: String = line.chars().filter(|c| !c.is_control()).collect();
    let clipped = mining_api::pow::clip(&line, MAX_PROGRESS_LINE_BYTES).to_string();
    (!clipped.is_empty()).then_some(clipped)
}

/// The message of a run whose Job runs and has said nothing yet.
const RUNNING: &str = "running";
/// How soon a run whose preempted Job is still seen looks again.
pub const PREEMPTED_RECHECK: Duration = Duration::from_secs(1);

pub fn plan(observed: &Observed) -> Plan {
    let run = observed.run;
    let current = run.status.clone().unwrap_or_default();
    let now = Time(observed.now);
    let finish = |phase: ToolRunPhase, message: String| ToolRunStatus {
        phase: Some(phase),
        message: Some(message),
        finished_at: Some(now.clone()),
        ..current.clone()
    };
    let mut plan = Plan::default();
    if run.phase().is_finished() {
        // The result is stored in the run (which `view` cannot read): its
        // Job and Pods, whose environment and termination messages `view`
        // can read, go now.
        plan.delete_job = matches!(observed.job, JobState::Ours { .. });
        let ttl =
            run.spec.ttl_seconds_after_finished.map_or(observed.default_ttl_seconds, |s| s.max(0) as u64);
        let finished = current.finished_at.as_ref().map_or(observed.now, |t| t.0);
        let age = observed.now.duration_since(finished).as_secs().max(0) as u64;
        match ttl.checked_sub(age) {
            Some(left) if left > 0 => plan.requeue_after = Some(Duration::from_secs(left)),
            _ => plan.delete_run = true,
        }
        return plan;
    }
    let status = if !observed.proven {
        finish(
            ToolRunPhase::Failed,
            "this run carries no valid proof of the MCP frontend: the operator runs only tool runs the \
             frontend made (call the tool through MCP)"
                .into(),
        )
    } else if let Some(why) = template_problem(&run.spec.job_template) {
        // A run snapshotted before the rule, or an edited one: never run it.
        plan.delete_job = matches!(observed.job, JobState::Ours { .. });
        finish(ToolRunPhase::Failed, format!("the tool's template cannot be run: {why}"))
    } else if run.spec.cancel {
        plan.delete_job = matches!(observed.job, JobState::Ours { .. });
        finish(ToolRunPhase::Cancelled, "cancelled".into())
    } else if run.metadata.deletion_timestamp.is_some() {
        // Kept stored by someone's finalizer: stop the work, hold nothing.
        plan.delete_job = matches!(observed.job, JobState::Ours { .. });
        finish(ToolRunPhase::Cancelled, "deleted before it finished; its Job was stopped".into())
    } else if run.phase() == ToolRunPhase::InputRequired {
        // The step that asked has ended: its Job and Pods go; nothing runs
        // while the caller thinks.
        plan.delete_job = matches!(observed.job, JobState::Ours { .. });
        awaiting_input(observed, &current, &mut plan)
    } else {
        match &observed.job {
            JobState::Missing if current.job_uid.is_some() => {
                finish(ToolRunPhase::Failed, "the run's Job was deleted before it finished".into())
            }
            JobState::Missing => match observed.slots {
                slots if !slots.admits() => {
                    plan.requeue_after = Some(QUEUED_RETRY);
                    ToolRunStatus {
                        phase: Some(ToolRunPhase::Pending),
                        message: Some(slots.queued_message("tool runs are running")),
                        ..current.clone()
                    }
                }
                _ => {
                    plan.create_job = true;
                    // Said as the Job's first look will say it, so that
                    // look has nothing to write.
                    ToolRunStatus {
                        phase: Some(ToolRunPhase::Running),
                        progress: Some(format!("0/{}", run.parts())),
                        message: Some(RUNNING.into()),
                        started_at: current.started_at.clone().or(Some(now.clone())),
                        admitted_at: Some(now.clone()),
                        ..current.clone()
                    }
                }
            },
            JobState::Preempted { .. } => {
                // Deleted already; asked again in case that was lost.
                plan.delete_job = true;
                plan.requeue_after = Some(PREEMPTED_RECHECK);
                current.clone()
            }
            JobState::Foreign => finish(
                ToolRunPhase::Failed,
                format!(
                    "a Job named {} exists that this run did not make; its result cannot be trusted",
                    run.metadata.name.as_deref().unwrap_or_default()
                ),
            ),
            JobState::Ours { phase, .. } if *phase != JobPhase::Running && !observed.arguments_intact => {
                plan.delete_job = true;
                finish(
                    ToolRunPhase::Failed,
                    "the run's arguments Secret was deleted or replaced while it ran: the tool may have read \
                     other arguments, so its result is not taken"
                        .into(),
                )
            }
            JobState::Ours { uid, phase, succeeded } => {
                let mut seen = ToolRunStatus {
                    waiting_for_node_since: None,
                    job_uid: Some(uid.clone()),
                    progress: Some(format!("{}/{}", (*succeeded).clamp(0, run.parts()), run.parts())),
                    started_at: current.started_at.clone().or(Some(now.clone())),
                    ..current.clone()
                };
                match phase {
                    JobPhase::Running if let Some(give_way) = observed.give_way => {
                        plan.delete_job = true;
                        plan.requeue_after = Some(PREEMPTED_RECHECK);
                        gave_way(run, uid, seen, give_way)
                    }
                    JobPhase::Running if observed.preempt && run.spec.preemptible => {
                        plan.delete_job = true;
                        plan.requeue_after = Some(PREEMPTED_RECHECK);
                        preempted(run, uid, seen)
                    }
                    // A short wait for room on the nodes is not said (`NODE_WAIT_SAID_AFTER`):
                    // it reads as running, and is looked at again within the poll.
                    JobPhase::Running
                        if let Some(blocked) = (observed.start.as_ref())
                            .filter(|blocked| pod_start::quiet_for(blocked, observed.now).is_none()) =>
                    {
                        match pod_start::verdict(blocked, start_bound(observed), observed.now) {
                            Verdict::Wait { message, look_again } => {
                                plan.requeue_after = Some(look_again.min(PROGRESS_POLL));
                                let message = format!("{RUNNING_PREFIX}{message}");
                                // An Event when it begins to wait for this cause, not at each look.
                                let said = current
                                    .message
                                    .as_deref()
                                    .is_some_and(|m| m.contains(blocked.cause.said()));
                                if !said {
                                    plan.start_event = Some(pod_start::reasons::WAITING_TO_START);
                                }
                                ToolRunStatus {
                                    phase: Some(ToolRunPhase::Running),
                                    message: Some(message),
                                    waiting_for_node_since: (observed.waiting_for_node)
                                        .filter(|since| pod_start::node_wait_said(*since, observed.now))
                                        .map(Time),
                                    ..seen
                                }
                            }
                            Verdict::Fail { reason, message } => {
                                plan.delete_job = true;
                                plan.start_event = Some(reason);
                                ToolRunStatus {
                                    phase: Some(ToolRunPhase::Failed),
                                    message: Some(format!(
                                        "the tool's Pod cannot start ({reason}): {message}"
                                    )),
                                    finished_at: Some(now.clone()),
                                    ..seen
                                }
                            }
                        }
                    }
                    JobPhase::Running => {
                        // Status lines are read again while it runs.
                        plan.requeue_after = Some(PROGRESS_POLL);
                        let message = match &observed.progress_line {
                            Some(line) => format!("{RUNNING_PREFIX}{line}"),
                            None => RUNNING.into(),
                        };
                        ToolRunStatus { phase: Some(ToolRunPhase::Running), message: Some(message), ..seen }
                    }
                    JobPhase::Complete if let Some(asked) = ask_of(run, &observed.pods) => {
                        plan.delete_job = true;
                        match asked {
                            Ok(ask) => asked_status(observed, ask, seen, &mut plan),
                            Err(why) => ToolRunStatus {
                                phase: Some(ToolRunPhase::Failed),
                                message: Some(why),
                                finished_at: Some(now.clone()),
                                ..seen
                            },
                        }
                    }
                    JobPhase::Complete => {
                        seen.finished_at = Some(now.clone());
                        match result_of(run, &observed.pods).and_then(|r| Ok((r, observed.outputs.clone()?)))
                        {
                            Ok((result, outputs)) => ToolRunStatus {
                                phase: Some(ToolRunPhase::Succeeded),
                                message: Some("the tool finished".into()),
                                result: Some(result),
                                outputs,
                                ..seen
                            },
                            Err(why) => ToolRunStatus {
                                phase: Some(ToolRunPhase::Failed),
                                message: Some(why),
                                ..seen
                            },
                        }
                    }
                    JobPhase::Failed { reason, message } => {
                        let failed = observed
                            .pods
                            .iter()
                            .filter(|pod| !pod.succeeded && pod.exit_code.is_some())
                            .max_by_key(|pod| pod.finished_at);
                        seen.finished_at = Some(now.clone());
                        seen.exit_code = failed.and_then(|pod| pod.exit_code);
                        seen.phase = Some(ToolRunPhase::Failed);
                        seen.message = Some(match failed {
                            Some(pod) if !pod.message.trim().is_empty() => format!(
                                "the tool failed (exit code {}): {}",
                                pod.exit_code.unwrap_or_default(),
                                pod.message.trim()
                            ),
                            Some(pod) => {
                                format!("the tool failed (exit code {})", pod.exit_code.unwrap_or_default())
                            }
                            None => format!("the tool's Job failed ({reason}): {message}"),
                        });
                        seen
                    }
                }
            }
        }
    };
    if status != current {
        plan.status = Some(status);
    }
    plan
}

/// How long this run waits for Pods that cannot start yet: the operator's
/// bound, or the tool's when shorter.
fn start_bound(observed: &Observed) -> Duration {
    let tool = observed.run.spec.pod_start_timeout_seconds.map(|s| Duration::from_secs(s.into()));
    tool.map_or(observed.pod_start_timeout, |tool| tool.min(observed.pod_start_timeout))
}

/// The ask a finished step left instead of a result, if it left one (a run
/// of one part only: parts answer, they do not converse).
fn ask_of(run: &ToolRun, pods: &[PodOutcome]) -> Option<Result<Ask, String>> {
    let pod = pods.iter().find(|pod| pod.succeeded && pod.index == 0)?;
    let asked = run.status.as_ref().map_or(&[][..], |s| s.asked_keys.as_slice());
    let ask = Ask::parse(&pod.message, asked)?;
    if run.parts() > 1 {
        return Some(Err(
            "a tool run of several parts cannot ask for input (only a run of one part can)".into()
        ));
    }
    if run.step() + 1 > MAX_ROUNDS {
        return Some(Err(format!(
            "the tool asked for input more than {MAX_ROUNDS} times; a run may ask at most {MAX_ROUNDS} rounds"
        )));
    }
    let uid = run.metadata.uid.as_deref().unwrap_or_default();
    Some(
        ask.map(|ask| ask.with_elicitation_ids(uid))
            .map_err(|why| format!("the tool asked for input in a way that cannot be used: {why}")),
    )
}

/// The status of a run whose step just asked: waiting, the requests and
/// the state recorded, every key marked used.
fn asked_status(observed: &Observed, ask: Ask, seen: ToolRunStatus, plan: &mut Plan) -> ToolRunStatus {
    let keys: Vec<String> = ask.input_requests.keys().cloned().collect();
    plan.requeue_after = Some(Duration::from_secs(observed.run.input_deadline_seconds().max(1) as u64));
    let mut asked_keys = seen.asked_keys.clone();
    asked_keys.extend(keys.iter().cloned());
    ToolRunStatus {
        phase: Some(ToolRunPhase::InputRequired),
        message: Some(format!("waiting for the caller's answer to {}", keys.join(", "))),
        input_requests: Some(ask.input_requests.into_iter().collect()),
        input_state: Some(ask.state),
        waiting_since: Some(Time(observed.now)),
        asked_keys,
        ..seen
    }
}

/// What a run waiting for its caller's answers does now: keeps waiting,
/// ends at its deadline, or (every request answered) queues its next step.
fn awaiting_input(observed: &Observed, current: &ToolRunStatus, plan: &mut Plan) -> ToolRunStatus {
    let run = observed.run;
    let requests = current.input_requests.clone().unwrap_or_default();
    let deadline = run.input_deadline_seconds();
    let since = current.waiting_since.as_ref().map_or(observed.now, |t| t.0);
    let waited = observed.now.duration_since(since).as_secs().max(0);
    if requests.keys().all(|key| observed.answers.contains_key(key)) {
        let next = run.step() + 1;
        plan.input_secret = Some((
            next,
            super::job::StepData {
                input: input_document(&requests, &observed.answers),
                state: current.input_state.clone().unwrap_or_default(),
            },
        ));
        plan.requeue_after = Some(Duration::from_millis(200));
        return ToolRunStatus {
            phase: Some(ToolRunPhase::Pending),
            message: Some(format!("answered; step {next} is queued")),
            progress: Some(format!("0/{}", run.parts())),
            step: Some(next),
            input_requests: None,
            input_state: None,
            waiting_since: None,
            job_uid: None,
            ..current.clone()
        };
    }
    if waited >= deadline {
        return ToolRunStatus {
            phase: Some(ToolRunPhase::Failed),
            message: Some(format!(
                "the caller did not answer what the tool asked within {deadline} seconds (the tool's inputDeadlineSeconds)"
            )),
            finished_at: Some(Time(observed.now)),
            input_requests: None,
            input_state: None,
            ..current.clone()
        };
    }
    plan.requeue_after = Some(Duration::from_secs((deadline - waited).max(1) as u64));
    current.clone()
}

mod result;
use result::result_of;
mod slot;
use slot::{gave_way, preempted};

#[cfg(test)]
mod tests;
