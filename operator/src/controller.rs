//! The I/O around `plan`: observe, apply, write status.

use mining_api::Work as _;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::trace::TraceParent;
use mining_api::{MiningWorkflow, WorkflowPhase, annotations, labels, reasons};
use tracing::warn;

use crate::admission::{QueueEntry, Slots};
use crate::api_calls::counting_calls;
use crate::apply::{self, Applied, Target, publish_events};
use crate::caches::{CacheSync, Watched};
use crate::config::Config;
use crate::job::{MANAGER, MinerSettings, job_for_block};
use crate::leader::{self, Leadership};
use crate::memory::Memory;
use crate::metrics::{ErrorLabels, Metrics};
use crate::observe::{BlockJob, JobSources, ObservedJobs, observe_jobs};
use crate::parties::Parties;
use crate::plan::{Observed, PlannedEvent, plan};
use crate::projection;
use crate::queue::{Kinds, Proven, WorkQueue};
use crate::{Error, Result};

mod foreign;
use foreign::fail_for_foreign_job;

/// Reconciles run at once. Unbounded, a start with thousands of retained
/// workflows reconciles them all at once, each holding its own working set.
const RECONCILE_CONCURRENCY: u16 = 16;
/// Objects per page of the Pod and Job lists: at most this many of
/// whatever size anyone made (up to 1.5 MiB each) are held at once before
/// they are projected. Pods are the ones anyone can create anywhere; Jobs
/// are many more (one per block), so their pages are larger.
const POD_PAGE_SIZE: u32 = 5;
const JOB_PAGE_SIZE: u32 = 20;
/// The same for workflows, whose size the CRD bounds except in metadata.
const WORKFLOW_PAGE_SIZE: u32 = 50;

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
    /// Whether the watches have listed everything yet.
    pub caches: Arc<CacheSync>,
    /// The one queue workflows and tool runs wait in (parties by proof,
    /// the budget, wakes of whatever is next).
    pub queue: Arc<WorkQueue>,
    /// What reconciles remember between them (expected Jobs, written
    /// statuses, admissions in flight), locked in one place.
    pub memory: Arc<Memory>,
    /// Whether this replica may reconcile now.
    pub leadership: Leadership,
}

/// How soon a workflow whose status write met a newer version is planned again.
pub(crate) const REPLAN_AFTER: Duration = Duration::from_millis(200);
/// How soon a reconcile that found the Job cache still being listed runs again.
const JOBS_NOT_LISTED_RETRY: Duration = Duration::from_millis(100);

impl Context {
    /// Leadership changed. A new term starts from the API's state, not from
    /// what this replica wrote in an earlier one, and looks at every workflow.
    fn on_leadership(&self, leading: bool) {
        self.metrics.leader.set(i64::from(leading));
        if self.config.outputs.store.is_some() {
            tokio::spawn(crate::outputs::mark_leader_pod(self.client.clone(), leading));
        }
        self.memory.clear();
        if leading {
            // Workflows and tool runs alike: a standby waits for this wake
            // instead of polling.
            self.queue.wake_all();
        }
    }

    /// What every block's Job runs, from the configuration.
    fn miner_settings(&self) -> MinerSettings<'_> {
        MinerSettings {
            image: &self.config.miner_image,
            image_pull_policy: &self.config.miner_image_pull_policy,
            pull_secrets: &self.config.miner_image_pull_secrets,
            threads: self.config.miner_threads,
            job: &self.config.job,
            otlp: self
                .config
                .miner_otlp_endpoint
                .as_deref()
                .map(|endpoint| (endpoint, self.config.miner_otlp_protocol.as_str())),
        }
    }

    /// What applying a plan to `workflow` needs.
    fn target<'a>(
        &'a self,
        workflow: &'a MiningWorkflow,
        name: &'a str,
        namespace: &'a str,
        settings: &'a MinerSettings<'a>,
    ) -> Target<'a> {
        Target {
            client: &self.client,
            instance: &self.instance,
            memory: &self.memory,
            settings,
            workflow,
            name,
            namespace,
        }
    }
}

fn workflows_api(client: &Client, config: &Config) -> Api<MiningWorkflow> {
    match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controller until a shutdown signal.
pub async fn run(
    client: Client,
    config: Config,
    keys: Option<mining_api::ownership::OwnershipKeys>,
    outputs: Option<Arc<crate::outputs::Outputs>>,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
) {
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
        if outputs.is_some() {
            tokio::spawn(crate::outputs::mark_leader_pod(client.clone(), true));
        }
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
    let workflow_events = watcher(workflows, watcher::Config::default().page_size(WORKFLOW_PAGE_SIZE))
        .modify(|workflow| mining_api::trim_for_cache(&mut workflow.metadata))
        .reflect(workflow_writer)
        .inspect_ok(move |event| seen.saw(Watched::Workflows, event))
        .applied_objects();
    let controller = Controller::for_stream(workflow_events, store.clone());
    let (job_store, job_writer) = reflector::store::<Job>();
    let managed = format!("{}={MANAGER}", labels::MANAGED_BY);
    let seen = caches.clone();
    // Paged lists from etcd, not the watch cache's one-piece answer: the
    // label selects objects anyone may create, so no list may be held whole.
    let paged = watcher::Config::default().labels(&managed);
    let (job_metrics, pod_metrics) = (metrics.clone(), metrics.clone());
    let job_events = watcher(jobs, paged.clone().page_size(JOB_PAGE_SIZE))
        .default_backoff()
        .modify(move |job| {
            job_metrics.saw("jobs");
            projection::project_job(job)
        })
        .reflect(job_writer)
        .inspect_ok(move |event| seen.saw(Watched::Jobs, event))
        .touched_objects();
    // A Pod's status wakes its Job's owner only when it says the Pod cannot
    // start (`pod_start`): a Job's own status says when it finished, and
    // the store saves reading a finished Job's Pods from the API.
    let pods_api: Api<Pod> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let (pod_store, pod_writer) = reflector::store::<Pod>();
    let pod_events = watcher(pods_api, paged.page_size(POD_PAGE_SIZE))
        .default_backoff()
        .modify(move |pod| {
            pod_metrics.saw("pods");
            projection::project_pod(pod)
        })
        .reflect(pod_writer);
    let (blocked_jobs, _) = tokio::sync::broadcast::channel(crate::pod_start::BLOCKED_JOBS_BACKLOG);
    let sighted = blocked_jobs.clone();
    tokio::spawn(pod_events.for_each(move |event| {
        if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = &event
            && let Some(job) = crate::pod_start::blocked_job(pod)
        {
            let _ = sighted.send(job);
        }
        std::future::ready(())
    }));
    let blocked_workflows =
        crate::pod_start::owners_of_blocked::<MiningWorkflow>(&blocked_jobs, job_store.clone());
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let memory = Arc::new(Memory::default());
    let mut kinds = Kinds::default();
    kinds.register(store.clone(), wake, Proven::Any);
    let others = crate::kinds::register(&mut kinds);
    let queue = Arc::new(
        WorkQueue::new(kinds, Parties::new(keys.clone()), memory.clone(), config.limits.budget())
            .reporting_to(metrics.clone()),
    );
    let shares_reporter = tokio::spawn(queue.clone().report_shares());
    // Every other kind: its own controller, under the same leadership,
    // waiting in the same queue.
    let instance = std::env::var("POD_NAME").unwrap_or_else(|_| MANAGER.into());
    let shared = crate::kinds::Shared {
        client: client.clone(),
        keys,
        leadership: leadership.clone(),
        metrics: metrics.clone(),
        queue: queue.clone(),
        instance: instance.clone(),
        namespace: config.namespace.clone(),
        default_ttl_seconds: config.limits.default_ttl_seconds,
        pod_start_timeout: config.limits.pod_start_timeout(),
        pods: pod_store.clone(),
        blocked_jobs,
        queue_name: config.job.queue_name.clone(),
        outputs: outputs.map(|store| crate::kinds::OutputsShared {
            store,
            url: config.outputs.url.clone().unwrap_or_default(),
            addr: config.outputs.addr,
        }),
    };
    let other_controllers: Vec<_> =
        others.into_iter().map(|start| tokio::spawn(start(shared.clone()))).collect();
    let context = Arc::new(Context {
        instance,
        client,
        metrics,
        config,
        store: store.clone(),
        jobs: job_store.clone(),
        pods: pod_store,
        caches,
        queue,
        memory,
        leadership,
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
        .reconcile_on(blocked_workflows)
        .shutdown_on_signal()
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(err) = result {
                warn!(error = %err, "reconcile failed");
            }
        })
        .await;
    for other in other_controllers {
        other.abort();
    }
    shares_reporter.abort();
    if let Some(election) = election {
        election.step_down().await;
    }
}

fn error_policy(workflow: Arc<MiningWorkflow>, error: &Error, ctx: Arc<Context>) -> Requeue {
    warn!(error = %error, source = ?std::error::Error::source(error), "reconcile error");
    ctx.metrics.reconcile_errors.get_or_create(&ErrorLabels { error: error.metric_label() }).inc();
    if error.is_forbidden() {
        let live = ctx.store.state().len();
        tell_forbidden(&ctx.client, &ctx.instance, &ctx.memory, live, workflow.as_ref(), error);
    }
    Requeue::requeue(Duration::from_secs(if matches!(error, Error::ForeignJob { .. }) { 2 } else { 5 }))
}

/// A missing RBAC rule is the installer's to fix, and nothing in the logs of
/// a Pod reaches the user who runs `kubectl describe`: say it on the work
/// itself (of any kind), as a Warning Event, at most once per interval
/// (creating Events is a rule of its own, so this may fail too).
pub fn tell_forbidden<K: kube::Resource<DynamicType = ()>>(
    client: &Client,
    instance: &str,
    memory: &Memory,
    live: usize,
    work: &K,
    error: &Error,
) {
    let uid = work.meta().uid.as_deref().unwrap_or_default();
    if !memory.should_tell_forbidden(uid, live) {
        return;
    }
    let cause = std::error::Error::source(error).map(|s| s.to_string()).unwrap_or_default();
    let note = format!("{error}: {cause} (the operator's ServiceAccount lacks an RBAC rule)");
    let name = work.meta().name.clone().unwrap_or_default();
    let event = PlannedEvent { warning: true, reason: reasons::FORBIDDEN, note };
    publish_events(client, instance, work, &name, vec![event]);
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
    let workflow = ctx.memory.freshest(workflow.as_ref());
    // One span per reconcile; a workflow started through MCP carries the
    // caller's trace, so its reconciles join it.
    let span = tracing::info_span!(
        "reconcile",
        workflow = workflow.metadata.name.as_deref().unwrap_or_default(),
        trace_id = tracing::field::Empty,
    );
    if let Some(parent) = workflow.annotation(annotations::TRACEPARENT).and_then(TraceParent::parse) {
        telemetry::continue_trace(&span, &parent);
        span.record("trace_id", parent.trace_id_hex());
    }
    let (result, calls) = counting_calls(span, async {
        match reconcile_inner(&workflow, &ctx).await {
            Err(Error::ForeignJob { name, why }) => fail_for_foreign_job(&workflow, &ctx, &name, &why).await,
            other => other,
        }
    })
    .await;
    ctx.metrics.reconcile_duration.observe(started.elapsed().as_secs_f64());
    ctx.metrics.api_calls_per_reconcile.observe(calls as f64);
    ctx.metrics.set_workflow_phases(ctx.store.state().iter().map(|w| w.phase()));
    result
}

async fn reconcile_inner(workflow: &MiningWorkflow, ctx: &Context) -> Result<Requeue> {
    let name = workflow.metadata.name.clone().ok_or(Error::MissingMetadata("name"))?;
    let namespace = workflow.metadata.namespace.clone().ok_or(Error::MissingMetadata("namespace"))?;
    // A finished one's Jobs go with it (owner references); an unfinished one
    // may be kept stored by a finalizer, so the plan stops it first.
    if workflow.metadata.deletion_timestamp.is_some() && workflow.is_finished() {
        return Ok(Requeue::await_change());
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
    let settings = ctx.miner_settings();
    let built = |block: u32, range: Option<(u64, u64)>| job_for_block(workflow, block, range, &settings);
    let sources = JobSources {
        client: &ctx.client,
        jobs: &ctx.jobs,
        pods: &ctx.pods,
        memory: &ctx.memory,
        built: &built,
    };
    let now = Timestamp::now();
    let ObservedJobs { blocks: jobs, ranges, look_again } =
        observe_jobs(workflow, &name, &namespace, &sources, now).await?;
    // A workflow that may be admitted counts the work holding slots (of
    // every kind), and that being admitted right now, and reserves a slot
    // until its status is written.
    let before = workflow.phase();
    let me = QueueEntry::of(workflow);
    let (slots, mut admission) = match before {
        WorkflowPhase::Pending => {
            let (slots, reserved) = ctx.queue.admission(&me);
            (slots, Some(reserved))
        }
        // Only a waiting workflow needs its standing: computing it reads
        // all work, and at start-up every retained one is reconciled.
        _ => (Slots::default(), None),
    };
    // Between two blocks (no whole-block Job running), a workflow holding a
    // slot that waiting work should have yields it; mid-block only once the
    // head of the queue has waited past the preemption delay. (A block mined
    // in ranges has no whole-block Job, so it is told at each reconcile: the
    // plan yields before a block no Job was made for, or, told "now", stops
    // the block's running ranges and keeps what they searched.)
    let between_blocks = !jobs.values().any(BlockJob::is_running);
    // Mid-block, only when the head of the queue asked (`reclaim_for`): a
    // running block's other reconciles never sort the queue.
    let asked = !between_blocks && ctx.memory.take_preemption_request(&me.uid);
    let may_yield = before == WorkflowPhase::Mining && (between_blocks || asked);
    let mut yield_turn = may_yield.then(|| ctx.memory.yield_turn()).flatten();
    let yielding = match yield_turn {
        Some(_) => ctx.queue.yield_for(&me, now),
        None => crate::admission::Yield::Keep,
    };
    if yielding == crate::admission::Yield::Keep {
        yield_turn = None;
    }
    // Plan.
    let observed = Observed { workflow, jobs, ranges, slots, yielding, now };
    // Verifying a block may hash up to the minimality budget (~0.5 s of a
    // core): keep that off the async workers' other tasks.
    let plan = tokio::task::block_in_place(|| plan(&observed, &ctx.config.limits));
    if !ctx.leadership.is_leading() {
        return Ok(Requeue::await_change()); // deposed while planning
    }
    for seconds in &plan.mined_block_seconds {
        ctx.metrics.block_duration.observe(*seconds);
    }
    let after = plan.status.phase.unwrap_or_default();
    if admission.is_some() && after != WorkflowPhase::Mining {
        // Not admitted: nothing to count on, so others need not wait for this write.
        admission = None;
        if slots.taken < slots.limit {
            // Free slots wait for older work: make sure it comes now.
            ctx.queue.wake_next();
        }
    }
    // Apply and write the status.
    let target = ctx.target(workflow, &name, &namespace, &settings);
    match apply::run(&target, &plan, admission).await? {
        Applied::Done => {
            for event in &plan.events {
                ctx.metrics.count_start_event(MiningWorkflow::NOUN, event.reason);
            }
        }
        Applied::Replan => return Ok(Requeue::requeue(REPLAN_AFTER)),
        Applied::WorkflowDeleted | Applied::StatusRejected => return Ok(Requeue::await_change()),
    }
    // The yield is written: the next may be decided.
    drop(yield_turn);
    if before == WorkflowPhase::Pending && after == WorkflowPhase::Mining {
        // Admitted and written: it left the queue, every place behind it moved up.
        ctx.memory.queue_changed();
    }
    if before == WorkflowPhase::Mining && (after.is_finished() || after == WorkflowPhase::Pending) {
        ctx.queue.wake_next();
    }
    let mut requeue_after = plan.requeue_after;
    if let Some(again) = look_again.filter(|_| after == WorkflowPhase::Mining) {
        requeue_after = Some(requeue_after.map_or(again, |planned| planned.min(again)));
    }
    if after == WorkflowPhase::Pending && !slots.admits() && slots.ahead == 0 {
        // The head of the queue, every slot taken: look again when it may
        // take one back mid-block (see `WorkQueue::reclaim_for`).
        if let Some(again) = ctx.queue.reclaim_for(&me) {
            requeue_after = Some(requeue_after.map_or(again, |planned| planned.min(again)));
        }
    }
    Ok(requeue_after.map_or_else(Requeue::await_change, Requeue::requeue))
}

#[cfg(test)]
mod tests;
