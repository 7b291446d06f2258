//! Starting the operator: leadership, the one Pod watch, the one queue,
//! and every registered kind's controller under them.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::labels;
use mining_api::ownership::OwnershipKeys;
use tracing::warn;

use super::readiness::Readiness;
use super::shell::run_kind;
use super::{MANAGER, OutputsShared, Shared, Shell, WorkKind};
use crate::config::Config;
use crate::leader::{self, Leadership};
use crate::memory::Memory;
use crate::metrics::Metrics;
use crate::parties::Parties;
use crate::queue::{Kinds, WorkQueue};

/// Objects per page of the Pod list: at most this many of whatever size
/// anyone made (up to 1.5 MiB each) are held at once before they are projected.
const POD_PAGE_SIZE: u32 = 5;

/// A registered kind's controller, started once the queue exists.
pub type Start = Box<dyn FnOnce(Shared) -> BoxFuture<'static, ()> + Send>;

/// Every kind of work, registered before the queue is built: its cache
/// joins the queue and readiness, its controller starts with the rest.
pub struct Registry {
    kinds: Kinds,
    readiness: Arc<Readiness>,
    starts: Vec<Start>,
}

impl Registry {
    pub fn new(readiness: Arc<Readiness>) -> Self {
        Self { kinds: Kinds::default(), readiness, starts: Vec::new() }
    }

    /// Adds kind `K`, whose own settings `context` makes once the shared
    /// parts exist. Everything else about it — its watches, its place in
    /// the queue and in readiness, its reconcile's shell — follows from `K`.
    pub fn register<K: WorkKind>(&mut self, context: impl FnOnce(&Shared) -> K::Context + Send + 'static) {
        crate::api_calls::count_work_resource(&K::plural(&()));
        let (store, writer) = reflector::store::<K>();
        let (jobs, job_writer) = reflector::store::<Job>();
        let (wake, woken) = futures::channel::mpsc::unbounded();
        self.kinds.register(store.clone(), wake, K::PROVEN);
        let listed = (self.readiness.register(K::NOUN), self.readiness.register(format!("{} Jobs", K::NOUN)));
        self.starts.push(Box::new(move |shared: Shared| {
            Box::pin(async move {
                let kind = context(&shared);
                run_kind(Shell::new(shared, store, jobs, kind), writer, job_writer, woken, listed).await;
            })
        }));
    }

    /// The kinds registered, for the queue; and their controllers' starts.
    pub fn into_parts(self) -> (Kinds, Vec<Start>) {
        (self.kinds, self.starts)
    }
}

/// Runs the operator until a shutdown signal: every kind `register` adds.
pub async fn run(
    client: Client,
    config: Config,
    keys: Option<OwnershipKeys>,
    outputs: Option<Arc<crate::outputs::Outputs>>,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    register: impl FnOnce(&mut Registry),
) {
    let (changes, mut changed) = tokio::sync::mpsc::unbounded_channel();
    let (leadership, election) = if config.election.enabled {
        let on_change = move |leading| {
            let _ = changes.send(leading);
        };
        match leader::start(client.clone(), &config.election, config.namespace.as_deref(), on_change).await {
            Ok((leadership, handle)) => (leadership, Some(handle)),
            Err(err) => {
                // Reconciling without the lease could race another leader: never do that.
                warn!(error = %err, "cannot take part in leader election; not reconciling");
                return;
            }
        }
    } else {
        metrics.leader.set(1);
        if outputs.is_some() {
            tokio::spawn(crate::outputs::mark_leader_pod(client.clone(), true));
        }
        (Leadership::alone(), None)
    };
    let readiness = Readiness::new(ready);
    let mut registry = Registry::new(readiness.clone());
    register(&mut registry);
    let (kinds, starts) = registry.into_parts();
    let (pods, blocked_jobs) = watch_pods(&client, config.namespace.as_deref(), &metrics);
    let memory = Arc::new(Memory::default());
    let queue = Arc::new(
        WorkQueue::new(kinds, Parties::new(keys.clone()), memory.clone(), config.limits.budget())
            .reporting_to(metrics.clone()),
    );
    let shares_reporter = tokio::spawn(queue.clone().report_shares());
    let shared = Shared {
        client: client.clone(),
        keys,
        leadership,
        metrics: metrics.clone(),
        queue: queue.clone(),
        memory: memory.clone(),
        readiness,
        instance: std::env::var("POD_NAME").unwrap_or_else(|_| MANAGER.into()),
        namespace: config.namespace.clone(),
        default_ttl_seconds: config.limits.default_ttl_seconds,
        pod_start_timeout: config.limits.pod_start_timeout(),
        pods,
        blocked_jobs,
        queue_name: config.job.queue_name.clone(),
        outputs: outputs.map(|store| OutputsShared {
            store,
            url: config.outputs.url.clone().unwrap_or_default(),
            addr: config.outputs.addr,
            own_disk: config.outputs.store.as_deref().is_some_and(|url| url.starts_with("file://"))
                && !config.outputs.shared_volume,
        }),
    };
    let with_outputs = shared.outputs.is_some();
    // A new term starts from the API's state, not from what this replica
    // wrote in an earlier one, and looks at every piece of work: a standby
    // waits for this wake instead of polling.
    tokio::spawn(async move {
        while let Some(leading) = changed.recv().await {
            metrics.leader.set(i64::from(leading));
            if with_outputs {
                tokio::spawn(crate::outputs::mark_leader_pod(client.clone(), leading));
            }
            memory.clear();
            if leading {
                queue.wake_all();
            }
        }
    });
    // Each stops on the shutdown signal.
    futures::future::join_all(starts.into_iter().map(|start| tokio::spawn(start(shared.clone())))).await;
    shares_reporter.abort();
    if let Some(election) = election {
        election.step_down().await;
    }
}

/// The one Pod watch (every Pod with our label, projected): a kind reads
/// its Jobs' Pods there before asking the API server, and a Pod that says
/// it cannot start wakes its Job's owner (`pod_start`) — a Job's own status
/// says only when it finished.
fn watch_pods(
    client: &Client,
    namespace: Option<&str>,
    metrics: &Arc<Metrics>,
) -> (reflector::Store<Pod>, crate::work::pod_start::BlockedJobs) {
    let api: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let managed = format!("{}={MANAGER}", labels::MANAGED_BY);
    let (store, writer) = reflector::store::<Pod>();
    let metrics = metrics.clone();
    let events = watcher(api, watcher::Config::default().labels(&managed).page_size(POD_PAGE_SIZE))
        .default_backoff()
        .modify(move |pod| {
            metrics.saw("pods");
            crate::projection::project_pod(pod)
        })
        .reflect(writer);
    let (blocked_jobs, _) = tokio::sync::broadcast::channel(crate::work::pod_start::BLOCKED_JOBS_BACKLOG);
    let sighted = blocked_jobs.clone();
    tokio::spawn(events.for_each(move |event| {
        if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = &event
            && let Some(job) = crate::work::pod_start::blocked_job(pod)
        {
            let _ = sighted.send(job);
        }
        std::future::ready(())
    }));
    (store, blocked_jobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mining_api::{MiningWorkflow, ToolRun, Work as _};

    /// A kind registered is waited for: its own watch and its Jobs' both
    /// join readiness, so no reconcile (and no admission) runs before a
    /// new kind's cache is complete; and its calls are counted by name.
    /// (Its place in the queue is `third_kind.rs`'s, on a real cluster.)
    #[test]
    fn a_registered_kind_joins_readiness_and_the_queue() {
        let readiness = Readiness::new(Arc::default());
        let mut registry = Registry::new(readiness.clone());
        registry.register::<MiningWorkflow>(|_| crate::mining::Context {
            config: <Config as clap::Parser>::parse_from(["operator"]),
        });
        registry.register::<ToolRun>(|_| Default::default());
        let mut listing = readiness.listing();
        listing.sort();
        assert_eq!(listing, ["tool run", "tool run Jobs", "workflow", "workflow Jobs"]);
        assert!(!readiness.all_listed());
        let (_, starts) = registry.into_parts();
        assert_eq!(starts.len(), 2, "one controller a kind");
        let path = "/apis/mining-operator.dev/v1alpha1/namespaces/a/toolruns/r/status";
        let call = crate::api_calls::classify(&http::Method::PATCH, path, None);
        assert_eq!(call.resource, "toolruns/status", "{}", ToolRun::NOUN);
    }
}
