//! The registry of the kinds of work the frontend serves: the one place a
//! kind is added. Each kind's watch cache and API are built here at start,
//! a task id resolves to [`Any`] of them, and the core's every-kind calls
//! (resolve, list, re-prove, readiness, quota) go over [`KindId::ALL`].
//! What a kind means to its caller ([`super::Served`]) lives with the kind.
//!
//! A kind is added with one line in each of [`KindId`], [`with_kind!`],
//! [`Any`], [`each_kind!`], [`Kinds`] and [`Kinds::start`], its
//! [`Registered`] impl, and (for a kind a call starts that no defined tool
//! does) a [`Starter`] — all below.

use std::sync::Arc;

use futures::future::BoxFuture;
use kube::api::Api;
use mining_api::{MiningWorkflow, ToolRun};

use rmcp::model::JsonObject;

use super::{Answer, Core, StartOptions};
use crate::cache::{Entry, Kind, ObjectCache};
use crate::ids::Caller;
use crate::metrics::Metrics;
use crate::tool_runs::catalog::DefinedTool;

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

    /// Whether every place's cache has synced.
    pub fn ready(&self) -> bool {
        self.all().all(|home| home.cache.is_ready())
    }
}

/// One place of one kind, owned by the registry.
pub struct Place<K> {
    pub api: Api<K>,
    pub cache: Arc<ObjectCache<K>>,
}

/// Where one kind's objects are kept: the workflow namespace, and for a kind
/// an earlier release kept elsewhere, that namespace too.
pub struct Places<K> {
    pub current: Place<K>,
    pub previous: Option<Place<K>>,
}

/// Whether a kind is still looked for where releases before the workflow
/// namespace put it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Current,
    AlsoPrevious,
}

impl<K: Kind> Places<K> {
    /// The places of `K` and the futures that keep their caches filled.
    fn start(
        client: &kube::Client,
        namespaces: (&str, Option<&str>),
        reach: Reach,
        metrics: &Arc<Metrics>,
        tasks: &mut Vec<BoxFuture<'static, ()>>,
    ) -> Self
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        let mut place = |namespace: &str| {
            let (cache, fill) = ObjectCache::new(client.clone(), namespace, metrics.clone());
            tasks.push(Box::pin(fill));
            Place { api: Api::namespaced(client.clone(), namespace), cache }
        };
        let current = place(namespaces.0);
        let previous =
            namespaces.1.filter(|previous| reach == Reach::AlsoPrevious && *previous != namespaces.0);
        Self { current, previous: previous.map(place) }
    }

    pub fn homes(&self) -> Homes<'_, K> {
        fn home<K>(place: &Place<K>) -> Home<'_, K> {
            Home { api: &place.api, cache: &place.cache }
        }
        Homes { current: home(&self.current), previous: self.previous.as_ref().map(home) }
    }
}

/// A kind in the registry: where the core finds its places.
pub trait Registered: Kind {
    const ID: KindId;
    /// Where its idempotency attempts start: one key names a different id
    /// for each kind, so no kind's retry finds another's work. Frozen per
    /// kind (ids made by earlier releases are still found); a new kind takes
    /// a range no other kind's [`super::start::IDEMPOTENT_ATTEMPTS`] reach.
    const FIRST_ATTEMPT: u8;

    fn places(kinds: &Kinds) -> &Places<Self>;
}

/// Every registered kind's places.
pub struct Kinds {
    workflows: Places<MiningWorkflow>,
    runs: Places<ToolRun>,
}

impl Registered for MiningWorkflow {
    const ID: KindId = KindId::Workflow;
    const FIRST_ATTEMPT: u8 = 0;

    fn places(kinds: &Kinds) -> &Places<Self> {
        &kinds.workflows
    }
}

impl Registered for ToolRun {
    const ID: KindId = KindId::Run;
    const FIRST_ATTEMPT: u8 = 128;

    fn places(kinds: &Kinds) -> &Places<Self> {
        &kinds.runs
    }
}

impl Kinds {
    /// Every kind's caches in `namespace` (and, for the kinds that reach
    /// it, in `previous`), and the futures that keep them filled (run each
    /// on a task).
    pub fn start(
        client: &kube::Client,
        namespace: &str,
        previous: Option<&str>,
        metrics: &Arc<Metrics>,
    ) -> (Self, Vec<BoxFuture<'static, ()>>) {
        let mut tasks = Vec::new();
        let namespaces = (namespace, previous);
        let kinds = Self {
            workflows: Places::start(client, namespaces, Reach::AlsoPrevious, metrics, &mut tasks),
            runs: Places::start(client, namespaces, Reach::Current, metrics, &mut tasks),
        };
        (kinds, tasks)
    }

    /// The places of kind `K`.
    pub fn of<K: Registered>(&self) -> &Places<K> {
        K::places(self)
    }

    /// The first kind whose caches have not synced yet, if any (its noun).
    pub fn unsynced(&self) -> Option<&'static str> {
        KindId::ALL.into_iter().find_map(|id| {
            crate::with_kind!(id, K => (!self.of::<K>().homes().ready()).then_some(<K as mining_api::Work>::NOUN))
        })
    }
}

/// Names a registered kind, so the core can go over every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindId {
    Workflow,
    Run,
}

impl KindId {
    /// Every registered kind, in the order lookups try them.
    pub const ALL: [Self; 2] = [Self::Workflow, Self::Run];
}

/// Runs `$body` with the type `$kind` standing for the kind `$id` names.
#[macro_export]
macro_rules! with_kind {
    ($id:expr, $kind:ident => $body:expr) => {
        match $id {
            $crate::core::KindId::Workflow => {
                type $kind = mining_api::MiningWorkflow;
                $body
            }
            $crate::core::KindId::Run => {
                type $kind = mining_api::ToolRun;
                $body
            }
        }
    };
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

/// What a call starts, of whichever kind: what a tool name stands for when
/// the call makes work (looked up once, `faces::called`).
#[derive(Clone, Copy)]
pub enum Starter<'a> {
    /// `start_mining`: a workflow.
    Mining,
    /// A tool an `McpTool` defines: a run of it.
    Defined { name: &'a str, tool: &'a DefinedTool },
}

impl Core {
    /// Starts the work `starter` names, of whichever kind: the one way every
    /// face makes work from a call. The error is the answer.
    pub async fn start_any(
        &self,
        caller: &Caller,
        starter: Starter<'_>,
        arguments: Option<JsonObject>,
        options: StartOptions<'_>,
    ) -> Result<Any, Answer> {
        match starter {
            Starter::Mining => {
                self.start(caller, arguments, options).await.map(|started| started.workflow.into())
            }
            Starter::Defined { name, tool } => {
                self.start_run(caller, name, tool, arguments, options).await.map(Any::from)
            }
        }
    }

    /// Where the objects of kind `K` live.
    pub fn homes<K: Registered>(&self) -> Homes<'_, K> {
        self.kinds.of::<K>().homes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No two kinds' idempotency ids can be the same: their attempt ranges
    /// never overlap, and each kind in the registry says its own.
    #[test]
    fn every_kinds_idempotency_ids_are_its_own() {
        let attempts = super::super::start::IDEMPOTENT_ATTEMPTS;
        let ranges: Vec<(KindId, std::ops::Range<u16>)> = KindId::ALL
            .into_iter()
            .map(|id| {
                let first = u16::from(crate::with_kind!(id, K => <K as Registered>::FIRST_ATTEMPT));
                (id, first..first + u16::from(attempts))
            })
            .collect();
        for (i, (a, range_a)) in ranges.iter().enumerate() {
            assert!(range_a.end <= 256, "{a:?}'s attempts fit in a byte");
            for (b, range_b) in &ranges[i + 1..] {
                let overlap = range_a.start < range_b.end && range_b.start < range_a.end;
                assert!(!overlap, "{a:?} {range_a:?} and {b:?} {range_b:?} would share ids");
            }
        }
        assert_eq!(ranges.len(), KindId::ALL.len());
    }
}
