//! The shell every kind of work runs in, as kueue's `jobframework` is for
//! its Jobs: one reconcile around a kind's own steps, so what every kind
//! needs is written once and a new kind cannot forget any of it.
//!
//! The shell owns: the watches (the kind's, trimmed and paged; its Jobs',
//! projected; one Pod watch for all), readiness over every registered
//! store, leadership, the status memory, one span per reconcile joined to
//! the caller's trace, counted API calls, one error policy, one status
//! write with one refusal policy, the queue protocol (what a change of
//! lifecycle means to the queue — no kind wakes or reorders it), Events,
//! and "a Job's own Pods", read a page at a time.
//!
//! A kind is a [`WorkKind`]: its Jobs' selector and projection, its span,
//! its status when the API server refuses one, and its reconcile (observe →
//! plan → apply) — registered in `kinds.rs` with one line.

mod events;
pub mod pod_start;
pub mod pods;
pub mod readiness;
mod run;
mod shell;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::core::object::HasStatus;
use kube::runtime::reflector::Store;
use mining_api::ownership::OwnershipKeys;
use mining_api::{Work, labels};

use crate::admission::Slots;
use crate::leader::Leadership;
use crate::memory::Memory;
use crate::metrics::Metrics;
use crate::queue::{Proven, WorkQueue};

pub use events::{PlannedEvent, build_event, publish_events};
pub use readiness::Readiness;
pub use run::{Registry, Start, run};
#[cfg(test)]
pub(crate) use shell::reconcile;
pub use shell::{Shell, Yielding, tell_forbidden};
pub use status::Recorded;

/// The field manager of everything this operator writes, and the
/// `managed-by` label value of what it creates.
pub const MANAGER: &str = "mining-operator";

/// How soon work whose status write met a newer version is planned again.
pub const REPLAN_AFTER: Duration = Duration::from_millis(200);

/// One kind of work the shell runs (see the module's doc).
pub trait WorkKind:
    Work
    + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
    + HasStatus<Status: Clone + serde::Serialize + Send + Sync + 'static>
{
    /// What the kind's reconciles share beyond the shell (its settings).
    type Context: Send + Sync + 'static;
    /// Reconciles at once: how much one holds decides it.
    const CONCURRENCY: u16;
    /// Objects per page of its list: at most this many of whatever size
    /// anyone made are held at once.
    const PAGE_SIZE: u32;
    /// Whether work nobody proved runs (and so holds a place in the queue).
    const PROVEN: Proven;

    /// The label selector of the Jobs its work owns.
    fn jobs_selector() -> String;

    /// What of its Jobs the cache keeps.
    fn project_job(job: &mut Job);

    /// The span of one reconcile, with an empty `trace_id` field the shell fills.
    fn span(&self) -> tracing::Span;

    /// Observe, plan, apply: one reconcile of one piece of work, as fresh as
    /// this operator's last status write.
    fn reconcile<'a>(&'a self, shell: &'a Shell<Self>) -> BoxFuture<'a, crate::Result<Outcome>>;

    /// The status that ends it when the API server refuses (for good) to
    /// store a planned one, and the note its Event carries.
    fn refused_status(&self, why: &str, now: Timestamp) -> (Self::Status, String);

    /// After every reconcile of this kind (its gauges).
    fn reconciled(_shell: &Shell<Self>) {}

    /// Once its controller starts (servers of its own).
    fn started(_shell: &Arc<Shell<Self>>) {}
}

/// What a kind's reconcile came to, for the shell to finish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Look again after this long (`None`: when something changes).
    pub requeue: Option<Duration>,
    /// The standing it was planned with, when it waited for a slot: the
    /// shell wakes whoever may take free slots, or reclaims one for it.
    pub waited: Option<Slots>,
}

impl Outcome {
    pub const AWAIT_CHANGE: Self = Self { requeue: None, waited: None };

    pub fn after(requeue: Duration) -> Self {
        Self { requeue: Some(requeue), waited: None }
    }

    /// The sooner of the planned look and `again`.
    pub fn sooner(mut self, again: Option<Duration>) -> Self {
        if let Some(again) = again {
            self.requeue = Some(self.requeue.map_or(again, |planned| planned.min(again)));
        }
        self
    }
}

/// What every kind's reconciles share.
#[derive(Clone)]
pub struct Shared {
    pub client: Client,
    /// The frontend's key: work it proved is its caller's.
    pub keys: Option<OwnershipKeys>,
    pub leadership: Leadership,
    pub metrics: Arc<Metrics>,
    /// The one queue every kind waits in.
    pub queue: Arc<WorkQueue>,
    /// What reconciles remember between them (the queue's own).
    pub memory: Arc<Memory>,
    /// Whether every registered watch has listed everything yet.
    pub readiness: Arc<Readiness>,
    /// `reportingInstance` of the Events.
    pub instance: String,
    /// The namespace watched (all when `None`).
    pub namespace: Option<String>,
    /// Retention of finished work that sets none.
    pub default_ttl_seconds: u64,
    /// How long work waits for Pods that cannot start yet (`--pod-start-timeout-seconds`).
    pub pod_start_timeout: Duration,
    /// Every Pod with our label, projected ([`crate::projection::project_pod`]):
    /// what a kind's Pods said is read here before asking the API server.
    pub pods: Store<Pod>,
    /// Jobs whose Pods cannot start, as the Pod watch sees them (`crate::work::pod_start`).
    pub blocked_jobs: crate::work::pod_start::BlockedJobs,
    /// The queue controller's LocalQueue every Job goes to (`--job-queue-name`).
    pub queue_name: Option<String>,
    /// Where runs' files go, when configured (`--outputs-store`).
    pub outputs: Option<OutputsShared>,
}

/// The outputs store and how tool Pods reach its server.
#[derive(Clone)]
pub struct OutputsShared {
    pub store: Arc<crate::outputs::Outputs>,
    /// The base URL tool Pods upload to (`--outputs-url`).
    pub url: String,
    /// Where the outputs server listens.
    pub addr: std::net::SocketAddr,
    /// The embedded store on a volume of each replica (copied between them:
    /// `crate::outputs::mirror`), not one they share (S3, one claim).
    pub own_disk: bool,
}

/// Puts `job` in the queue controller's LocalQueue `queue`, when there is one.
pub fn queue_job(job: &mut Job, queue: Option<&str>) {
    if let Some(queue) = queue {
        job.metadata.labels.get_or_insert_default().insert(labels::KUEUE_QUEUE_NAME.into(), queue.into());
    }
}

/// Whether `built` (a Job the operator built) was put in a queue
/// controller's queue: then suspension and scheduling are that controller's.
pub fn is_queued(built: &Job) -> bool {
    built.metadata.labels.as_ref().is_some_and(|l| l.contains_key(labels::KUEUE_QUEUE_NAME))
}
