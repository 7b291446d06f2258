//! One controller for every kind: the watches of the kind and its Jobs,
//! and the reconcile around the kind's own — leadership, readiness, the
//! freshest status, the span and its trace, counted calls, metrics, the
//! error policy, and what the queue learns from the outcome.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::trace::TraceParent;
use mining_api::{Lifecycle, annotations, reasons};
use tracing::warn;

use super::{Outcome, PlannedEvent, Shared, WorkKind, publish_events};
use crate::admission::node::GiveWay;
use crate::admission::{QueueEntry, Slots, Yield};
use crate::api_calls::counting_calls;
use crate::memory::{Memory, Reservation, YieldTurn};
use crate::metrics::ErrorLabels;
use crate::{Error, Result};

/// Objects per page of a kind's Job list (one Job per block or step).
const JOB_PAGE_SIZE: u32 = 20;
/// How soon a reconcile that found a cache still being listed runs again.
const NOT_LISTED_RETRY: Duration = Duration::from_millis(100);

/// What a kind's reconciles run in: what every kind shares, its own work's
/// and Jobs' caches, and its own settings.
pub struct Shell<K: WorkKind> {
    pub shared: Shared,
    /// Every piece of work of this kind the watch has.
    pub store: Store<K>,
    /// Its Jobs, projected ([`WorkKind::project_job`]).
    pub jobs: Store<Job>,
    /// The kind's own settings.
    pub kind: K::Context,
}

impl<K: WorkKind> std::ops::Deref for Shell<K> {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// A decision to give a slot back, and the turn held until its status is
/// written: one yield is decided at a time, so concurrent reconciles never
/// all give their slots to the same waiting work.
pub struct Yielding<'a> {
    pub decision: Yield,
    pub turn: Option<YieldTurn<'a>>,
}

impl<K: WorkKind> Shell<K> {
    pub fn new(shared: Shared, store: Store<K>, jobs: Store<Job>, kind: K::Context) -> Self {
        Self { shared, store, jobs, kind }
    }

    /// `work`'s slots, counted while no other admission can be, and a slot
    /// reserved for it until the reservation is dropped (after its status
    /// is written).
    pub fn admission(&self, work: &K) -> (Slots, Reservation<'_>) {
        self.queue.admission(&QueueEntry::of(work))
    }

    /// Whether `work`, holding a slot, gives it back now: only when
    /// `eligible`, and either at a boundary of its own (a workflow between
    /// two blocks) or asked by the head of the queue (`reclaim_for`).
    pub fn yielding(&self, work: &K, eligible: bool, at_boundary: bool, now: Timestamp) -> Yielding<'_> {
        let uid = work.meta().uid.as_deref().unwrap_or_default();
        // The turn first, then the head's request: a request taken while
        // another reconcile held the turn was lost until the head asked again.
        let turn = eligible.then(|| self.memory.yield_turn()).flatten();
        let may = turn.is_some() && (at_boundary || self.memory.take_preemption_request(uid));
        let decision = match may {
            true => self.queue.yield_for(&QueueEntry::of(work), now),
            false => Yield::Keep,
        };
        let turn = turn.filter(|_| decision != Yield::Keep);
        Yielding { decision, turn }
    }

    /// Records what a reconcile of `work` observed — its Pods wait for a
    /// node since `since` (none running), or not — for fair share at the
    /// node to read, and says whether it gives its slot back now
    /// (`admission::node::gives_way`).
    pub fn node_wait(&self, work: &K, since: Option<Timestamp>, now: Timestamp) -> Option<GiveWay> {
        let uid = work.meta().uid.as_deref().unwrap_or_default();
        if self.memory.observe_node_wait(uid, since) {
            // Its Pods placed: the nodes' gate may open for work kept
            // waiting (`admission::node`), which nothing else wakes.
            self.queue.wake_next();
        }
        self.queue.gives_way(&QueueEntry::of(work), since?, now)
    }

    /// What the queue learns once a reconcile is done: work that waited and
    /// is still waiting wakes whoever should take the free slots, or — the
    /// head of the queue, every slot taken — asks for one back.
    fn settle(&self, work: &K, outcome: Outcome) -> Outcome {
        let freshest = self.memory.freshest(work);
        // Holding a slot, its Pods waiting for a node: a spot owed may be taken back.
        let uid = freshest.meta().uid.as_deref().unwrap_or_default();
        if let Some(since) = self.memory.node_wait(uid).filter(|_| freshest.lifecycle() == Lifecycle::Active)
        {
            return outcome.sooner(self.queue.reclaim_at_node(&QueueEntry::of(&freshest), since));
        }
        let Some(slots) = outcome.waited else { return outcome };
        if freshest.lifecycle() != Lifecycle::Waiting {
            return outcome;
        }
        if slots.taken < slots.limit {
            // Free slots wait for older work: make sure it comes now.
            self.queue.wake_next();
        }
        if !slots.admits() && slots.ahead == 0 {
            return outcome.sooner(self.queue.reclaim_for(&QueueEntry::of(work)));
        }
        outcome
    }
}

/// Runs `shell`'s kind until shutdown: its watches, and a reconcile
/// whenever its work, its Jobs, the queue (`woken`) or a Pod that cannot
/// start says so.
pub(super) async fn run_kind<K: WorkKind>(
    shell: Shell<K>,
    writer: reflector::store::Writer<K>,
    job_writer: reflector::store::Writer<Job>,
    woken: impl futures::Stream<Item = ObjectRef<K>> + Send + 'static,
    listed: (super::readiness::Listed, super::readiness::Listed),
) {
    let (works, jobs): (Api<K>, Api<Job>) = match &shell.namespace {
        Some(ns) => (Api::namespaced(shell.client.clone(), ns), Api::namespaced(shell.client.clone(), ns)),
        None => (Api::all(shell.client.clone()), Api::all(shell.client.clone())),
    };
    let (works_listed, jobs_listed) = listed;
    // Caches keep only what reconciles read (no managedFields, no foreign
    // labels or annotations): anyone who may edit work could otherwise grow
    // every operator replica's memory by 256 KiB per object.
    let events = watcher(works, watcher::Config::default().page_size(K::PAGE_SIZE))
        .default_backoff()
        .modify(|work| mining_api::trim_for_cache(work.meta_mut()))
        .reflect(writer)
        .inspect_ok(move |event| works_listed.saw(event))
        .applied_objects();
    // Paged lists from etcd, not the watch cache's one-piece answer: the
    // label selects objects anyone may create, so no list may be held whole.
    let metrics = shell.metrics.clone();
    let job_events =
        watcher(jobs, watcher::Config::default().labels(&K::jobs_selector()).page_size(JOB_PAGE_SIZE))
            .default_backoff()
            .modify(move |job| {
                metrics.saw("jobs");
                K::project_job(job)
            })
            .reflect(job_writer)
            .inspect_ok(move |event| jobs_listed.saw(event))
            .touched_objects();
    let blocked = crate::work::pod_start::owners_of_blocked::<K>(&shell.blocked_jobs, shell.jobs.clone());
    let store = shell.store.clone();
    let shell = Arc::new(shell);
    K::started(&shell);
    Controller::for_stream(events, store)
        .with_config(kube::runtime::controller::Config::default().concurrency(K::CONCURRENCY))
        .owns_stream(job_events)
        .reconcile_on(woken)
        .reconcile_on(blocked)
        .shutdown_on_signal()
        .run(reconcile::<K>, error_policy::<K>, shell)
        .for_each(|result| async move {
            if let Err(err) = result {
                warn!(kind = K::NOUN, error = %err, "reconcile failed");
            }
        })
        .await;
}

/// The one reconcile: the kind's own, in everything every kind needs.
pub async fn reconcile<K: WorkKind>(work: Arc<K>, shell: Arc<Shell<K>>) -> Result<Requeue> {
    if !shell.leadership.is_leading() {
        // A standby: the leader acts; this replica is woken when it leads.
        return Ok(Requeue::await_change());
    }
    if !shell.readiness.all_listed() {
        // Until then work may be missing from a cache only, and an
        // admission would count another kind's running work as none.
        return Ok(Requeue::requeue(NOT_LISTED_RETRY));
    }
    let started = Instant::now();
    shell.metrics.reconciles.inc();
    // A Job event can come before the cache shows the status this operator
    // just wrote: planning on the cache's would redo what is done, or
    // write on a version that is gone.
    let work = shell.memory.freshest(work.as_ref());
    // One span per reconcile; work started through MCP carries the
    // caller's trace, so its reconciles join it.
    let span = work.span();
    if let Some(parent) = work.annotation(annotations::TRACEPARENT).and_then(TraceParent::parse) {
        telemetry::continue_trace(&span, &parent);
        span.record("trace_id", parent.trace_id_hex());
    }
    let (result, calls) = counting_calls(span, work.reconcile(&shell)).await;
    shell.metrics.reconcile_duration.observe(started.elapsed().as_secs_f64());
    shell.metrics.api_calls_per_reconcile.observe(calls as f64);
    K::reconciled(&shell);
    let outcome = shell.settle(&work, result?);
    Ok(outcome.requeue.map_or_else(Requeue::await_change, Requeue::requeue))
}

pub fn error_policy<K: WorkKind>(work: Arc<K>, error: &Error, shell: Arc<Shell<K>>) -> Requeue {
    warn!(kind = K::NOUN, error = %error, source = ?std::error::Error::source(error), "reconcile error");
    shell.metrics.reconcile_errors.get_or_create(&ErrorLabels { error: error.metric_label() }).inc();
    if error.is_forbidden() {
        tell_forbidden(&shell, &shell.memory, shell.store.state().len(), work.as_ref(), error);
    }
    Requeue::requeue(Duration::from_secs(if matches!(error, Error::ForeignJob { .. }) { 2 } else { 5 }))
}

/// A missing RBAC rule is the installer's to fix, and nothing in the logs of
/// a Pod reaches the user who runs `kubectl describe`: say it on the work
/// itself, as a Warning Event, at most once per interval (creating Events
/// is a rule of its own, so this may fail too).
pub fn tell_forbidden<W: mining_api::Work>(
    shared: &Shared,
    memory: &Memory,
    live: usize,
    work: &W,
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
    publish_events(&shared.client, &shared.instance, work, &name, vec![event]);
}
