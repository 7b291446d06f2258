//! Tool runs: each `ToolRun` the MCP frontend made becomes one Job from the
//! run's snapshot of its tool's template; its result is what the Job's own
//! Pods wrote as their termination message. The I/O around [`plan::plan`];
//! the queue, the status write, Events, spans and counted calls are the
//! generic layer's (`queue`, `apply`), shared with workflows.

mod arguments;
pub mod job;
mod outputs_tasks;
pub mod plan;
mod pods;
pub mod provenance;

use mining_api::Work as _;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use mining_api::{ToolRun, ToolRunPhase, ToolRunStatus, labels, reasons};
use tracing::info;

use crate::admission::{Slots, Yield};
use crate::queue::Proven;
use crate::work::{MANAGER, Outcome, PlannedEvent, REPLAN_AFTER, Recorded, Shell, WorkKind, publish_events};
use crate::{Error, Result};
use plan::{JobPhase, JobState, Observed};
#[cfg(test)]
use pods::{COMPLETION_INDEX, POD_PAGE_SIZE, made_by, number_without_indexes, outcomes_of};
use pods::{Finished, cached_own_pods, latest_progress, own_pods};

/// What tool runs' reconciles remember beyond the shell.
#[derive(Default)]
pub struct ToolContext {
    /// Runs (by uid) whose next reconcile reads their Job from the API
    /// server: a create met a Job the watch does not hold. Each is removed
    /// when read, so it holds at most the runs being created.
    pub read_live: Mutex<HashSet<String>>,
}

/// The shell of tool runs' reconciles.
pub type RunShell = Shell<ToolRun>;

impl WorkKind for ToolRun {
    type Context = ToolContext;
    /// A run's reconcile holds little (one run, a page of Pods) and waits on
    /// the API server most of its time, so more run at once than workflows'.
    const CONCURRENCY: u16 = 64;
    const PAGE_SIZE: u32 = 50;
    /// Only runs the frontend proved run, so only they queue.
    const PROVEN: Proven = Proven::Only;

    fn jobs_selector() -> String {
        labels::TOOL_RUN.to_string()
    }

    fn project_job(job: &mut Job) {
        crate::projection::project_tool_job(job)
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "reconcile",
            tool_run = self.metadata.name.as_deref().unwrap_or_default(),
            tool = %self.spec.tool,
            trace_id = tracing::field::Empty,
        )
    }

    fn reconcile<'a>(&'a self, shell: &'a RunShell) -> BoxFuture<'a, Result<Outcome>> {
        reconcile_inner(self, shell).boxed()
    }

    fn refused_status(&self, why: &str, now: Timestamp) -> (Self::Status, String) {
        let message = format!("the API server refused to store the run's status: {why}");
        let mut status = failed(self, message.clone());
        status.finished_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        (status, message)
    }

    /// The outputs server, its sweep and copies, when a store is configured.
    fn started(shell: &Arc<RunShell>) {
        outputs_tasks::start(shell);
    }
}

impl RunShell {
    /// What `run`'s Job is handed to upload its files (none without a store).
    fn hand_over(&self, run: &ToolRun) -> Option<crate::outputs::HandOver> {
        let (outputs, keys) = (self.outputs.as_ref()?, self.keys.as_ref()?);
        let ids =
            [run.metadata.namespace.as_deref()?, run.metadata.name.as_deref()?, run.metadata.uid.as_deref()?];
        Some(crate::outputs::HandOver {
            url: format!(
                "{}{}",
                outputs.url.trim_end_matches('/'),
                crate::outputs::run_path(ids[0], ids[1], ids[2])
            ),
            token: keys.outputs_upload_token(ids),
        })
    }
}

fn tool_error<'a>(action: &'static str, name: &'a str) -> impl FnOnce(kube::Error) -> Error + 'a {
    move |source| Error::Work { noun: ToolRun::NOUN, action, name: name.to_string(), source }
}

async fn reconcile_inner(run: &ToolRun, ctx: &RunShell) -> Result<Outcome> {
    // A finished run's Job goes with it (owner reference); an unfinished one
    // may be kept stored by a finalizer, so the plan stops it first.
    if run.metadata.deletion_timestamp.is_some() && run.is_finished() {
        return Ok(Outcome::AWAIT_CHANGE);
    }
    let name = run.metadata.name.clone().ok_or(Error::MissingMetadata("name"))?;
    let namespace = run.metadata.namespace.clone().ok_or(Error::MissingMetadata("namespace"))?;
    let runs: Api<ToolRun> = Api::namespaced(ctx.client.clone(), &namespace);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    // The run's Job as the watch has it. Read from the API server instead
    // when the watch cannot say: before its first list, when it holds the
    // name without the spec a provenance check needs, or once a create met
    // a Job of that name it does not hold (one without our label).
    let uid = run.metadata.uid.clone().unwrap_or_default();
    let watched = futures::FutureExt::now_or_never(ctx.jobs.wait_until_ready()).is_some_and(|r| r.is_ok());
    let read_live =
        !watched || ctx.kind.read_live.lock().unwrap_or_else(PoisonError::into_inner).remove(&uid);
    // A Job the run recorded and the watch does not show is read too: the
    // watch may not have brought it yet (it was made a moment ago), and
    // "deleted before it finished" is said only of what the API server says.
    let recorded = !run.is_finished() && run.status.as_ref().is_some_and(|s| s.job_uid.is_some());
    // Each step after a round of answers has its own Job.
    let job_name = run.job_name();
    let job = match ctx.jobs.get(&ObjectRef::new(&job_name).within(&namespace)) {
        Some(job) if !read_live && job.spec.is_some() => Some((*job).clone()),
        None if !read_live && !recorded => None,
        _ => jobs.get_opt(&job_name).await.map_err(tool_error("read the Job of", &name))?,
    };
    let state = job_state(run, job.as_ref(), ctx.hand_over(run).as_ref());
    // The run's own Pods, read while it is unfinished: what they wrote and
    // how many parts succeeded come only from Pods its Job made (the Job's
    // own counts include any Pod it adopted). A Job that has made no Pod
    // yet has none to read; its next status change wakes the run again.
    // The Pod watch answers when it can (see `cached_own_pods`).
    let (pods, progress_line) = match (&state, &job) {
        (JobState::Ours { phase, .. }, Some(job)) if !run.is_finished() && has_made_pods(job) => {
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
            let finished = match phase {
                JobPhase::Running => None,
                JobPhase::Complete => Some(Finished::Complete { parts: run.parts() }),
                JobPhase::Failed { .. } => Some(Finished::Failed),
            };
            let (outcomes, running) = match cached_own_pods(&ctx.pods, job, finished) {
                Some(cached) => cached,
                None => own_pods(&pods, job).await?,
            };
            let line = match (phase, running) {
                (JobPhase::Running, Some((pod, container))) => latest_progress(&pods, &pod, container).await,
                _ => None,
            };
            (outcomes, line)
        }
        _ => (Vec::new(), None),
    };
    // A running step's Pods that cannot start (or a Job that made none):
    // why, from the node, the scheduler or the API server itself.
    let now = Timestamp::now();
    let starting = match (&state, &job) {
        (JobState::Ours { phase: JobPhase::Running, .. }, Some(job)) if !run.is_finished() => {
            let own = crate::work::pods::cached_own(&ctx.pods, job, ToolRun::READS);
            let own: Vec<&Pod> = own.iter().map(AsRef::as_ref).collect();
            crate::work::pod_start::observe(&ctx.client, job, job, &own, now).await
        }
        _ => Default::default(),
    };
    let state = match state {
        JobState::Ours { uid, phase, .. } => {
            let parts: std::collections::BTreeSet<i32> =
                pods.iter().filter(|o| o.succeeded).map(|o| o.index).collect();
            JobState::Ours { uid, phase, succeeded: parts.len() as i32 }
        }
        other => other,
    };
    // A preemptible run's running step gives its slot back once the head
    // of the queue, having waited past the preemption delay, asked
    // (`reclaim_for`) and the run is over its share: one yield decided at
    // a time, as a workflow's block.
    let running_step = run.phase() == ToolRunPhase::Running
        && matches!(state, JobState::Ours { phase: JobPhase::Running, .. });
    let yielding = ctx.yielding(run, running_step && run.spec.preemptible, false, now);
    // Its Pods waiting for a node (none running): it may give its slot
    // back, preemptible or not, since its step never ran (`admission::node`).
    let waiting_for_node = (starting.blocked.as_ref())
        .filter(|blocked| running_step && blocked.cause == mining_api::pod_start::Cause::NoCapacity)
        .map(|blocked| blocked.since);
    let give_way = ctx.node_wait(run, waiting_for_node, now);
    let preempt = yielding.decision == Yield::Now;
    let proven = ctx.queue.parties.proves(run);
    let waiting = matches!(state, JobState::Missing)
        && run.status.as_ref().is_none_or(|s| s.job_uid.is_none())
        && !run.spec.cancel
        && !run.is_finished()
        && proven;
    // A run that may start counts the work holding slots (of every kind),
    // and that being admitted right now, and reserves a slot until its
    // status is written.
    let (slots, admission) = match waiting {
        true => {
            let (slots, reserved) = ctx.admission(run);
            (slots, Some(reserved))
        }
        false => (Slots::OPEN, None),
    };
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    // Before a result is taken: did the tool read the arguments it was given?
    let arguments_intact = match &state {
        JobState::Ours { phase, .. } if *phase != JobPhase::Running && !run.is_finished() => {
            arguments::intact(&secrets, run).await?
        }
        _ => true,
    };
    // Answers count only with the frontend's proof for this run and key.
    let answers = match &ctx.keys {
        Some(keys) if run.phase() == ToolRunPhase::InputRequired => {
            mining_api::tool_input::proven_answers(run, keys)
        }
        _ => Default::default(),
    };
    // A step that completed: the files the run stored so far, which a
    // success records (a store that fails is asked again, never skipped).
    let outputs = match (&state, &ctx.outputs) {
        (JobState::Ours { phase: JobPhase::Complete, .. }, Some(outputs)) if !run.is_finished() => {
            match outputs.store.recorded(&namespace, &uid).await {
                Ok(recorded) => Ok(recorded),
                Err(refusal) if refusal.status >= 500 => {
                    return Err(Error::Outputs { name: name.clone(), message: refusal.message });
                }
                Err(refusal) => Err(refusal.message),
            }
        }
        _ => Ok(Vec::new()),
    };
    let observed = Observed {
        run,
        outputs,
        slots,
        arguments_intact,
        progress_line,
        proven,
        job: state,
        pods,
        answers,
        preempt,
        waiting_for_node,
        give_way,
        now,
        default_ttl_seconds: ctx.default_ttl_seconds,
        start: starting.blocked,
        pod_start_timeout: ctx.pod_start_timeout,
    };
    let mut plan = plan::plan(&observed);
    let finishes = plan.status.as_ref().and_then(|s| s.phase).is_some_and(ToolRunPhase::is_finished);
    if let Some(again) = starting.look_again.filter(|_| !finishes && !run.is_finished()) {
        plan.requeue_after = Some(plan.requeue_after.map_or(again, |planned| planned.min(again)));
    }
    if plan.delete_job {
        // Only the Job observed: never one made under its name since.
        let observed_uid = match &observed.job {
            JobState::Ours { uid, .. } | JobState::Preempted { uid } => Some(uid.clone()),
            JobState::Missing | JobState::Foreign => None,
        };
        let background = DeleteParams {
            preconditions: observed_uid.map(|uid| Preconditions { uid: Some(uid), resource_version: None }),
            ..DeleteParams::background()
        };
        match jobs.delete(&job_name, &background).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {}
            Err(err) => return Err(tool_error("delete the Job of", &name)(err)),
        }
    }
    let secret_uid = match plan.create_job {
        true => match arguments::ensure(&secrets, run, ctx.hand_over(run).as_ref()).await? {
            Ok(uid) => Some(uid),
            Err(why) => {
                plan.create_job = false;
                plan.status = Some(failed(run, format!("the run's arguments cannot be handed over: {why}")));
                None
            }
        },
        false => None,
    };
    if let Some((step, data)) = &plan.input_secret {
        match arguments::ensure_input(&secrets, run, *step, data).await? {
            Ok(uid) => {
                if let Some(status) = plan.status.as_mut() {
                    status.input_secret_uid = Some(uid);
                }
            }
            Err(why) => {
                plan.status = Some(failed(run, format!("the caller's answers cannot be handed over: {why}")))
            }
        }
    }
    if plan.create_job {
        match job::job_for_run(run, ctx.hand_over(run).as_ref()).map(|mut built| {
            crate::work::queue_job(&mut built, ctx.queue_name.as_deref());
            built
        }) {
            Some(built) => match jobs
                .create(&PostParams { field_manager: Some(MANAGER.into()), ..Default::default() }, &built)
                .await
            {
                Ok(created) => {
                    info!(run = %name, tool = %run.spec.tool, step = run.step(), "tool run started");
                    if let Some(status) = plan.status.as_mut() {
                        status.job_uid = created.metadata.uid;
                        status.arguments_secret_uid = secret_uid;
                    }
                }
                // Made a moment ago and not watched yet, or someone else's
                // the watch does not select: the next reconcile reads it.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let mut read_live = ctx.kind.read_live.lock().unwrap_or_else(PoisonError::into_inner);
                    read_live.insert(uid);
                    return Ok(Outcome::after(Duration::from_millis(500)));
                }
                // The template is the tool author's: one the API server refuses fails the run.
                Err(kube::Error::Api(status)) if matches!(status.code, 400 | 403 | 422) => {
                    let why = format!("the API server refused the tool's Job: {}", status.message);
                    plan.status = Some(failed(run, why));
                }
                Err(err) => return Err(tool_error("create the Job of", &name)(err)),
            },
            None => plan.status = Some(failed(run, "the run's jobTemplate has no Pod spec".into())),
        }
    }
    // Not admitted: nothing to count on, so others need not wait for this write.
    let planned = plan.status.as_ref().and_then(|s| s.phase);
    let admission = admission.filter(|_| planned == Some(ToolRunPhase::Running));
    if let Some(status) = &plan.status {
        match ctx.record_status(run, status).await? {
            Recorded::Written => {}
            Recorded::Conflict => return Ok(Outcome::after(REPLAN_AFTER)),
            Recorded::Refused => {
                if job.is_some() {
                    let _ = jobs.delete(&job_name, &DeleteParams::background()).await;
                }
                return Ok(Outcome::AWAIT_CHANGE);
            }
        }
        drop(admission);
        // The yield is written: the next may be decided.
        drop(yielding);
        announce(ctx, run, status, plan.start_event);
        let ended_without_success =
            matches!(status.phase, Some(ToolRunPhase::Failed | ToolRunPhase::Cancelled));
        if let (true, Some(outputs)) = (ended_without_success, &ctx.outputs) {
            outputs.store.forget(&namespace, &uid).await;
        }
    }
    if plan.delete_run {
        if let Some(outputs) = &ctx.outputs {
            outputs.store.forget(&namespace, &uid).await;
        }
        match runs.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(tool_error("delete", &name)(err)),
        }
        return Ok(Outcome::AWAIT_CHANGE);
    }
    Ok(Outcome { requeue: plan.requeue_after, waited: waiting.then_some(slots) })
}

/// Logs a change of phase and says it as an Event on the run.
fn announce(ctx: &RunShell, run: &ToolRun, status: &ToolRunStatus, start_event: Option<&'static str>) {
    let before = run.status.as_ref().and_then(|s| s.phase);
    if let Some(phase) = status.phase.filter(|phase| phase.is_finished() && Some(*phase) != before) {
        info!(run = %run.name_any(), phase = phase.as_str(), "tool run finished");
    }
    // Its Pods cannot start: the Event says so under the reason of its own.
    let event = match start_event {
        Some(reason) => {
            ctx.metrics.count_start_event(ToolRun::NOUN, reason);
            let note = mining_api::pow::clip(status.message.as_deref().unwrap_or_default(), 1024).to_string();
            Some(PlannedEvent { warning: true, reason, note })
        }
        None => event_for(before, status),
    };
    if let Some(event) = event {
        publish_events(&ctx.client, &ctx.instance, run, &run.name_any(), vec![event]);
    }
}

/// How a run that gave its slot back for want of a node says so
/// (`admission::node::GiveWay::message`).
const NO_CAPACITY_SAID: &str = "no capacity:";

/// The Event a status change is worth (pure): only what people read — a
/// wait, a start after one, the end, every warning — as for workflows. A
/// run admitted at once gets no `RunStarted`: its end says it all, and a
/// busy operator makes one Event a run instead of two.
fn event_for(before: Option<ToolRunPhase>, status: &ToolRunStatus) -> Option<PlannedEvent> {
    let phase = status.phase.filter(|phase| Some(*phase) != before)?;
    let (warning, reason) = match phase {
        // Running, then queued again: it gave its slot back, its Pods
        // waiting for a node (`admission::node`), or preempted.
        ToolRunPhase::Pending if before == Some(ToolRunPhase::Running) => {
            let no_capacity = status.message.as_deref().is_some_and(|m| m.starts_with(NO_CAPACITY_SAID));
            (false, if no_capacity { reasons::NO_CAPACITY } else { reasons::YIELDED })
        }
        ToolRunPhase::Pending => (false, reasons::QUEUED),
        ToolRunPhase::Running if before.is_none() => return None,
        ToolRunPhase::Running => (false, reasons::RUN_STARTED),
        ToolRunPhase::InputRequired => (false, reasons::INPUT_REQUIRED),
        ToolRunPhase::Succeeded => (false, reasons::RUN_SUCCEEDED),
        ToolRunPhase::Failed => (true, reasons::RUN_FAILED),
        ToolRunPhase::Cancelled => (false, reasons::CANCELLED),
    };
    let note = mining_api::pow::clip(status.message.as_deref().unwrap_or_default(), 1024).to_string();
    Some(PlannedEvent { warning, reason, note })
}

/// The Failed status of a run the operator could not carry on: `message`
/// says why; no result is kept.
fn failed(run: &ToolRun, message: String) -> ToolRunStatus {
    ToolRunStatus {
        phase: Some(ToolRunPhase::Failed),
        message: Some(message),
        result: None,
        finished_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now())),
        ..run.status.clone().unwrap_or_default()
    }
}

/// What the Job named as the run is to the run.
/// Whether the Job says it has made a Pod (pure): one active, ended, or a
/// condition (a Job that failed before any Pod ran still says why).
fn has_made_pods(job: &Job) -> bool {
    job.status.as_ref().is_some_and(|status| {
        [status.active, status.succeeded, status.failed].into_iter().flatten().any(|count| count > 0)
            || status.conditions.as_ref().is_some_and(|conditions| !conditions.is_empty())
    })
}

fn job_state(run: &ToolRun, job: Option<&Job>, outputs: Option<&crate::outputs::HandOver>) -> JobState {
    let Some(job) = job else { return JobState::Missing };
    let run_uid = run.metadata.uid.as_deref();
    let controlled = job.owner_references().iter().any(|owner| {
        owner.controller == Some(true) && Some(owner.uid.as_str()) == run_uid && owner.kind == "ToolRun"
    });
    let uid = job.metadata.uid.clone().unwrap_or_default();
    if !controlled || uid.is_empty() {
        return JobState::Foreign;
    }
    if run.status.as_ref().and_then(|s| s.preempted_job_uid.as_deref()) == Some(uid.as_str()) {
        return JobState::Preempted { uid };
    }
    // The Job this operator created is the one whose uid the run recorded;
    // before that is recorded (a restart between create and status write),
    // only a Job that runs what the run asks is taken as its own.
    let ours = match run.status.as_ref().and_then(|s| s.job_uid.as_deref()) {
        Some(recorded) => recorded == uid,
        None => job::job_for_run(run, outputs)
            .is_some_and(|built| provenance::job_mismatch(job, &built).is_none()),
    };
    if !ours {
        return JobState::Foreign;
    }
    let status = job.status.clone().unwrap_or_default();
    let holds = |type_: &str| {
        status.conditions.iter().flatten().find(|c| c.type_ == type_ && c.status == "True").cloned()
    };
    let phase = if holds("Complete").is_some() {
        JobPhase::Complete
    } else if let Some(failed) = holds("Failed") {
        JobPhase::Failed {
            reason: failed.reason.unwrap_or_default(),
            message: failed.message.unwrap_or_default(),
        }
    } else {
        JobPhase::Running
    };
    JobState::Ours { uid, phase, succeeded: status.succeeded.unwrap_or(0) }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod reconcile_tests;
