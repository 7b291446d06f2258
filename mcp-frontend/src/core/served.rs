//! The kinds of work the frontend serves, and the little the one core needs
//! of each: where its objects live, and what one means to its caller. Find,
//! wait, cancel, list, ownership and task snapshots are written once, over
//! [`Served`]; a kind registers here (about 15 lines) and in [`Any`].

use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use mining_api::{MiningWorkflow, ToolRun};

use super::{Core, View};
use crate::cache::{Entry, Kind, ObjectCache, Subscription};
use crate::contract::{Details, Outcome, outcome};
use crate::ids::{Caller, WorkflowId};
use crate::tool_runs::contract::{ToolDetails, run_outcome};

/// Where the objects of one kind live: the API and the cache of a namespace.
pub struct Home<'a, K> {
    pub api: &'a Api<K>,
    pub cache: &'a ObjectCache<K>,
}

impl<K> Clone for Home<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Home<'_, K> {}

/// Every place the objects of one kind may be: the workflow namespace, and
/// where releases before it put them (still found, listed, waited on and
/// cancelled there, never created there).
pub struct Homes<'a, K> {
    pub current: Home<'a, K>,
    pub previous: Option<Home<'a, K>>,
}

impl<'a, K: Kind> Homes<'a, K> {
    /// Both places, the current first.
    pub fn all(&self) -> impl Iterator<Item = Home<'a, K>> + use<'a, K> {
        std::iter::once(self.current).chain(self.previous)
    }

    /// The place that holds `name`: the current, unless only the previous
    /// one's cache has it.
    pub fn holding(&self, name: &str) -> Home<'a, K> {
        match self.previous {
            Some(previous)
                if matches!(self.current.cache.get(name), Entry::Missing)
                    && !matches!(previous.cache.get(name), Entry::Missing) =>
            {
                previous
            }
            _ => self.current,
        }
    }

    /// The API of the namespace `work` lives in.
    pub fn api_of(&self, work: &K) -> &'a Api<K> {
        match self.previous {
            Some(previous) if work.meta().namespace.as_deref() != Some(self.current.cache.namespace()) => {
                previous.api
            }
            _ => self.current.api,
        }
    }
}

/// One kind of work as the frontend serves it.
pub trait Served: Kind {
    /// What its answers carry besides the common contract.
    type Details: Details + Send;

    /// Where its objects live.
    fn homes(core: &Core) -> Homes<'_, Self>;

    /// What it means to the caller that started it, at `now`.
    fn outcome(&self, now: Timestamp) -> Outcome<Self::Details>;

    /// The newest moment its status records a change; once finished, the
    /// moment it finished (a task's `lastUpdatedAt`).
    fn last_updated(&self) -> Option<Timestamp>;
}

impl Kind for MiningWorkflow {
    fn unreadable(&self) -> Option<String> {
        self.status.as_ref().and_then(|s| s.unreadable.clone())
    }
}

impl Served for MiningWorkflow {
    type Details = crate::contract::MiningDetails;

    fn homes(core: &Core) -> Homes<'_, Self> {
        Homes {
            current: Home { api: &core.api, cache: &core.cache },
            previous: core.previous.as_ref().map(|p| Home { api: &p.api, cache: &p.cache }),
        }
    }

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
}

impl Served for ToolRun {
    type Details = ToolDetails;

    fn homes(core: &Core) -> Homes<'_, Self> {
        Homes { current: Home { api: &core.run_api, cache: &core.runs }, previous: None }
    }

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
}

/// Any one piece of work, of whichever kind: what a task id resolves to,
/// once, at the edge; everything after is generic.
#[derive(Debug, Clone)]
pub enum Any {
    Workflow(Box<MiningWorkflow>),
    Run(Box<ToolRun>),
}

/// Runs `$body` with `$work` bound to the work of whichever kind `$any` holds.
#[macro_export]
macro_rules! each_kind {
    ($any:expr, $work:ident => $body:expr) => {
        match $any {
            $crate::core::Any::Workflow($work) => $body,
            $crate::core::Any::Run($work) => $body,
        }
    };
}

impl From<Box<MiningWorkflow>> for Any {
    fn from(work: Box<MiningWorkflow>) -> Self {
        Self::Workflow(work)
    }
}

impl From<Box<ToolRun>> for Any {
    fn from(work: Box<ToolRun>) -> Self {
        Self::Run(work)
    }
}

impl Any {
    pub fn name(&self) -> &str {
        each_kind!(self, work => work.metadata.name.as_deref().unwrap_or_default())
    }
}

impl Core {
    /// The caller's work behind a task id, of whichever kind, resolved once:
    /// every kind's cache first (memory only), then the API server for the
    /// kinds whose cache does not hold the name yet. A name is unique only
    /// within a kind, so another's object of one kind under the caller's id
    /// hides nothing of the caller's own.
    pub async fn resolve(&self, caller: &Caller, id_text: &str) -> Result<View<Any>, String> {
        let Some(id) = WorkflowId::parse_for(&self.keys, caller, id_text) else { return Ok(View::Missing) };
        let name = id.as_str();
        let workflow = self.cached::<MiningWorkflow>(caller, name).map(View::into_any);
        let run = self.cached::<ToolRun>(caller, name).map(View::into_any);
        let unseen = (workflow.is_none(), run.is_none());
        if let Some(view) = [workflow, run].into_iter().flatten().find(|view| !matches!(view, View::Missing))
        {
            return Ok(view);
        }
        if unseen.0 {
            let view = self.fetched::<MiningWorkflow>(caller, name).await?.into_any();
            if !matches!(view, View::Missing) {
                return Ok(view);
            }
        }
        if unseen.1 {
            return Ok(self.fetched::<ToolRun>(caller, name).await?.into_any());
        }
        Ok(View::Missing)
    }

    /// Waits for `work` of whichever kind (see [`Core::wait`]).
    pub async fn wait_any(
        &self,
        caller: &Caller,
        work: Any,
        deadline: tokio::time::Instant,
        listener: &mut impl super::WaitListener,
    ) -> View<Any> {
        each_kind!(work, work => self.wait(caller, work, deadline, listener).await.into_any())
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
        match K::homes(self).holding(&name).cache.get(&name) {
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
        each_kind!(latest, work => self.refresh(caller, work, seen_in_cache))
    }

    /// Interest in the changes of `work` (of whichever kind), from its watch.
    pub fn subscribe_any(&self, work: &Any) -> Subscription<'_> {
        fn subscribe<'a, K: Served>(core: &'a Core, work: &K) -> Subscription<'a> {
            let name = work.meta().name.as_deref().unwrap_or_default();
            K::homes(core).holding(name).cache.subscribe(name)
        }
        each_kind!(work, work => subscribe(self, &**work))
    }
}
