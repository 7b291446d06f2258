//! The one queue every kind of work waits in, and the I/O around the pure
//! decisions of [`crate::admission`]: it reads every registered kind's
//! cache and what this operator wrote, reserves a slot while an admission
//! is written, and wakes whatever is next when a slot frees — of whichever
//! kind. A kind joins by [`WorkQueue::register`]ing its store and waker;
//! nothing here names one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};
use mining_api::Work;

use crate::admission::node::{GiveWay, gives_way, kept_by_nodes, node_victims};
use crate::admission::shares::shares;
use crate::admission::{
    Budget, QueueEntry, Seen, Slots, Standing, WorkKind, Yield, freshest_phases, holders_over_share,
    next_in_queue, preempt_in, queue_positions, should_yield, slots_for, taken_by_others, yield_for,
};
use crate::memory::{InFlightKey, Memory, Reservation};
use crate::metrics::{KindLabels, Metrics, NAMESPACES_SHOWN};
use crate::parties::Parties;

/// How often the head of the queue wakes the work over its share again
/// while it may take a slot back and has not got one.
const RECLAIM_RECHECK: Duration = Duration::from_secs(5);

/// What the queue needs of one registered kind.
trait Queued: Send + Sync {
    /// Its work with the freshest phases (`written`: what this operator wrote).
    fn seen(&self, memory: &Remembered, parties: &Parties) -> Vec<Seen>;
    /// The party `name` in `namespace` queues as ("" when not cached).
    fn party(&self, namespace: &str, name: &str, parties: &Parties) -> String;
    /// How many of its objects the cache holds.
    fn live(&self) -> usize;
    /// Reconciles `name` in `namespace` now.
    fn wake(&self, namespace: &str, name: &str);
    /// Reconciles every one now.
    fn wake_all(&self);
}

/// What this operator knows fresher than the caches, read once for all kinds.
struct Remembered {
    /// The standings it wrote.
    written: HashMap<String, Standing>,
    /// The node waits its reconciles observed.
    node_waits: HashMap<String, Timestamp>,
}

/// One kind's cache and the way to wake its controller.
struct Registered<K: Work> {
    store: Store<K>,
    waker: UnboundedSender<ObjectRef<K>>,
    /// Work without the frontend's proof is never run, so it holds no place.
    proven_only: bool,
}

impl<K: Work> Queued for Registered<K> {
    fn seen(&self, memory: &Remembered, parties: &Parties) -> Vec<Seen> {
        let mut cached = self.store.state();
        if self.proven_only {
            cached.retain(|work| parties.proves(work.as_ref()));
        }
        freshest_phases(&cached, &memory.written, &memory.node_waits, |work| parties.of(work))
    }

    fn party(&self, namespace: &str, name: &str, parties: &Parties) -> String {
        let work = self.store.get(&ObjectRef::new(name).within(namespace));
        work.map(|work| parties.of(work.as_ref())).unwrap_or_default()
    }

    fn live(&self) -> usize {
        self.store.state().len()
    }

    fn wake(&self, namespace: &str, name: &str) {
        let _ = self.waker.unbounded_send(ObjectRef::new(name).within(namespace));
    }

    fn wake_all(&self) {
        for work in self.store.state() {
            let _ = self.waker.unbounded_send(ObjectRef::from_obj(work.as_ref()));
        }
    }
}

/// Whether a kind runs work nobody proved (a workflow anyone creates
/// directly) or only what the frontend made for a caller (a tool run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proven {
    Any,
    Only,
}

/// The kinds of work the queue serves, each registered once at start, in
/// the order they were (which breaks ties between kinds in the queue).
#[derive(Default)]
pub struct Kinds(Vec<(WorkKind, Box<dyn Queued>)>);

impl Kinds {
    /// Adds kind `K`: its cache, and the sender its controller is woken by.
    pub fn register<K: Work>(
        &mut self,
        store: Store<K>,
        waker: UnboundedSender<ObjectRef<K>>,
        proven: Proven,
    ) {
        let registered = Registered { store, waker, proven_only: proven == Proven::Only };
        self.0.retain(|(kind, _)| *kind != WorkKind::of::<K>());
        self.0.push((WorkKind::of::<K>(), Box::new(registered)));
    }
}

pub struct WorkQueue {
    kinds: Kinds,
    pub parties: Parties,
    pub memory: Arc<Memory>,
    pub budget: Budget,
    metrics: Option<Arc<Metrics>>,
}

/// How often the fair-share gauges are set from the caches.
const SHARES_INTERVAL: Duration = Duration::from_secs(10);

impl WorkQueue {
    pub fn new(kinds: Kinds, parties: Parties, memory: Arc<Memory>, budget: Budget) -> Self {
        Self { kinds, parties, memory, budget, metrics: None }
    }

    /// The same queue, reporting who holds and who waits to `metrics`.
    pub fn reporting_to(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Sets the fair-share gauges every few seconds, for as long as it runs.
    pub async fn report_shares(self: Arc<Self>) {
        let Some(metrics) = self.metrics.clone() else { return };
        let kinds: Vec<&'static str> = self.kinds.0.iter().map(|(kind, _)| kind.0).collect();
        let mut every = tokio::time::interval(SHARES_INTERVAL);
        loop {
            every.tick().await;
            let all = self.all();
            metrics.set_shares(&shares(&all, &self.budget, Timestamp::now(), NAMESPACES_SHOWN), &kinds);
        }
    }

    fn kind(&self, kind: WorkKind) -> Option<&dyn Queued> {
        self.kinds.0.iter().find(|(k, _)| *k == kind).map(|(_, queued)| queued.as_ref())
    }

    /// All work of every kind with its freshest phase.
    pub fn all(&self) -> Vec<Seen> {
        let memory =
            Remembered { written: self.memory.written_standings(), node_waits: self.memory.node_waits() };
        self.kinds
            .0
            .iter()
            .map(|(_, queued)| queued)
            .flat_map(|kind| kind.seen(&memory, &self.parties))
            .collect()
    }

    /// How many objects of `kind` the cache holds.
    pub fn live(&self, kind: WorkKind) -> usize {
        self.kind(kind).map_or(0, Queued::live)
    }

    /// `me`'s slots, counted while no other admission can be, and a slot
    /// reserved for it until the reservation is dropped (after its status
    /// is written). The queue's order is shared by the reconciles that
    /// follow while nothing changed it (see `Memory::queue_positions`).
    pub fn admission(&self, me: &QueueEntry) -> (Slots, Reservation<'_>) {
        // The party from the cache by name: one lookup, not a read of all work.
        let party = self
            .kind(me.kind)
            .map(|kind| kind.party(&me.namespace, &me.name, &self.parties))
            .unwrap_or_default();
        let key = InFlightKey { kind: me.kind, namespace: me.namespace.clone(), party };
        self.memory.reserve_admission(key, |in_flight| {
            let all = self.all();
            let positions = self.memory.queue_positions(&me.uid, || queue_positions(&all, &self.budget));
            let slots = slots_for(me, taken_by_others(&all, me) + in_flight, &positions, &self.budget);
            // A free slot is not a free node (`admission::node`); and
            // while the nodes keep it, that is what it says, whatever the
            // budget: one steady message, not one per count that changes.
            let slots = kept_by_nodes(&all, me, Timestamp::now()).unwrap_or(slots);
            let first = all.iter().any(|s| s.work.uid == me.uid && s.work.admitted.is_none());
            if let (true, true, Some(metrics), Some(created)) =
                (slots.admits(), first, &self.metrics, me.created)
            {
                let waited = Timestamp::now().duration_since(created).as_secs_f64().max(0.0);
                metrics.wait_for_first_slot.get_or_create(&KindLabels { kind: me.kind.0 }).observe(waited);
            }
            slots
        })
    }

    /// Whether the workflow `me`, between two blocks, should lend its slot.
    pub fn should_yield(&self, me: &QueueEntry) -> bool {
        should_yield(&self.all(), me, &self.budget)
    }

    /// Whether and when the workflow `me` gives its slot back (see `admission::yield_for`).
    pub fn yield_for(&self, me: &QueueEntry, now: Timestamp) -> Yield {
        yield_for(&self.all(), me, &self.budget, now)
    }

    /// `me` heads the queue and every slot is taken: once it may take a slot
    /// back mid-block, wake the work holding more than its share (a block
    /// that takes days sends no event before it ends). How long until `me`
    /// should look again; `None` when slots are taken back only at block
    /// boundaries.
    pub fn reclaim_for(&self, me: &QueueEntry) -> Option<Duration> {
        let now = Timestamp::now();
        let left = preempt_in(me, &self.budget, now)?;
        if !left.is_zero() {
            return Some(left);
        }
        let all = self.all();
        for holder in holders_over_share(&all, me, &self.budget, now) {
            if let Some(queued) = self.kind(holder.kind) {
                self.memory.request_preemption(&holder.uid);
                queued.wake(&holder.namespace, &holder.name);
            }
        }
        Some(RECLAIM_RECHECK)
    }

    /// Whether `me`, its Pods waiting for a node since `since`, gives its
    /// slot back now (see `admission::node::gives_way`).
    pub fn gives_way(&self, me: &QueueEntry, since: Timestamp, now: Timestamp) -> Option<GiveWay> {
        gives_way(&self.all(), me, since, &self.budget, now)
    }

    /// `me` holds a slot and its Pods wait for a node since `since`: once
    /// it waited the preemption delay, ask one piece of running work of a
    /// group running more to give its slot back — one per wait (`Memory::
    /// node_reclaim_due`) — so the spot its Pod frees is `me`'s. How long
    /// until `me` should look again.
    pub fn reclaim_at_node(&self, me: &QueueEntry, since: Timestamp) -> Option<Duration> {
        let now = Timestamp::now();
        let after = crate::admission::node::victim_delay(self.budget.preempt_after?);
        let waited = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
        if waited < after {
            return Some(after - waited);
        }
        let all = self.all();
        let Some(victim) = node_victims(&all, me, since, &self.budget, now).into_iter().next() else {
            return Some(RECLAIM_RECHECK);
        };
        if self.memory.node_reclaim_due(&me.uid, since, &victim.uid)
            && let Some(queued) = self.kind(victim.kind)
        {
            self.memory.request_preemption(&victim.uid);
            queued.wake(&victim.namespace, &victim.name);
        }
        Some(RECLAIM_RECHECK)
    }

    /// A slot freed (or the queue changed): reconcile the work next in line
    /// now, whatever its kind.
    pub fn wake_next(&self) {
        self.memory.queue_changed();
        let all = self.all();
        for next in next_in_queue(&all, &self.budget, Timestamp::now()) {
            if let Some(queued) = self.kind(next.kind) {
                queued.wake(&next.namespace, &next.name);
            }
        }
    }

    /// A new leadership term: every piece of work is looked at again.
    pub fn wake_all(&self) {
        for queued in self.kinds.0.iter().map(|(_, queued)| queued) {
            queued.wake_all();
        }
    }
}
