//! The I/O around `plan`: observe, apply, write status.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use mining_api::{MiningWorkflow, MiningWorkflowStatus, WorkflowPhase, labels, reasons};
use tracing::{info, warn};

use std::collections::HashMap;

use crate::admission::{Seen, Standing, freshest_phases, next_in_queue, standing};
use crate::api_calls::counting_calls;
use crate::apply::{create_or_adopt_job, delete_job, publish_events, write_status};
use crate::caches::{CacheSync, Watched};
use crate::config::Config;
use crate::job::{MANAGER, MinerSettings, build_block_job, build_range_job, job_for_block};
use crate::leader::{self, Leadership};
use crate::metrics::{ErrorLabels, Metrics};
use crate::observe::{ExpectedJob, JobSources, observe_jobs};
use crate::plan::{Action, Observed, PlannedEvent, plan, status_rejected};
use crate::{Error, Result};

mod foreign;
use foreign::fail_for_foreign_job;

/// Reconciles run at once. Unbounded, a start with thousands of retained
/// workflows reconciles them all at once, each holding its own working set.
const RECONCILE_CONCURRENCY: u16 = 16;

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    /// `reportingInstance` of the Events this operator records.
    pub instance: String,
    pub metrics: Arc<Metrics>,
    pub config: Config,
    /// All workflows the controller sees (to count those mining).
    pub store: Store<MiningWorkflow>,
    /// The operator's Jobs, from the same watch that triggers reconciles.
    pub jobs: Store<Job>,
    /// The Pods of the operator's Jobs, for their results without a call.
    pub pods: Store<Pod>,
    /// Jobs this operator created that its Job store has not shown yet
    /// (name → workflow uid, block, when): without these a reconcile that
    /// runs before the creation's watch event would create the Job again.
    pub expected_jobs: std::sync::Mutex<HashMap<String, ExpectedJob>>,
    /// Whether the watches have listed everything yet.
    pub caches: Arc<CacheSync>,
    /// The status last written per workflow uid. This operator is the only
    /// writer of `status`, so what it wrote is at least as new as the cache,
    /// which may not have caught up when a Job event triggers the next
    /// reconcile; planning on a stale status would verify a block twice.
    /// With it, the resourceVersion that write produced: the next write's
    /// precondition, so a deposed leader's late write fails instead of
    /// putting an older status over a newer one.
    pub written: std::sync::Mutex<HashMap<String, Written>>,
    /// Admissions decided but not yet written: counted as mining by every
    /// other admission, so the limit holds exactly while admissions run in
    /// parallel (a lock held across the status write made 200 new workflows
    /// wait on each other's writes).
    pub admissions_in_flight: std::sync::Mutex<usize>,
    /// Wakes queued workflows the moment a slot frees.
    pub wake: futures::channel::mpsc::UnboundedSender<ObjectRef<MiningWorkflow>>,
    /// When each workflow (by uid) last got a `Forbidden` Event: one per
    /// [`FORBIDDEN_EVENT_INTERVAL`], not one per retry.
    pub forbidden_told: std::sync::Mutex<HashMap<String, Instant>>,
    /// Whether this replica may reconcile now.
    pub leadership: Leadership,
}

/// A status this operator wrote and the resourceVersion the write produced.
#[derive(Clone, Debug)]
pub struct Written {
    pub status: MiningWorkflowStatus,
    pub resource_version: Option<String>,
}

/// How often a workflow stuck on a missing RBAC rule is told so again.
const FORBIDDEN_EVENT_INTERVAL: Duration = Duration::from_secs(300);
/// How soon a reconcile that found the Job cache still being listed runs again.
const JOBS_NOT_LISTED_RETRY: Duration = Duration::from_millis(100);

impl Context {
    /// The workflow as of this operator's last status write.
    fn freshest(&self, workflow: &MiningWorkflow) -> MiningWorkflow {
        let mut workflow = workflow.clone();
        let uid = workflow.metadata.uid.clone().unwrap_or_default();
        let mut written = self.written.lock().expect("no panics while holding the lock");
        // Forget workflows that are gone (bounded by the number that exist).
        if written.len() > self.store.state().len() + 64 {
            let live: std::collections::HashSet<String> =
                self.store.state().iter().filter_map(|w| w.metadata.uid.clone()).collect();
            written.retain(|uid, _| live.contains(uid));
        }
        if let Some(written) = written.get(&uid) {
            workflow.status = Some(written.status.clone());
            workflow.metadata.resource_version =
                newer_version(workflow.metadata.resource_version.take(), written.resource_version.clone());
        }
        workflow
    }

    /// Leadership changed. A new term starts from the API's state, not from
    /// what this replica wrote in an earlier one, and looks at every workflow.
    fn on_leadership(&self, leading: bool) {
        self.metrics.leader.set(i64::from(leading));
        self.written.lock().expect("no panics while holding the lock").clear();
        self.expected_jobs.lock().expect("no panics while holding the lock").clear();
        if leading {
            for workflow in self.store.state() {
                let _ = self.wake.unbounded_send(ObjectRef::from_obj(workflow.as_ref()));
            }
        }
    }

    fn forget(&self, workflow: &MiningWorkflow) {
        let uid = workflow.metadata.uid.clone().unwrap_or_default();
        self.written.lock().expect("no panics while holding the lock").remove(&uid);
    }

    /// Every workflow with its freshest phase.
    fn phases(&self) -> Vec<Seen> {
        let written: HashMap<String, Standing> =
            (self.written.lock().expect("no panics while holding the lock").iter())
                .filter_map(|(uid, written)| {
                    let started = written.status.started_at.as_ref().map(|t| t.0);
                    Some((uid.clone(), Standing { phase: written.status.phase?, started }))
                })
                .collect();
        freshest_phases(self.store.state(), &written)
    }

    /// A slot freed: reconcile the workflows next in the queue now.
    fn wake_queued(&self) {
        for workflow in next_in_queue(&self.phases(), self.config.limits.max_concurrent_workflows) {
            let _ = self.wake.unbounded_send(ObjectRef::from_obj(workflow.as_ref()));
        }
    }

    fn remember(
        &self,
        workflow: &MiningWorkflow,
        status: &MiningWorkflowStatus,
        resource_version: Option<String>,
    ) {
        let uid = workflow.metadata.uid.clone().unwrap_or_default();
        let written = Written { status: status.clone(), resource_version };
        self.written.lock().expect("no panics while holding the lock").insert(uid, written);
    }
}

/// The newer of the cache's and this operator's last resourceVersion.
/// resourceVersions are opaque: when both read as numbers the larger wins,
/// else this operator's own. A wrong guess costs one refused write (409) and
/// a retry from the cache, never a lost status.
fn newer_version(cached: Option<String>, written: Option<String>) -> Option<String> {
    match (cached.as_deref().map(str::parse::<u64>), written.as_deref().map(str::parse::<u64>)) {
        (Some(Ok(c)), Some(Ok(w))) if c > w => cached,
        _ => written.or(cached),
    }
}

fn workflows_api(client: &Client, config: &Config) -> Api<MiningWorkflow> {
    match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controller until a shutdown signal.
pub async fn run(client: Client, config: Config, metrics: Arc<Metrics>, ready: Arc<AtomicBool>) {
    let (changes, mut changed) = tokio::sync::mpsc::unbounded_channel();
    let (leadership, election) = if config.election.enabled {
        let on_change = move |leading| {
            let _ = changes.send(leading);
        };
        match leader::start(client.clone(), &config.election, config.namespace.as_deref(), on_change).await {
            Ok((leadership, handle)) => (leadership, Some(handle)),
            Err(err) => {
                // Reconciling without the lease could race another leader: never do that.
                warn!(error = %err, "cannot take part in leader election; not reconciling");
                return;
            }
        }
    } else {
        metrics.leader.set(1);
        (Leadership::alone(), None)
    };
    let workflows = workflows_api(&client, &config);
    let jobs: Api<Job> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let caches = Arc::new(CacheSync::new(ready));
    // As `Controller::new` would build it, with an eye on its first list.
    let (store, workflow_writer) = reflector::store::<MiningWorkflow>();
    let seen = caches.clone();
    // Caches keep only what reconciles read (no managedFields, no foreign
    // labels or annotations): anyone who may edit a workflow could otherwise
    // grow every operator replica's memory by 256 KiB per object.
    let workflow_events = watcher(workflows, watcher::Config::default().any_semantic())
        .modify(|workflow| mining_api::trim_for_cache(&mut workflow.metadata))
        .reflect(workflow_writer)
        .inspect_ok(move |event| seen.saw(Watched::Workflows, event))
        .applied_objects();
    let controller = Controller::for_stream(workflow_events, store.clone());
    let (job_store, job_writer) = reflector::store::<Job>();
    let managed = format!("{}={MANAGER}", labels::MANAGED_BY);
    let seen = caches.clone();
    let job_events = watcher(jobs, watcher::Config::default().labels(&managed).any_semantic())
        .default_backoff()
        .modify(|job| job.managed_fields_mut().clear())
        .reflect(job_writer)
        .inspect_ok(move |event| seen.saw(Watched::Jobs, event))
        .touched_objects();
    // Pod events trigger nothing (a Job's own status says when it finished);
    // the store only saves reading a finished Job's Pods from the API.
    let pods_api: Api<Pod> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let (pod_store, pod_writer) = reflector::store::<Pod>();
    let pod_events = watcher(pods_api, watcher::Config::default().labels(&managed).any_semantic())
        .default_backoff()
        .modify(|pod| pod.managed_fields_mut().clear())
        .reflect(pod_writer);
    tokio::spawn(pod_events.for_each(|_| std::future::ready(())));
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let context = Arc::new(Context {
        instance: std::env::var("POD_NAME").unwrap_or_else(|_| MANAGER.into()),
        client,
        metrics,
        config,
        store: store.clone(),
        jobs: job_store.clone(),
        pods: pod_store,
        expected_jobs: Default::default(),
        caches,
        written: Default::default(),
        admissions_in_flight: std::sync::Mutex::new(0),
        forbidden_told: Default::default(),
        leadership,
        wake,
    });
    let on_leadership = context.clone();
    tokio::spawn(async move {
        while let Some(leading) = changed.recv().await {
            on_leadership.on_leadership(leading);
        }
    });
    controller
        .with_config(kube::runtime::controller::Config::default().concurrency(RECONCILE_CONCURRENCY))
        .owns_stream(job_events)
        .reconcile_on(woken)
        .shutdown_on_signal()
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(err) = result {
                warn!(error = %err, "reconcile failed");
            }
        })
        .await;
    if let Some(election) = election {
        election.step_down().await;
    }
}

fn error_policy(workflow: Arc<MiningWorkflow>, error: &Error, ctx: Arc<Context>) -> Requeue {
    warn!(error = %error, source = ?std::error::Error::source(error), "reconcile error");
    ctx.metrics.reconcile_errors.get_or_create(&ErrorLabels { error: error.metric_label() }).inc();
    if error.is_forbidden() {
        tell_forbidden(&ctx, &workflow, error);
    }
    Requeue::requeue(Duration::from_secs(if matches!(error, Error::ForeignJob { .. }) { 2 } else { 5 }))
}

/// A missing RBAC rule is the installer's to fix, and nothing in the logs of
/// a Pod reaches the user who runs `kubectl describe mwf`: say it there, as a
/// Warning Event (creating Events is a rule of its own, so this may fail too).
fn tell_forbidden(ctx: &Context, workflow: &MiningWorkflow, error: &Error) {
    let uid = workflow.metadata.uid.clone().unwrap_or_default();
    {
        let mut told = ctx.forbidden_told.lock().expect("no panics while holding the lock");
        if told.get(&uid).is_some_and(|at| at.elapsed() < FORBIDDEN_EVENT_INTERVAL) {
            return;
        }
        if told.len() > ctx.store.state().len() + 64 {
            told.retain(|_, at| at.elapsed() < FORBIDDEN_EVENT_INTERVAL);
        }
        told.insert(uid, Instant::now());
    }
    let cause = std::error::Error::source(error).map(|s| s.to_string()).unwrap_or_default();
    let note = format!("{error}: {cause} (the operator's ServiceAccount lacks an RBAC rule)");
    let name = workflow.metadata.name.clone().unwrap_or_default();
    let event = PlannedEvent { warning: true, reason: reasons::FORBIDDEN, note };
    publish_events(&ctx.client, &ctx.instance, workflow, &name, vec![event]);
}

async fn reconcile(workflow: Arc<MiningWorkflow>, ctx: Arc<Context>) -> Result<Requeue> {
    if !ctx.leadership.is_leading() {
        // A standby: the leader acts; this replica is woken when it leads.
        return Ok(Requeue::await_change());
    }
    if !ctx.caches.jobs_listed() {
        // Until then a block's Job may be missing from the cache only.
        return Ok(Requeue::requeue(JOBS_NOT_LISTED_RETRY));
    }
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let workflow = ctx.freshest(&workflow);
    let (result, calls) = counting_calls(async {
        match reconcile_inner(&workflow, &ctx).await {
            Err(Error::ForeignJob { name, why }) => fail_for_foreign_job(&workflow, &ctx, &name, &why).await,
            other => other,
        }
    })
    .await;
    ctx.metrics.reconcile_duration.observe(started.elapsed().as_secs_f64());
    ctx.metrics.api_calls_per_reconcile.observe(calls as f64);
    ctx.metrics.set_workflow_phases(ctx.store.state().iter().map(|w| phase_of(w)));
    result
}

/// A slot reserved by an admission in flight; freed when dropped (after the
/// status write, or on any early return).
struct Reservation<'a>(&'a Context);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.0.admissions_in_flight.lock().expect("no panics while holding the lock");
        *in_flight = in_flight.saturating_sub(1);
    }
}

fn phase_of(workflow: &MiningWorkflow) -> WorkflowPhase {
    workflow.status.as_ref().and_then(|s| s.phase).unwrap_or_default()
}

async fn reconcile_inner(workflow: &MiningWorkflow, ctx: &Context) -> Result<Requeue> {
    let name = workflow.metadata.name.clone().ok_or(Error::MissingMetadata("name"))?;
    let namespace = workflow.metadata.namespace.clone().ok_or(Error::MissingMetadata("namespace"))?;
    if workflow.metadata.deletion_timestamp.is_some() {
        return Ok(Requeue::await_change()); // its Jobs go with it (owner references)
    }
    // Skipped, never overwritten: a person must look at (or delete) it.
    if let Some(problem) = workflow.status.as_ref().and_then(|s| s.unreadable.clone()) {
        warn!(workflow = %name, %problem, "skipping a workflow whose status cannot be read");
        ctx.metrics.reconcile_errors.get_or_create(&ErrorLabels { error: "unreadable_status" }).inc();
        let note = format!("{problem}; the operator leaves this workflow alone until it is fixed or deleted");
        let event = PlannedEvent { warning: true, reason: reasons::UNREADABLE_STATUS, note };
        publish_events(&ctx.client, &ctx.instance, workflow, &name, vec![event]);
        return Ok(Requeue::await_change());
    }
    // Observe.
    let settings = MinerSettings {
        image: &ctx.config.miner_image,
        image_pull_policy: &ctx.config.miner_image_pull_policy,
        threads: ctx.config.miner_threads,
        job: &ctx.config.job,
    };
    let built = |block: u32, range: Option<(u64, u64)>| job_for_block(workflow, block, range, &settings);
    let sources = JobSources {
        client: &ctx.client,
        jobs: &ctx.jobs,
        pods: &ctx.pods,
        expected: &ctx.expected_jobs,
        built: &built,
    };
    let (jobs, ranges) = observe_jobs(workflow, &name, &namespace, &sources).await?;
    // A workflow that may be admitted counts the others, and those being
    // admitted right now, and reserves a slot until its status is written.
    let before = phase_of(workflow);
    let (others_mining, queued_ahead, admission) = match before {
        WorkflowPhase::Pending => {
            let mut in_flight = ctx.admissions_in_flight.lock().expect("no panics while holding the lock");
            let (mining, ahead) = standing(&ctx.phases(), workflow);
            let counted = mining.saturating_add(*in_flight);
            *in_flight += 1;
            (counted, ahead, Some(Reservation(ctx)))
        }
        // Only a waiting workflow needs its standing: computing it reads
        // every workflow, and at start-up every retained one is reconciled.
        _ => (0, 0, None),
    };
    // Plan.
    let observed = Observed { workflow, jobs, ranges, others_mining, queued_ahead, now: Timestamp::now() };
    // Verifying a block may hash up to the minimality budget (~0.5 s of a
    // core): keep that off the async workers' other tasks.
    let plan = tokio::task::block_in_place(|| plan(&observed, &ctx.config.limits));
    if !ctx.leadership.is_leading() {
        return Ok(Requeue::await_change()); // deposed while planning
    }
    // Apply: deletions first (a status saying Cancelled must not stand while
    // its Jobs still run), then the status, then creations (a block is
    // recorded before the next block's Job builds on it).
    let job_api: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    for action in &plan.actions {
        match action {
            Action::CreateJob { .. } | Action::CreateRangeJob { .. } | Action::CleanUpJob { .. } => {}
            Action::DeleteJob { name: job } => delete_job(&job_api, &name, job).await?,
            Action::DeleteWorkflow => {
                let api: Api<MiningWorkflow> = Api::namespaced(ctx.client.clone(), &namespace);
                match api.delete(&name, &DeleteParams::background()).await {
                    Ok(_) => info!(workflow = %name, "retention over; deleted workflow"),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(source) => return Err(Error::DeleteWorkflow { workflow: name, source }),
                }
                return Ok(Requeue::await_change());
            }
        }
    }
    for seconds in &plan.mined_block_seconds {
        ctx.metrics.block_duration.observe(*seconds);
    }
    let mut events = plan.events.clone();
    let after = plan.status.phase.unwrap_or_default();
    let mut admission = admission;
    if admission.is_some() && after != WorkflowPhase::Mining {
        // Not admitted: nothing to count on, so others need not wait for this write.
        admission = None;
        if others_mining < ctx.config.limits.max_concurrent_workflows {
            // Free slots wait for older workflows: make sure they come now.
            ctx.wake_queued();
        }
    }
    if workflow.status.as_ref() != Some(&plan.status) {
        let api: Api<MiningWorkflow> = Api::namespaced(ctx.client.clone(), &namespace);
        let version = workflow.metadata.resource_version.as_deref();
        match write_status(&api, &name, &plan.status, version).await {
            Ok(version) => ctx.remember(workflow, &plan.status, version),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Someone wrote since what this plan was based on (a user's
                // spec change, or a newer leader): plan again from the cache.
                info!(workflow = %name, "workflow changed since it was read; planning again");
                ctx.forget(workflow);
                return Ok(Requeue::requeue(Duration::from_millis(200)));
            }
            Err(kube::Error::Api(s)) if s.code == 422 => {
                let fallback = status_rejected(workflow, &s.message, Timestamp::now());
                warn!(workflow = %name, error = %s.message, "status refused by the API server; failing the workflow");
                let version = write_status(&api, &name, &fallback, version)
                    .await
                    .map_err(|source| Error::WriteStatus { workflow: name.clone(), source })?;
                ctx.remember(workflow, &fallback, version);
                events.push(PlannedEvent {
                    warning: true,
                    reason: reasons::STATUS_REJECTED,
                    note: fallback.message.clone().unwrap_or_default(),
                });
                publish_events(&ctx.client, &ctx.instance, workflow, &name, events);
                return Ok(Requeue::await_change());
            }
            Err(source) => return Err(Error::WriteStatus { workflow: name.clone(), source }),
        }
        info!(
            workflow = %name,
            namespace = %namespace,
            phase = %plan.status.phase.unwrap_or_default(),
            progress = plan.status.progress.as_deref().unwrap_or(""),
            "status updated"
        );
    }
    drop(admission);
    if before == WorkflowPhase::Mining && after.is_finished() {
        ctx.wake_queued();
    }
    for action in &plan.actions {
        let (job, block, range) = match action {
            Action::CreateJob { block, prev, difficulty } => {
                (build_block_job(workflow, *block, prev, *difficulty, &settings), *block, None)
            }
            Action::CreateRangeJob { block, prev, difficulty, start, count } => {
                let range = (*start, *count);
                (build_range_job(workflow, *block, prev, *difficulty, range, &settings), *block, Some(range))
            }
            Action::CleanUpJob { name: job } => {
                delete_job(&job_api, &name, job).await?;
                continue;
            }
            Action::DeleteJob { .. } | Action::DeleteWorkflow => continue,
        };
        let job = create_or_adopt_job(workflow, &job_api, job, block).await?;
        let workflow_uid = workflow.metadata.uid.clone().unwrap_or_default();
        let mut expected = ctx.expected_jobs.lock().expect("no panics while holding the lock");
        expected.insert(job, ExpectedJob { workflow_uid, block, range, created: Instant::now() });
    }
    publish_events(&ctx.client, &ctx.instance, workflow, &name, events);
    Ok(plan.requeue_after.map_or_else(Requeue::await_change, Requeue::requeue))
}
