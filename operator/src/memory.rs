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
mod tests {
    use mining_api::testing::workflow;
    use mining_api::{MiningWorkflowStatus, WorkflowPhase};

    use super::*;

    #[test]
    fn the_last_written_status_wins_over_a_stale_cache_until_forgotten() {
        let cached = workflow("w", 8, 2);
        let status = MiningWorkflowStatus { phase: Some(WorkflowPhase::Mining), ..Default::default() };
        let memory = Memory::default();
        memory.remember(&cached, &status, Some("42".into()));
        let fresh = memory.freshest(&cached);
        assert_eq!(fresh.phase(), WorkflowPhase::Mining);
        assert_eq!(fresh.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(memory.written_standings()["uid-w"].phase, mining_api::Lifecycle::Active);
        memory.forget(&cached);
        assert_eq!(memory.freshest(&cached).phase(), WorkflowPhase::Pending);
    }

    #[test]
    fn a_tool_runs_written_status_wins_over_a_stale_cache_as_a_workflows_does() {
        let cached = mining_api::testing::tool_run("r", "sum");
        let status = mining_api::ToolRunStatus {
            phase: Some(mining_api::ToolRunPhase::Running),
            job_uid: Some("job".into()),
            ..Default::default()
        };
        let memory = Memory::default();
        memory.remember(&cached, &status, Some("7".into()));
        let fresh = memory.freshest(&cached);
        assert_eq!(fresh.status.as_ref().and_then(|s| s.job_uid.as_deref()), Some("job"));
        assert_eq!(fresh.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            memory.written_standings()[cached.metadata.uid.as_deref().unwrap()].phase,
            mining_api::Lifecycle::Active
        );
        // Another kind's entry is never read back as this kind's status.
        let workflow = workflow("w", 8, 2);
        memory.remember(&workflow, &MiningWorkflowStatus::default(), None);
        assert_eq!(memory.freshest(&cached).status.and_then(|s| s.job_uid), Some("job".into()));
    }

    #[test]
    fn old_written_statuses_are_swept_as_the_map_grows() {
        let written = |at| Written {
            status: Box::new(()),
            resource_version: None,
            standing: Standing { phase: mining_api::Lifecycle::Active, admitted: None },
            at,
        };
        let mut all = WrittenStatuses::default();
        let kept = Duration::from_secs(60);
        for i in 0..WRITTEN_SWEEP_FLOOR - 1 {
            all.insert(format!("old-{i}"), written(Instant::now()), kept);
        }
        assert_eq!(all.by_uid.len(), WRITTEN_SWEEP_FLOOR - 1, "nothing swept below the floor");
        all.insert("recent".into(), written(Instant::now()), kept);
        // Everything here is older than a zero retention: the next insert sweeps.
        all.insert("new".into(), written(Instant::now()), Duration::ZERO);
        let mut left: Vec<&String> = all.by_uid.keys().collect();
        left.sort();
        assert_eq!(left, ["new"], "the old ones went, the new one stays");
        assert_eq!(all.sweep_at, 0, "the next sweep waits for the floor again");
    }

    #[test]
    fn a_preemption_request_is_taken_once_and_bounded() {
        let memory = Memory::default();
        assert!(!memory.take_preemption_request("u"), "nobody asked");
        memory.request_preemption("u");
        assert!(memory.take_preemption_request("u"));
        assert!(!memory.take_preemption_request("u"), "taken once");
        for i in 0..=MAX_PREEMPTION_REQUESTS {
            memory.request_preemption(&format!("w{i}"));
        }
        assert!(lock(&memory.preemption_requests).len() <= MAX_PREEMPTION_REQUESTS);
    }

    #[test]
    fn a_reservation_counts_until_dropped() {
        let memory = Memory::default();
        let key = |kind, namespace: &str, party: &str| InFlightKey {
            kind,
            namespace: namespace.into(),
            party: party.into(),
        };
        let (workflow, run) =
            (WorkKind::of::<mining_api::MiningWorkflow>(), WorkKind::of::<mining_api::ToolRun>());
        let counted = |all, kind, party, namespace| Taken { all, kind, party, namespace };
        let (seen, first) = memory.reserve_admission(key(workflow, "a", "alice"), |in_flight| in_flight);
        assert_eq!(seen, counted(0, 0, 0, 0));
        let (seen, second) = memory.reserve_admission(key(run, "a", "alice"), |in_flight| in_flight);
        assert_eq!(
            seen,
            counted(1, 0, 0, 1),
            "the workflow in flight counts against the budget and the namespace, not the runs' caps"
        );
        let (seen, third) = memory.reserve_admission(key(run, "a", "alice"), |in_flight| in_flight);
        assert_eq!(seen, counted(2, 1, 1, 2), "alice's run in flight counts against her cap");
        let (seen, fourth) = memory.reserve_admission(key(run, "b", "alice"), |in_flight| in_flight);
        assert_eq!(seen, counted(3, 2, 0, 0), "a party is a caller within one namespace");
        drop((first, second, third, fourth));
        assert_eq!(memory.admissions_in_flight(), 0);
        assert!(lock(&memory.admissions_in_flight).is_empty(), "no key is kept once its admissions end");
    }

    #[test]
    fn expected_jobs_are_dropped_once_seen() {
        let memory = Memory::default();
        let expected =
            ExpectedJob { workflow_uid: "u".into(), block: 2, range: None, created: Instant::now() };
        memory.expect_job("j2".into(), expected.clone());
        assert_eq!(memory.expected_jobs("u", 1, &[]), [("j2".to_string(), expected.clone())]);
        assert!(memory.expected_jobs("other", 1, &[]).is_empty(), "another workflow's");
        assert!(memory.expected_jobs("u", 2, &[]).is_empty(), "its block is verified");
        assert!(memory.expected_jobs("u", 1, &["j2".into()]).is_empty(), "seen in the store");
        assert!(memory.expected_jobs("u", 1, &[]).is_empty(), "and forgotten");
    }

    #[test]
    fn forbidden_is_told_once_per_interval() {
        let memory = Memory::default();
        assert!(memory.should_tell_forbidden("u", 1));
        assert!(!memory.should_tell_forbidden("u", 1));
        assert!(memory.should_tell_forbidden("v", 1));
    }

    #[test]
    fn the_newer_version_is_the_larger_number_else_ours() {
        assert_eq!(newer_version(Some("9".into()), Some("10".into())).as_deref(), Some("10"));
        assert_eq!(newer_version(Some("11".into()), Some("10".into())).as_deref(), Some("11"));
        assert_eq!(newer_version(Some("x".into()), Some("y".into())).as_deref(), Some("y"));
        assert_eq!(newer_version(Some("x".into()), None).as_deref(), Some("x"));
    }

    #[test]
    fn one_sort_of_the_queue_serves_the_waiting_reconciles_until_it_changes() {
        use std::cell::Cell;
        let memory = Memory::default();
        let sorts = Cell::new(0);
        let budget = crate::admission::Budget::new(1);
        let waiting = |names: &[&str]| {
            let all: Vec<crate::admission::Seen> = names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let mut workflow = crate::testing::workflow(name, 8, 1);
                    workflow.metadata.creation_timestamp = Some(
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::testing::at(i as i64)),
                    );
                    crate::admission::Seen {
                        work: crate::admission::QueueEntry::of(&workflow),
                        phase: mining_api::Lifecycle::Waiting,
                        party: String::new(),
                    }
                })
                .collect();
            sorts.set(sorts.get() + 1);
            crate::admission::queue_positions(&all, &budget)
        };
        for uid in ["uid-a", "uid-b", "uid-c", "uid-a"] {
            memory.queue_positions(uid, || waiting(&["a", "b", "c"]));
        }
        assert_eq!(sorts.get(), 1, "one sort for four waiting reconciles");
        // A workflow the last order does not know, or a change, sorts anew.
        memory.queue_positions("uid-d", || waiting(&["a", "b", "c", "d"]));
        assert_eq!(sorts.get(), 2);
        memory.queue_changed();
        let positions = memory.queue_positions("uid-b", || waiting(&["b", "c", "d"]));
        assert_eq!(sorts.get(), 3);
        let b = crate::testing::workflow("b", 8, 1);
        assert_eq!(
            positions.ahead_of(&crate::admission::QueueEntry::of(&b)),
            crate::admission::Place::default()
        );
    }

    #[test]
    fn one_yield_is_decided_at_a_time() {
        let memory = Memory::default();
        let turn = memory.yield_turn().expect("the first asks");
        assert!(memory.yield_turn().is_none(), "a second waits for the first's write");
        drop(turn);
        assert!(memory.yield_turn().is_some());
    }
}
