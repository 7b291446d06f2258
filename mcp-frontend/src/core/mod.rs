//! The one core behind the three protocol faces (the rmcp tools, the
//! 2025-11-25 task layer and the 2026-07-28 Tasks extension).
//!
//! Every behaviour lives here once: which workflows a caller may see, how a
//! start is checked and made idempotent, how a wait ends, how a cancel is
//! asked for, how a caller's workflows are listed, and the metrics of each.
//! The faces only translate their protocol to and from these calls.

mod answer;
mod cancel;
mod held;
mod kinds;
mod list;
mod reprove;
mod respond;
mod served;
pub(crate) mod start;
mod start_run;
mod wait;

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use mining_api::{MiningLedger, MiningWorkflow};
use rmcp::model::Tool;

use crate::cache::Entry;
use crate::ids::{Caller, WorkId};
use crate::kube_calls;
use crate::metrics::{Metrics, ReasonLabels, ToolLabels, ToolNameLabels};
use crate::operator_presence::{OperatorWatch, Presence};
use crate::ownership::OwnershipKeys;
use crate::quota::Quotas;
use crate::tool_runs::access::Denied;
use crate::tools::Limits;

pub use crate::slots::{OwnedWaitSlot, WaitCap, WaitSlots};
pub use answer::Answer;
pub use cancel::CancelOutcome;
pub use kinds::{Any, Home, Homes, KindId, Kinds, Registered, Starter};
pub use list::Listed;
pub use respond::{RespondError, Responded};
pub use served::{Refreshed, Served};
pub use start::{IDEMPOTENCY_META_KEY, StartOptions, Started};
pub use wait::{Unattended, WaitListener};

/// Shared by every request of every protocol face.
pub struct Core {
    pub limits: Limits,
    /// Per-caller quotas, kept exact across replicas by a ledger each.
    pub quotas: Quotas,
    /// The quota ledgers, in the release namespace (`--ledger-namespace`).
    pub ledgers: Api<MiningLedger>,
    /// The workflow namespace (bound by ownership proofs).
    pub namespace: String,
    /// Where every kind of work lives: its watch caches and APIs.
    pub kinds: Kinds,
    pub metrics: Arc<Metrics>,
    pub tools: Vec<Tool>,
    /// The secret behind ownership proofs and id tags.
    pub keys: Arc<OwnershipKeys>,
    /// The operator's retention of finished workflows that set none (a task's `ttl`).
    pub default_ttl_seconds: u64,
    /// Longest a 2025-11-25 `tasks/result` waits before asking the client to call again.
    pub task_result_wait: Duration,
    /// Tasks per 2025-11-25 `tasks/list` page.
    pub task_list_page_size: usize,
    /// Concurrent waits of this replica, per caller and in total.
    pub waits: WaitSlots,
    /// Open `subscriptions/listen` streams of this replica, per caller and in total.
    pub listens: WaitSlots,
    /// Whether an operator leads, so unfinished work nobody does says so.
    pub operator: Arc<OperatorWatch>,
    /// The tools defined as McpTools in the workflow namespace.
    pub catalog: Arc<crate::tool_runs::catalog::ToolCatalog>,
    /// Who may call which defined tool.
    pub access: Arc<crate::tool_runs::access::ToolAccess>,
    /// Runs' files, read from the operator's outputs server (`--outputs-url`).
    pub files: Option<crate::run_files::RunFiles>,
}

/// What a caller may see of one piece of work.
pub enum View<K = MiningWorkflow> {
    /// Unknown, malformed, expired, or another caller's: all look the same.
    Missing,
    /// The caller's, but its stored state cannot be read; the text says why.
    Unreadable(String),
    /// The caller's, but a run of a restricted tool it is not granted (any
    /// longer); the text names the grant.
    NotGranted(String),
    Found(Box<K>),
}

impl<K> View<K> {
    /// The same view of the work as [`Any`] kind.
    pub fn into_any(self) -> View<Any>
    where
        Box<K>: Into<Any>,
    {
        match self {
            Self::Missing => View::Missing,
            Self::Unreadable(problem) => View::Unreadable(problem),
            Self::NotGranted(why) => View::NotGranted(why),
            Self::Found(work) => View::Found(Box::new(work.into())),
        }
    }
}

/// Whether `caller` started `work` (of any kind) through this frontend: its
/// caller label is the caller's and it carries the frontend's proof for
/// exactly that. A label alone is anyone's to write.
pub fn belongs_to<K: mining_api::Work>(keys: &OwnershipKeys, work: &K, caller: &Caller) -> bool {
    work.caller_label().is_some_and(|label| keys.caller_labels(&caller.digest).iter().any(|l| l == label))
        && keys.proves(work)
}

impl Core {
    /// The work of kind `K` behind `id_text` as this caller may see it: from
    /// the cache, else (for a name the watch has not delivered yet) one read
    /// from the API server. Ids that are malformed or not this caller's
    /// (their tag says so) are `Missing` without any lookup.
    pub async fn find<K: Served>(&self, caller: &Caller, id_text: &str) -> Result<View<K>, String> {
        let Some(id) = WorkId::parse_for(&self.keys, caller, id_text) else { return Ok(View::Missing) };
        let view = match self.cached::<K>(caller, id.as_str()) {
            Some(view) => view,
            None => self.fetched::<K>(caller, id.as_str()).await?,
        };
        self.granted(caller, view).await
    }

    /// `view`, or `NotGranted` when it is a run of a restricted tool its
    /// caller is not granted (any longer): every call about a run needs what
    /// calling its tool needs. A tool deleted since is restricted only when
    /// the install restricts every tool. `Err` when the grant cannot be
    /// checked now (the text says when to retry).
    pub(crate) async fn granted<K: crate::cache::Kind>(
        &self,
        caller: &Caller,
        view: View<K>,
    ) -> Result<View<K>, String> {
        let View::Found(work) = &view else { return Ok(view) };
        match self.grant_for(caller, work.defined_tool()).await {
            Ok(()) => Ok(view),
            Err(Denied::NotGranted(why)) => Ok(View::NotGranted(why)),
            Err(Denied::CannotCheck(why)) => Err(why),
        }
    }

    /// Whether `caller` holds what calling `tool` needs now (no tool: work
    /// of no defined tool needs nothing). Verdicts are remembered briefly by
    /// [`ToolAccess`](crate::tool_runs::access::ToolAccess).
    pub(crate) async fn grant_for(&self, caller: &Caller, tool: Option<&str>) -> Result<(), Denied> {
        let Some(tool) = tool else { return Ok(()) };
        let restricted = self.catalog.by_object(tool).is_some_and(|defined| defined.spec.restricted);
        self.access.check(caller, tool, restricted).await
    }

    /// `name` as the caller may see it in the caches of kind `K`; `None`
    /// when no cache holds it (yet).
    pub(crate) fn cached<K: Served>(&self, caller: &Caller, name: &str) -> Option<View<K>> {
        Some(match self.homes::<K>().holding(name).cache.get(name) {
            Entry::Found(work) if self.owns(&*work, caller) => View::Found(work),
            Entry::Found(_) => View::Missing,
            Entry::Unreadable { caller_label, problem }
                if caller_label.as_deref().is_some_and(|label| {
                    self.keys.caller_labels(&caller.digest).iter().any(|l| l == label)
                }) =>
            {
                View::Unreadable(problem)
            }
            Entry::Unreadable { .. } => View::Missing,
            Entry::Missing => return None,
        })
    }

    /// `name` of kind `K` as the caller may see it, read from the API
    /// server: the workflow namespace first, then where releases before it
    /// put work.
    pub(crate) async fn fetched<K: Served>(&self, caller: &Caller, name: &str) -> Result<View<K>, String> {
        let read = async {
            for home in self.homes::<K>().all() {
                if let Some(work) = kube_calls::get(home.api, name).await? {
                    return Ok(Some(work));
                }
            }
            Ok::<_, crate::Error>(None)
        };
        match self.api_call("get", read).await {
            Ok(Some(work)) if self.owns(&work, caller) => Ok(View::Found(Box::new(work))),
            Ok(_) => Ok(View::Missing),
            Err(err) => {
                self.count_api_error("get");
                Err(format!("cannot read the {}: {err}", K::NOUN))
            }
        }
    }

    /// What the operator's leader Lease says right now.
    pub fn operator_presence(&self) -> Presence {
        self.operator.presence()
    }

    /// Whether `caller` started `work` (a workflow or a tool run) through this frontend.
    pub fn owns<K: mining_api::Work>(&self, work: &K, caller: &Caller) -> bool {
        belongs_to(&self.keys, work, caller)
    }

    /// Makes one Kubernetes API call (`call` from a fixed set), counted.
    pub(crate) async fn api_call<T>(&self, call: &'static str, request: impl Future<Output = T>) -> T {
        self.metrics.api_requests.get_or_create(&ReasonLabels { reason: call }).inc();
        request.await
    }

    /// Counts one failed Kubernetes API call (`call` from a fixed set).
    pub(crate) fn count_api_error(&self, call: &'static str) {
        self.metrics.api_errors.get_or_create(&ReasonLabels { reason: call }).inc();
    }

    /// Counts one answered call of `tool` (and its duration, when timed).
    pub fn record_call(&self, tool: &'static str, outcome: &'static str, elapsed: Option<Duration>) {
        self.metrics.tool_calls.get_or_create(&ToolLabels { tool, outcome }).inc();
        if let Some(elapsed) = elapsed {
            self.metrics.tool_duration.get_or_create(&ToolNameLabels { tool }).observe(elapsed.as_secs_f64());
        }
    }
}
