//! What the reconcilers remember between reconciles, and the only place that
//! locks it: Jobs created but not seen yet, the status last written for
//! work of every kind, admissions decided but not written, and when work
//! was last told about a missing RBAC rule.
//!
//! Every lock is held for a few map operations and never across an await; a
//! panic while one is held cannot leave a map half-updated, so a poisoned
//! lock is taken over rather than propagated.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::core::object::HasStatus;
use mining_api::Work;

use crate::admission::{QueuePositions, Standing, Taken, WorkKind};

/// How long a created Job counts as existing without its watch event: far
/// longer than any watch delay, short enough that a Job deleted before it was
/// ever seen is noticed.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a workflow stuck on a missing RBAC rule is told so again.
pub const FORBIDDEN_EVENT_INTERVAL: Duration = Duration::from_secs(300);
/// Entries kept beyond the number of live workflows before the maps are swept.
const SWEEP_SLACK: usize = 64;
/// How long a written status outranks the cache. The cache catches up
/// within a watch event's delay; after this the entry only costs memory,
/// and whatever it was written for may be gone (nothing says so here).
const WRITTEN_KEPT: Duration = Duration::from_secs(600);
/// Preemption requests held at most (each is repeated while it matters).
const MAX_PREEMPTION_REQUESTS: usize = 4096;
/// Node waits held at most (see `Memory::node_waits`).
const MAX_NODE_WAITS: usize = 16_384;
/// Written statuses held before the first sweep of old ones.
const WRITTEN_SWEEP_FLOOR: usize = 1024;
/// How long one sort of the queue serves the waiting reconciles that follow
/// it, while no admission or freed slot changed it. A position read from it
/// is at most this old; the limit itself is counted fresh every time.
const QUEUE_ORDER_TTL: Duration = Duration::from_secs(1);

/// A Job created and not yet seen in the Job store.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectedJob {
    pub workflow_uid: String,
    pub block: u32,
    /// The nonce range, for a Job that mines one.
    pub range: Option<(u64, u64)>,
    pub created: Instant,
}

/// A status this operator wrote, for work of any kind, and the
/// resourceVersion the write produced.
struct Written {
    /// The kind's own status type, read back only by the same kind.
    status: Box<dyn Any + Send>,
    resource_version: Option<String>,
    /// What the queue counts of it.
    standing: Standing,
    at: Instant,
}

#[derive(Default)]
pub struct Memory {
    /// Jobs this operator created that its Job store has not shown yet (by
    /// name): without these a reconcile that runs before the creation's
    /// watch event would create the Job again.
    expected_jobs: Mutex<HashMap<String, ExpectedJob>>,
    /// The status last written per uid, of every kind. This operator is the
    /// only writer of `status`, so what it wrote is at least as new as the
    /// cache, which may not have caught up when a Job event triggers the
    /// next reconcile; planning on a stale status would verify a block
    /// twice, or write a run's status on a version that is gone (a refused
    /// write and a plan again). With it, the resourceVersion that write
    /// produced: the next write's precondition, so a deposed leader's late
    /// write fails instead of putting an older status over a newer one. The
    /// queue counts the standing written.
    written: Mutex<WrittenStatuses>,
    /// Admissions decided but not yet written, per holder (namespace,
    /// party, kind): counted as holding slots by every other admission of
    /// any kind, so every limit holds exactly while admissions run in
    /// parallel (a lock held across the status write made 200 new
    /// workflows wait on each other's writes).
    admissions_in_flight: Mutex<HashMap<InFlightKey, usize>>,
    /// Whether a workflow is giving its slot away and its status is not
    /// written yet: one at a time, so concurrent block boundaries never all
    /// yield to the same waiting workflow.
    yield_in_flight: Mutex<bool>,
    /// Work (by uid) the head of the queue asked to give its slot back
    /// mid-block: only these look at the queue between block boundaries, so
    /// a running block's reconcile costs nothing more unless asked.
    preemption_requests: Mutex<HashSet<String>>,
    /// The victim each piece of work waiting for a node (by uid) asked to
    /// give its slot back, with the start of that wait: one per wait.
    node_reclaims: Mutex<HashMap<String, (Timestamp, String)>>,
    /// Since when each piece of work holding a slot has had its Pods wait
    /// for a node, none running (by uid), as its last reconcile observed
    /// them in the Pod watch: what fair share at the node reads. Its status
    /// says a wait only once it lasted (`pod_start::NODE_WAIT_SAID_AFTER`).
    /// A new leader starts with none and observes each as it reconciles all
    /// work at start: until then (one pass over the caches) its gate and
    /// fair share at the node see the nodes as less full than they are.
    node_waits: Mutex<HashMap<String, Timestamp>>,
    /// When each workflow (by uid) last got a `Forbidden` Event.
    forbidden_told: Mutex<HashMap<String, Instant>>,
    /// The queue's last order and when it was computed: with thousands
    /// waiting, a sort per waiting reconcile (under the admission lock)
    /// would serialise them all behind it.
    queue: Mutex<Option<(Instant, Arc<QueuePositions>)>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The statuses written, and the size at which old ones are next swept.
#[derive(Default)]
struct WrittenStatuses {
    by_uid: HashMap<String, Written>,
    sweep_at: usize,
}

impl WrittenStatuses {
    /// Records `written`, first forgetting what is older than `kept` (its
    /// work may be gone) each time the map has doubled, so a sweep's cost is
    /// spread over the writes that grew it.
    fn insert(&mut self, uid: String, written: Written, kept: Duration) {
        if self.by_uid.len() >= self.sweep_at.max(WRITTEN_SWEEP_FLOOR) {
            self.by_uid.retain(|_, written| written.at.elapsed() < kept);
            self.sweep_at = self.by_uid.len() * 2;
        }
        self.by_uid.insert(uid, written);
    }
}

fn uid_of<W: Work>(work: &W) -> String {
    work.meta().uid.clone().unwrap_or_default()
}

impl Memory {
    /// `work` as of this operator's last status write.
    pub fn freshest<W>(&self, work: &W) -> W
    where
        W: Work + HasStatus,
        W::Status: Clone + 'static,
    {
        let mut work = work.clone();
        let written = lock(&self.written);
        if let Some(written) = written.by_uid.get(&uid_of(&work))
            && let Some(status) = written.status.downcast_ref::<W::Status>()
        {
            *work.status_mut() = Some(status.clone());
            work.meta_mut().resource_version =
                newer_version(work.meta_mut().resource_version.take(), written.resource_version.clone());
        }
        work
    }

    /// Records the status written for `work` and the version it produced;
    /// the lifecycle that status puts it in.
    pub fn remember<W>(&self, work: &W, status: &W::Status, version: Option<String>) -> mining_api::Lifecycle
    where
        W: Work + HasStatus,
        W::Status: Clone + Send + 'static,
    {
        let mut after = work.clone();
        *after.status_mut() = Some(status.clone());
        let standing = Standing { phase: after.lifecycle(), admitted: after.admitted_at() };
        let written = Written {
            status: Box::new(status.clone()),
            resource_version: version,
            standing,
            at: Instant::now(),
        };
        lock(&self.written).insert(uid_of(work), written, WRITTEN_KEPT);
        standing.phase
    }

    /// Someone else wrote since: plan from the cache next time.
    pub fn forget<W: Work>(&self, work: &W) {
        lock(&self.written).by_uid.remove(&uid_of(work));
    }

    /// A new leadership term starts from the API's state, not from what this
    /// replica wrote or created in an earlier one.
    pub fn clear(&self) {
        lock(&self.written).by_uid.clear();
        lock(&self.expected_jobs).clear();
        lock(&self.node_waits).clear();
    }

    /// Records what a reconcile of `uid` observed: its Pods wait for a node
    /// since `since`, or not (`None`); whether a wait it had ended (its Pods
    /// placed: the nodes' gate may open for work kept waiting).
    pub fn observe_node_wait(&self, uid: &str, since: Option<Timestamp>) -> bool {
        let mut waits = lock(&self.node_waits);
        match since {
            None => waits.remove(uid).is_some(),
            Some(since) => {
                // Work that ended while waiting leaves with its status
                // write (`Shell::remember`); work deleted meanwhile stays
                // until this bound, read by nothing (only active work's
                // waits count). Past it, the live waits are observed again
                // within seconds (`pod_start::WAITING_RECHECK`).
                if waits.len() >= MAX_NODE_WAITS && !waits.contains_key(uid) {
                    waits.clear();
                }
                waits.insert(uid.to_string(), since);
                false
            }
        }
    }

    /// Since when `uid`'s Pods wait for a node, as last observed.
    pub fn node_wait(&self, uid: &str) -> Option<Timestamp> {
        lock(&self.node_waits).get(uid).copied()
    }

    /// Every observed node wait, by uid.
    pub fn node_waits(&self) -> HashMap<String, Timestamp> {
        lock(&self.node_waits).clone()
    }

    /// The phase and start of all work this operator wrote a status for.
    pub fn written_standings(&self) -> HashMap<String, Standing> {
        lock(&self.written).by_uid.iter().map(|(uid, written)| (uid.clone(), written.standing)).collect()
    }

    /// Computes waiting work's slots with `slots` while no other admission
    /// can, handing it the admissions in flight to count as holding slots
    /// (as each limit counts them for `me`), and reserves a slot for `me`
    /// until the returned reservation is dropped.
    pub fn reserve_admission<T>(
        &self,
        me: InFlightKey,
        slots: impl FnOnce(Taken) -> T,
    ) -> (T, Reservation<'_>) {
        let mut in_flight = lock(&self.admissions_in_flight);
        let taken = in_flight.iter().fold(Taken::default(), |taken, (other, count)| {
            let kind = other.kind == me.kind;
            let namespace = other.namespace == me.namespace;
            let party = kind && namespace && other.party == me.party;
            let one = |counted: bool| if counted { *count } else { 0 };
            taken + Taken { all: *count, kind: one(kind), party: one(party), namespace: one(namespace) }
        });
        let decided = slots(taken);
        *in_flight.entry(me.clone()).or_default() += 1;
        (decided, Reservation(self, me))
    }

    /// The head of the queue asks `uid` to give its slot back mid-block.
    pub fn request_preemption(&self, uid: &str) {
        let mut requests = lock(&self.preemption_requests);
        // Asked again every few seconds while it matters: a request whose
        // work went away is dropped with the rest past this bound.
        if requests.len() >= MAX_PREEMPTION_REQUESTS {
            requests.clear();
        }
        requests.insert(uid.to_string());
    }

    /// Whether `head`, its Pods waiting for a node since `since`, may ask
    /// `victim` to give its slot back: one victim per wait (asked again
    /// while it has not, in case a request was lost). Asking counts.
    pub fn node_reclaim_due(&self, head: &str, since: Timestamp, victim: &str) -> bool {
        let mut asked = lock(&self.node_reclaims);
        match asked.get(head) {
            Some((wait, asked)) if *wait == since => return asked == victim,
            _ => {}
        }
        // Waits long over are forgotten with the rest past this bound.
        if asked.len() >= MAX_PREEMPTION_REQUESTS {
            asked.clear();
        }
        asked.insert(head.to_string(), (since, victim.to_string()));
        true
    }

    /// Whether `uid` was asked to give its slot back (the request is taken).
    pub fn take_preemption_request(&self, uid: &str) -> bool {
        lock(&self.preemption_requests).remove(uid)
    }

    /// The turn to decide a yield, unless another workflow holds it.
    pub fn yield_turn(&self) -> Option<YieldTurn<'_>> {
        let mut in_flight = lock(&self.yield_in_flight);
        if *in_flight {
            return None;
        }
        *in_flight = true;
        Some(YieldTurn(self))
    }

    /// The queue's positions: the last order while it is fresh and knows
    /// `uid`, else `compute`'s (remembered for the next).
    pub fn queue_positions(
        &self,
        uid: &str,
        compute: impl FnOnce() -> QueuePositions,
    ) -> Arc<QueuePositions> {
        let mut queue = lock(&self.queue);
        if let Some((at, positions)) = queue.as_ref()
            && at.elapsed() < QUEUE_ORDER_TTL
            && positions.contains(uid)
        {
            return positions.clone();
        }
        let positions = Arc::new(compute());
        *queue = Some((Instant::now(), positions.clone()));
        positions
    }

    /// The queue changed (an admission, a slot freed): the next position is computed anew.
    pub fn queue_changed(&self) {
        *lock(&self.queue) = None;
    }

    /// Records a Job just created (or adopted) for a block.
    pub fn expect_job(&self, name: String, expected: ExpectedJob) {
        lock(&self.expected_jobs).insert(name, expected);
    }

    /// The Jobs of workflow `uid` after block `verified` that were created
    /// and not yet seen; expectations met (`seen`) or too old are dropped.
    pub fn expected_jobs(&self, uid: &str, verified: u32, seen: &[String]) -> Vec<(String, ExpectedJob)> {
        let mut expected = lock(&self.expected_jobs);
        expected.retain(|job, e| !seen.contains(job) && e.created.elapsed() < EXPECTATION_TIMEOUT);
        expected
            .iter()
            .filter(|(_, e)| e.workflow_uid == uid && e.block > verified)
            .map(|(job, e)| (job.clone(), e.clone()))
            .collect()
    }

    /// Whether workflow `uid` should be told of a missing RBAC rule now: at
    /// most once per [`FORBIDDEN_EVENT_INTERVAL`], not once per retry.
    pub fn should_tell_forbidden(&self, uid: &str, live_workflows: usize) -> bool {
        let mut told = lock(&self.forbidden_told);
        if told.get(uid).is_some_and(|at| at.elapsed() < FORBIDDEN_EVENT_INTERVAL) {
            return false;
        }
        if told.len() > live_workflows + SWEEP_SLACK {
            told.retain(|_, at| at.elapsed() < FORBIDDEN_EVENT_INTERVAL);
        }
        told.insert(uid.to_string(), Instant::now());
        true
    }

    #[cfg(test)]
    fn admissions_in_flight(&self) -> usize {
        lock(&self.admissions_in_flight).values().sum()
    }
}

/// The one yield that may be decided now; another may be once this is
/// dropped (after the status write, or on any early return).
pub struct YieldTurn<'a>(&'a Memory);

impl Drop for YieldTurn<'_> {
    fn drop(&mut self) {
        *lock(&self.0.yield_in_flight) = false;
    }
}

/// A slot reserved by an admission in flight; freed when dropped (after the
/// status write, or on any early return).
pub struct Reservation<'a>(&'a Memory, InFlightKey);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.0.admissions_in_flight);
        if let Some(count) = in_flight.get_mut(&self.1) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                in_flight.remove(&self.1);
            }
        }
    }
}

/// Whose admission is in flight, as the limits count holders.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InFlightKey {
    pub kind: WorkKind,
    pub namespace: String,
    pub party: String,
}

/// The newer of the cache's and this operator's last resourceVersion.
/// resourceVersions are opaque: when both read as numbers the larger wins,
/// else this operator's own. A wrong guess costs one refused write (409) and
/// a retry from the cache, never a lost status.
pub fn newer_version(cached: Option<String>, written: Option<String>) -> Option<String> {
    match (cached.as_deref().map(str::parse::<u64>), written.as_deref().map(str::parse::<u64>)) {
        (Some(Ok(c)), Some(Ok(w))) if c > w => cached,
        _ => written.or(cached),
    }
}

#[cfg(test)]
mod tests;
