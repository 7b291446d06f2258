//! The kinds of work the operator runs beside workflows (whose controller
//! is `controller.rs`'s own, the first kind): each is registered here with
//! the one queue, then started under the same leadership with what every
//! kind shares. This is the one place a kind is added; its module (observe,
//! plan, Job building) goes under `kinds/` with a `mod` line below. Tool
//! runs came before this registry and live in [`crate::tools`].

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::reflector::{self, Store};
use mining_api::ToolRun;
use mining_api::ownership::OwnershipKeys;

use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::queue::{Kinds, Proven, WorkQueue};

/// What every kind's controller shares.
#[derive(Clone)]
pub struct Shared {
    pub client: Client,
    /// The frontend's key: work it proved is its caller's.
    pub keys: Option<OwnershipKeys>,
    pub leadership: Leadership,
    pub metrics: Arc<Metrics>,
    /// The one queue every kind waits in.
    pub queue: Arc<WorkQueue>,
    /// `reportingInstance` of the Events.
    pub instance: String,
    /// The namespace watched (all when `None`).
    pub namespace: Option<String>,
    /// Retention of finished work that sets none.
    pub default_ttl_seconds: u64,
    /// How long work waits for Pods that cannot start yet (`--pod-start-timeout-seconds`).
    pub pod_start_timeout: std::time::Duration,
    /// Every Pod with our label, projected ([`crate::projection::project_pod`]):
    /// what a kind's Pods said is read here before asking the API server.
    pub pods: Store<Pod>,
    /// Jobs whose Pods cannot start, as the Pod watch sees them (`crate::pod_start`).
    pub blocked_jobs: crate::pod_start::BlockedJobs,
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
}

/// How often files no run keeps are looked for.
const OUTPUTS_SWEEP: std::time::Duration = std::time::Duration::from_secs(60);

/// A kind registered with the queue, to be started once the queue exists.
pub type Start = Box<dyn FnOnce(Shared) -> BoxFuture<'static, ()> + Send>;

/// Registers every kind besides workflows with the queue's `kinds`; start
/// each returned controller on a task once the queue is built.
pub fn register(kinds: &mut Kinds) -> Vec<Start> {
    vec![tool_runs(kinds)]
}

/// Tool runs: only those the frontend proved run, so only they queue.
fn tool_runs(kinds: &mut Kinds) -> Start {
    let (store, writer) = reflector::store::<ToolRun>();
    let (wake, woken) = futures::channel::mpsc::unbounded();
    kinds.register(store.clone(), wake, Proven::Only);
    Box::new(move |shared: Shared| {
        Box::pin(async move {
            let (jobs, job_writer) = reflector::store::<Job>();
            let jobs_for_wakes = jobs.clone();
            let context = crate::tools::ToolContext {
                client: shared.client,
                keys: shared.keys,
                leadership: shared.leadership,
                default_ttl_seconds: shared.default_ttl_seconds,
                pod_start_timeout: shared.pod_start_timeout,
                metrics: shared.metrics,
                queue: shared.queue,
                instance: shared.instance,
                jobs,
                pods: shared.pods,
                queue_name: shared.queue_name,
                read_live: Default::default(),
                outputs: shared.outputs.clone(),
            };
            if let (Some(outputs), Some(keys)) = (shared.outputs, context.keys.clone()) {
                let served = crate::outputs::serve(outputs.addr, outputs.store.clone(), keys, store.clone());
                tokio::spawn(async move {
                    if let Err(err) = served.await {
                        tracing::error!(error = %err, "the outputs server stopped");
                    }
                });
                tokio::spawn(crate::outputs::sweep_every(
                    outputs.store,
                    store.clone(),
                    shared.namespace.clone(),
                    context.leadership.clone(),
                    OUTPUTS_SWEEP,
                ));
            }
            let blocked =
                crate::pod_start::owners_of_blocked::<ToolRun>(&shared.blocked_jobs, jobs_for_wakes);
            let woken = futures::stream::select(woken, blocked);
            crate::tools::run(shared.namespace.as_deref(), context, (store, writer), job_writer, woken).await;
        })
    })
}
