//! What the one core needs of each kind of work besides where it lives
//! (that is [`super::kinds`]): what one means to its caller. Find, wait,
//! cancel, list, ownership and task snapshots are written once, over
//! [`Served`].

use k8s_openapi::jiff::Timestamp;
use mining_api::{MiningWorkflow, ToolRun};

use super::kinds::{Any, KindId, Registered};
use super::{Core, View};
use crate::cache::{Entry, Kind, Subscription};
use crate::contract::{Details, Outcome, outcome};
use crate::ids::{Caller, WorkId};
use crate::tool_runs::access::Denied;
use crate::tool_runs::contract::{ToolDetails, run_outcome};
use crate::with_kind;

/// One kind of work as the frontend serves it (registered in [`super::kinds`]).
pub trait Served: Registered {
    /// What its answers carry besides the common contract.
    type Details: Details + Send;

    /// What it means to the caller that started it, at `now`.
    fn outcome(&self, now: Timestamp) -> Outcome<Self::Details>;

    /// The newest moment its status records a change; once finished, the
    /// moment it finished (a task's `lastUpdatedAt`).
    fn last_updated(&self) -> Option<Timestamp>;

    /// Whether a failure is the work's own report (a tool error: the
    /// 2026-07-28 task is `completed` with `isError`), not a failure to run
    /// it at all (the task is `failed`, with a JSON-RPC error). A miner's
    /// failure is mining's own report.
    fn failure_is_its_own(&self) -> bool {
        true
    }
}

impl Kind for MiningWorkflow {
    fn unreadable(&self) -> Option<String> {
        self.status.as_ref().and_then(|s| s.unreadable.clone())
    }
}

impl Served for MiningWorkflow {
    type Details = crate::contract::MiningDetails;

    fn outcome(&self, now: Timestamp) -> Outcome<Self::Details> {
        outcome(self, now)
    }

    fn last_updated(&self) -> Option<Timestamp> {
        crate::contract::last_updated(self)
    }
}

impl Kind for ToolRun {
    fn unreadable(&self) -> Option<String> {
        None
    }

    fn defined_tool(&self) -> Option<&str> {
        Some(&self.spec.tool)
    }
}

impl Served for ToolRun {
    type Details = ToolDetails;

    fn outcome(&self, now: Timestamp) -> Outcome<Self::Details> {
        run_outcome(self, now)
    }

    fn last_updated(&self) -> Option<Timestamp> {
        let status = self.status.as_ref()?;
        match &status.finished_at {
            Some(finished) if mining_api::Work::is_finished(self) => Some(finished.0),
            _ => status.started_at.as_ref().map(|t| t.0),
        }
    }

    /// The tool's container exited with a code: the tool ran and said it
    /// failed. Without one it never ran to its end (its Pod could not
    /// start, its deadline passed, its caller never answered, the operator
    /// refused it): nothing the tool reported, so a failed task.
    fn failure_is_its_own(&self) -> bool {
        self.status.as_ref().is_some_and(|status| status.exit_code.is_some())
    }
}

impl Core {
    /// The caller's work behind a task id, of whichever kind, resolved once:
    /// every kind's cache first (memory only), then the API server for the
    /// kinds whose cache does not hold the name yet. A name is unique only
    /// within a kind, so another's object of one kind under the caller's id
    /// hides nothing of the caller's own.
    pub async fn resolve(&self, caller: &Caller, id_text: &str) -> Result<View<Any>, String> {
        let Some(id) = WorkId::parse_for(&self.keys, caller, id_text) else { return Ok(View::Missing) };
        let name = id.as_str();
        let cached =
            KindId::ALL.map(|kind| with_kind!(kind, K => self.cached::<K>(caller, name).map(View::into_any)));
        let seen = cached.each_ref().map(Option::is_some);
        if let Some(view) = cached.into_iter().flatten().find(|view| !matches!(view, View::Missing)) {
            return self.granted_any(caller, view).await;
        }
        for (kind, seen) in KindId::ALL.into_iter().zip(seen) {
            if seen {
                continue;
            }
            let view = with_kind!(kind, K => self.fetched::<K>(caller, name).await?.into_any());
            if !matches!(view, View::Missing) {
                return self.granted_any(caller, view).await;
            }
        }
        Ok(View::Missing)
    }

    /// [`Core::granted`] of work of whichever kind.
    async fn granted_any(&self, caller: &Caller, view: View<Any>) -> Result<View<Any>, String> {
        match view {
            View::Found(work) => {
                crate::each_kind!(*work, work => Ok(self.granted(caller, View::Found(work)).await?.into_any()))
            }
            other => Ok(other),
        }
    }

    /// Waits for `work` of whichever kind (see [`Core::wait`]).
    pub async fn wait_any(
        &self,
        caller: &Caller,
        work: Any,
        deadline: tokio::time::Instant,
        listener: &mut impl super::WaitListener,
    ) -> View<Any> {
        crate::each_kind!(work, work => self.wait(caller, work, deadline, listener).await.into_any())
    }
}

/// What the watch says of work a caller follows.
#[derive(Debug, PartialEq, Eq)]
pub enum Refreshed {
    /// Still there and the caller's; the copy in hand is the newest.
    Current,
    /// There, but its stored state cannot be read now; the text says why.
    Unreadable(String),
    /// Deleted (its retention ran out), or no longer the caller's.
    Gone,
}

impl Core {
    /// Brings `latest` up to what the watch of its kind has now.
    /// `seen_in_cache` remembers that the watch has delivered it, so that
    /// its absence later means deleted (not "created a moment ago").
    pub fn refresh<K: Served>(
        &self,
        caller: &Caller,
        latest: &mut Box<K>,
        seen_in_cache: &mut bool,
    ) -> Refreshed {
        let name = latest.meta().name.clone().unwrap_or_default();
        match self.homes::<K>().holding(&name).cache.get(&name) {
            Entry::Found(work) => {
                *seen_in_cache = true;
                *latest = work;
            }
            Entry::Unreadable { problem, .. } => return Refreshed::Unreadable(problem),
            Entry::Missing if *seen_in_cache => return Refreshed::Gone,
            // Created a moment ago and not delivered by the watch yet.
            Entry::Missing => {}
        }
        if self.owns(&**latest, caller) { Refreshed::Current } else { Refreshed::Gone }
    }

    /// [`Core::refresh`] of work of whichever kind.
    pub fn refresh_any(&self, caller: &Caller, latest: &mut Any, seen_in_cache: &mut bool) -> Refreshed {
        crate::each_kind!(latest, work => self.refresh(caller, work, seen_in_cache))
    }

    /// Whether `caller` may still be told of `work` (of whichever kind):
    /// what every request about a run needs, checked again for each
    /// notification, so a grant revoked while a listen is open ends what
    /// the listen tells of the run.
    pub async fn still_granted(&self, caller: &Caller, work: &Any) -> Result<(), Denied> {
        self.grant_for(caller, crate::each_kind!(work, work => work.defined_tool())).await
    }

    /// Interest in the changes of `work` (of whichever kind), from its watch.
    pub fn subscribe_any(&self, work: &Any) -> Subscription<'_> {
        fn subscribe<'a, K: Served>(core: &'a Core, work: &K) -> Subscription<'a> {
            let name = work.meta().name.as_deref().unwrap_or_default();
            core.homes::<K>().holding(name).cache.subscribe(name)
        }
        crate::each_kind!(work, work => subscribe(self, &**work))
    }
}
