//! Tool runs: each `ToolRun` the MCP frontend made becomes one Job from the
//! run's snapshot of its tool's template; its result is what the Job's own
//! Pods wrote as their termination message. The I/O around [`plan::plan`];
//! the queue, the status write, Events, spans and counted calls are the
//! generic layer's (`queue`, `apply`), shared with workflows.

mod arguments;
pub mod job;
pub mod plan;
pub mod provenance;

use mining_api::Work as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt as _};
use mining_api::ownership::OwnershipKeys;
use mining_api::trace::TraceParent;
use mining_api::{Lifecycle, ToolRun, ToolRunPhase, ToolRunStatus, annotations, labels, reasons};
use tracing::{Instrument as _, info, warn};

use crate::admission::{QueueEntry, Slots, Standing, WorkKind};
use crate::api_calls::counting_calls;
use crate::apply::{publish_events, write_status};
use crate::controller::REPLAN_AFTER;
use crate::job::MANAGER;
use crate::leader::Leadership;
use crate::metrics::{ErrorLabels, Metrics};
use crate::plan::PlannedEvent;
use crate::queue::WorkQueue;
use crate::{Error, Result};
use plan::{JobPhase, JobState, Observed, PodOutcome};

/// Runs reconciled at once.
const CONCURRENCY: u16 = 16;
/// The annotation the Job controller puts the completion index in.
const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Objects per page of the run, Job and Pod lists: at most this many of
/// whatever size anyone made are held at once.
const RUN_PAGE_SIZE: u32 = 50;
const JOB_PAGE_SIZE: u32 = 20;
const POD_PAGE_SIZE: u32 = 5;
/// Most Pod pages one reconcile reads (a run of 100 parts, each retried).
const MAX_POD_PAGES: usize = 100;

pub struct ToolContext {
    pub client: Client,
    /// The frontend's key: only runs it proved are run.
    pub keys: Option<OwnershipKeys>,
    pub leadership: Leadership,
    pub default_ttl_seconds: u64,
    pub metrics: Arc<Metrics>,
    /// The one queue runs and workflows wait in.
    pub queue: Arc<WorkQueue>,
    /// `reportingInstance` of the Events.
    pub instance: String,
}

/// Reconciles every `ToolRun` in `namespace` (all when `None`) until
/// shutdown, into `store` (the queue reads it), and whenever `woken` says.
pub async fn run(
    namespace: Option<&str>,
    context: ToolContext,
    (store, writer): (Store<ToolRun>, Writer<ToolRun>),
    woken: impl futures::Stream<Item = ObjectRef<ToolRun>> + Send + 'static,
) {
    let (runs, jobs): (Api<ToolRun>, Api<Job>) = match namespace {
        Some(ns) => {
            (Api::namespaced(context.client.clone(), ns), Api::namespaced(context.client.clone(), ns))
        }
        None => (Api::all(context.client.clone()), Api::all(context.client.clone())),
    };
    // Kept trimmed, as workflows are: whoever may edit a run cannot grow
    // the operator through its metadata.
    let events = watcher(runs, watcher::Config::default().page_size(RUN_PAGE_SIZE))
        .default_backoff()
        .modify(|run| mining_api::trim_for_cache(&mut run.metadata))
        .reflect(writer)
        .applied_objects();
    let shared = Arc::new(context);
    Controller::for_stream(events, store)
        .owns(jobs, watcher::Config::default().labels(labels::TOOL_RUN).page_size(JOB_PAGE_SIZE))
        .reconcile_on(woken)
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY))
        .shutdown_on_signal()
        .run(reconcile, error_policy, shared)
        .for_each(|result| async move {
            if let Err(err) = result {
                warn!(error = %err, "tool run reconcile failed");
            }
        })
        .await;
}

fn error_policy(run: Arc<ToolRun>, error: &Error, ctx: Arc<ToolContext>) -> Requeue {
    warn!(error = %error, source = ?std::error::Error::source(error), "tool run reconcile error");
    ctx.metrics.reconcile_errors.get_or_create(&ErrorLabels { error: error.metric_label() }).inc();
    if error.is_forbidden() {
        let live = ctx.queue.runs.state().len();
        crate::controller::tell_forbidden(
            &ctx.client,
            &ctx.instance,
            &ctx.queue.memory,
            live,
            run.as_ref(),
            error,
        );
    }
    Requeue::requeue(Duration::from_secs(5))
}

fn tool_error<'a>(action: &'static str, name: &'a str) -> impl FnOnce(kube::Error) -> Error + 'a {
    move |source| Error::ToolRun { action, name: name.to_string(), source }
}

async fn reconcile(run: Arc<ToolRun>, ctx: Arc<ToolContext>) -> Result<Requeue> {
    if !ctx.leadership.is_leading() {
        // A standby: the leader acts; this replica is woken when it leads.
        return Ok(Requeue::await_change());
    }
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    // One span per reconcile; a run made through MCP carries the caller's
    // trace, so its reconciles join it.
    let span = tracing::info_span!(
        "reconcile",
        tool_run = run.metadata.name.as_deref().unwrap_or_default(),
        tool = %run.spec.tool,
        trace_id = tracing::field::Empty,
    );
    if let Some(parent) = run.annotation(annotations::TRACEPARENT).and_then(TraceParent::parse) {
        telemetry::continue_trace(&span, &parent);
        span.record("trace_id", parent.trace_id_hex());
    }
    let (result, calls) = counting_calls(reconcile_inner(&run, &ctx).instrument(span)).await;
    ctx.metrics.reconcile_duration.observe(started.elapsed().as_secs_f64());
    ctx.metrics.api_calls_per_reconcile.observe(calls as f64);
    result
}

async fn reconcile_inner(run: &ToolRun, ctx: &ToolContext) -> Result<Requeue> {
    // A finished run's Job goes with it (owner reference); an unfinished one
    // may be kept stored by a finalizer, so the plan stops it first.
    if run.metadata.deletion_timestamp.is_some() && run.is_finished() {
        return Ok(Requeue::await_change());
    }
    let name = run.metadata.name.clone().ok_or(Error::MissingMetadata("name"))?;
    let namespace = run.metadata.namespace.clone().ok_or(Error::MissingMetadata("namespace"))?;
    let runs: Api<ToolRun> = Api::namespaced(ctx.client.clone(), &namespace);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let job = jobs.get_opt(&name).await.map_err(tool_error("read the Job of", &name))?;
    let state = job_state(run, job.as_ref());
    // The run's own Pods, read while it is unfinished: what they wrote and
    // how many parts succeeded come only from Pods its Job made (the Job's
    // own counts include any Pod it adopted).
    let (pods, progress_line) = match (&state, &job) {
        (JobState::Ours { phase, .. }, Some(job)) if !run.is_finished() => {
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
            let (outcomes, running) = own_pods(&pods, &name, job).await?;
            let line = match (phase, running) {
                (JobPhase::Running, Some((pod, container))) => latest_progress(&pods, &pod, container).await,
                _ => None,
            };
            (outcomes, line)
        }
        _ => (Vec::new(), None),
    };
    let state = match state {
        JobState::Ours { uid, phase, .. } => {
            let parts: std::collections::BTreeSet<i32> =
                pods.iter().filter(|o| o.succeeded).map(|o| o.index).collect();
            JobState::Ours { uid, phase, succeeded: parts.len() as i32 }
        }
        other => other,
    };
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
            let (slots, reserved) = ctx.queue.admission(&QueueEntry::of(WorkKind::ToolRun, run));
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
    let observed = Observed {
        run,
        slots,
        arguments_intact,
        progress_line,
        proven,
        job: state,
        pods,
        now: Timestamp::now(),
        default_ttl_seconds: ctx.default_ttl_seconds,
    };
    let mut plan = plan::plan(&observed);
    if plan.delete_job {
        let background = DeleteParams::background();
        match jobs.delete(&name, &background).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(tool_error("delete the Job of", &name)(err)),
        }
    }
    let secret_uid = match plan.create_job {
        true => match arguments::ensure(&secrets, run).await? {
            Ok(uid) => Some(uid),
            Err(why) => {
                plan.create_job = false;
                plan.status = Some(failed(run, format!("the run's arguments cannot be handed over: {why}")));
                None
            }
        },
        false => None,
    };
    if plan.create_job {
        match job::job_for_run(run) {
            Some(built) => match jobs
                .create(&PostParams { field_manager: Some(MANAGER.into()), ..Default::default() }, &built)
                .await
            {
                Ok(created) => {
                    info!(run = %name, tool = %run.spec.tool, "tool run started");
                    if let Some(status) = plan.status.as_mut() {
                        status.job_uid = created.metadata.uid;
                        status.arguments_secret_uid = secret_uid;
                    }
                }
                // Made a moment ago and not watched yet: the watch brings it.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    return Ok(Requeue::requeue(Duration::from_millis(500)));
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
    if let Some(status) = &plan.status {
        match record_status(ctx, &runs, run, status).await? {
            Recorded::Written => {}
            Recorded::Conflict => return Ok(Requeue::requeue(REPLAN_AFTER)),
            Recorded::Refused => {
                if job.is_some() {
                    let _ = jobs.delete(&name, &DeleteParams::background()).await;
                }
                return Ok(Requeue::await_change());
            }
        }
        drop(admission);
        announce(ctx, run, status);
    }
    if plan.delete_run {
        match runs.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(tool_error("delete", &name)(err)),
        }
        return Ok(Requeue::await_change());
    }
    Ok(plan.requeue_after.map_or_else(Requeue::await_change, Requeue::requeue))
}

/// What writing a run's status came to.
enum Recorded {
    Written,
    /// Someone wrote since the run was read: plan again.
    Conflict,
    /// The API server will never store the planned status; the run failed.
    Refused,
}

/// Writes `status` on the version `run` was read at (the generic layer's
/// preconditioned apply) and tells the queue what this operator wrote.
async fn record_status(
    ctx: &ToolContext,
    runs: &Api<ToolRun>,
    run: &ToolRun,
    status: &ToolRunStatus,
) -> Result<Recorded> {
    let name = run.name_any();
    let version = run.metadata.resource_version.as_deref();
    match write_status(runs, &name, status, version).await {
        Ok(_) => {}
        Err(kube::Error::Api(conflict)) if conflict.code == 409 => {
            info!(run = %name, "tool run changed since it was read; planning again");
            return Ok(Recorded::Conflict);
        }
        // A status the API server will never store (too large, say):
        // end the run with the reason rather than retry for ever.
        Err(kube::Error::Api(refusal)) if matches!(refusal.code, 400 | 413 | 422) => {
            let why = mining_api::pow::clip(&refusal.message, 512).to_string();
            warn!(run = %name, code = refusal.code, "the API server refused a tool run's status");
            let ended = failed(run, format!("the API server refused to store the run's status: {why}"));
            match write_status(runs, &name, &ended, version).await {
                Ok(_) => {}
                Err(kube::Error::Api(conflict)) if conflict.code == 409 => return Ok(Recorded::Conflict),
                Err(err) => return Err(tool_error("write the status of", &name)(err)),
            }
            remember(ctx, run, &ended);
            announce(ctx, run, &ended);
            return Ok(Recorded::Refused);
        }
        Err(err) => return Err(tool_error("write the status of", &name)(err)),
    }
    remember(ctx, run, status);
    Ok(Recorded::Written)
}

/// The queue counts what was written (its cache may lag), and a slot that
/// moved changes whose turn it is.
fn remember(ctx: &ToolContext, run: &ToolRun, status: &ToolRunStatus) {
    let phase = status.phase.unwrap_or_default().lifecycle();
    let standing = Standing { phase, started: status.started_at.as_ref().map(|t| t.0) };
    let uid = run.metadata.uid.as_deref().unwrap_or_default();
    ctx.queue.memory.remember_run(uid, standing, ctx.queue.runs.state().len());
    let before = run.lifecycle();
    if before == Lifecycle::Waiting && phase == Lifecycle::Active {
        ctx.queue.memory.queue_changed();
    }
    if before != phase && (phase.is_finished() || before == Lifecycle::Active) && !before.is_finished() {
        ctx.queue.wake_next();
    }
}

/// Logs a change of phase and says it as an Event on the run.
fn announce(ctx: &ToolContext, run: &ToolRun, status: &ToolRunStatus) {
    let Some(phase) = status.phase.filter(|phase| Some(*phase) != run.status.as_ref().and_then(|s| s.phase))
    else {
        return;
    };
    let name = run.name_any();
    let message = status.message.clone().unwrap_or_default();
    let (warning, reason) = match phase {
        ToolRunPhase::Pending => (false, reasons::QUEUED),
        ToolRunPhase::Running => (false, reasons::RUN_STARTED),
        ToolRunPhase::Succeeded => (false, reasons::RUN_SUCCEEDED),
        ToolRunPhase::Failed => (true, reasons::RUN_FAILED),
        ToolRunPhase::Cancelled => (false, reasons::CANCELLED),
    };
    if phase.is_finished() {
        info!(run = %name, phase = phase.as_str(), "tool run finished");
    }
    let note = mining_api::pow::clip(&message, 1024).to_string();
    publish_events(&ctx.client, &ctx.instance, run, &name, vec![PlannedEvent { warning, reason, note }]);
}

/// What the Pods the run's Job made ended with, and the newest running
/// one (with its first container) for the status line. Read page by page,
/// each projected before the next: Pods are what anyone can create.
async fn own_pods(
    pods: &Api<Pod>,
    name: &str,
    job: &Job,
) -> Result<(Vec<PodOutcome>, Option<(String, String)>)> {
    let mut own_outcomes = Vec::new();
    let mut running: Option<(Option<Timestamp>, String, String)> = None;
    let mut params = ListParams::default().labels(&format!("job-name={name}")).limit(POD_PAGE_SIZE);
    for _ in 0..MAX_POD_PAGES {
        let page = pods.list(&params).await.map_err(tool_error("list the Pods of", name))?;
        let own: Vec<&Pod> = page.items.iter().filter(|pod| made_by(pod, job)).collect();
        own_outcomes.extend(outcomes_of(&own));
        for pod in
            own.iter().filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        {
            let started = pod.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| t.0);
            let container = pod.spec.as_ref().and_then(|s| s.containers.first()).map(|c| c.name.clone());
            if let Some(container) = container
                && running.as_ref().is_none_or(|(at, _, _)| started > *at)
            {
                running = Some((started, pod.name_any(), container));
            }
        }
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok((number_without_indexes(own_outcomes), running.map(|(_, pod, container)| (pod, container))))
}

/// The latest status line of the run's running Pod `pod`, from the tail of
/// its first container's log; a failure to read is no reason to fail
/// anything, so it is only logged.
async fn latest_progress(pods: &Api<Pod>, pod: &str, container: String) -> Option<String> {
    let params = kube::api::LogParams {
        container: Some(container),
        tail_lines: Some(plan::PROGRESS_TAIL_LINES),
        limit_bytes: Some(plan::PROGRESS_TAIL_BYTES),
        ..Default::default()
    };
    match pods.logs(pod, &params).await {
        Ok(log) => plan::progress_line(&log),
        Err(err) => {
            tracing::debug!(pod = %pod, error = %err, "reading a tool run's status line");
            None
        }
    }
}

/// Whether `pod` is one the Job controller made from `job`'s template: it
/// names the Job as its controller and runs exactly what the template runs.
fn made_by(pod: &Pod, job: &Job) -> bool {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    crate::provenance::controlled_by(&pod.metadata, uid) && provenance::pod_mismatch(pod, job).is_none()
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
fn job_state(run: &ToolRun, job: Option<&Job>) -> JobState {
    let Some(job) = job else { return JobState::Missing };
    let run_uid = run.metadata.uid.as_deref();
    let controlled = job.owner_references().iter().any(|owner| {
        owner.controller == Some(true) && Some(owner.uid.as_str()) == run_uid && owner.kind == "ToolRun"
    });
    let uid = job.metadata.uid.clone().unwrap_or_default();
    if !controlled || uid.is_empty() {
        return JobState::Foreign;
    }
    // The Job this operator created is the one whose uid the run recorded;
    // before that is recorded (a restart between create and status write),
    // only a Job that runs what the run asks is taken as its own.
    let ours = match run.status.as_ref().and_then(|s| s.job_uid.as_deref()) {
        Some(recorded) => recorded == uid,
        None => job::job_for_run(run).is_some_and(|built| provenance::job_mismatch(job, &built).is_none()),
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

/// What each Pod controlled by the Job `job_uid` ended with. A Pod another
/// party made with the same labels is not among them: results come only
/// from the run's own Job. Without completion indexes (API servers before
/// Indexed Jobs) succeeded Pods are numbered in the order they finished.
fn outcomes_of(own: &[&Pod]) -> Vec<PodOutcome> {
    own.iter()
        .filter_map(|pod| {
            let phase = pod.status.as_ref()?.phase.as_deref()?;
            let first = pod.spec.as_ref()?.containers.first()?.name.as_str();
            let terminated = pod
                .status
                .as_ref()?
                .container_statuses
                .iter()
                .flatten()
                .find(|status| status.name == first)
                .and_then(|status| status.state.as_ref()?.terminated.clone());
            let index = pod.annotations().get(COMPLETION_INDEX).and_then(|i| i.parse().ok());
            Some(PodOutcome {
                index: index.unwrap_or(-1),
                succeeded: phase == "Succeeded",
                exit_code: terminated.as_ref().map(|t| t.exit_code),
                message: terminated.as_ref().and_then(|t| t.message.clone()).unwrap_or_default(),
                finished_at: terminated.and_then(|t| t.finished_at).map(|t| t.0),
            })
        })
        .collect()
}

/// Numbers succeeded Pods in the order they finished when none carries a
/// completion index (API servers before Indexed Jobs).
fn number_without_indexes(mut outcomes: Vec<PodOutcome>) -> Vec<PodOutcome> {
    if outcomes.iter().all(|o| o.index < 0) {
        let mut succeeded: Vec<&mut PodOutcome> = outcomes.iter_mut().filter(|o| o.succeeded).collect();
        succeeded.sort_by_key(|o| o.finished_at);
        for (index, outcome) in succeeded.into_iter().enumerate() {
            outcome.index = index as i32;
        }
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
}

#[cfg(test)]
mod reconcile_tests;
