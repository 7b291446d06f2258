//! One watch of the namespace's MCP-started MiningWorkflows (and one of its
//! ToolRuns), shared by every request: tools read from its store, and
//! waiting callers are woken by its events — no watch per request, no
//! polling, no API read per poll.
//!
//! Objects are cached untyped and read into their type on use, so an
//! object the Rust types cannot hold (a value the schema allows but a field
//! cannot, a hand-edited status) is answered with a clear error for that one
//! object instead of failing the list that every other object needs.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::{MiningWorkflow, ToolRun, labels};
use tokio::sync::watch;

use crate::metrics::Metrics;

/// A kind the frontend caches: MCP-started objects with a caller label.
pub trait Kind: mining_api::Work {
    /// Why its stored status could not be read, when it could not.
    fn unreadable(&self) -> Option<String>;

    /// The defined tool it is a run of, if it is one (whose grant every
    /// call about it needs, when the tool is restricted).
    fn defined_tool(&self) -> Option<&str> {
        None
    }
}

/// What the cache knows of one name.
#[derive(Debug, Clone)]
pub enum Entry<K> {
    /// Not in the cache (never created, deleted, or not seen yet).
    Missing,
    /// There, but not readable as its type; the text says why.
    Unreadable {
        caller_label: Option<String>,
        problem: String,
    },
    Found(Box<K>),
}

/// A cached workflow.
pub type Cached = Entry<MiningWorkflow>;
/// The workflow namespace's MCP workflows.
pub type WorkflowCache = ObjectCache<MiningWorkflow>;
/// The workflow namespace's tool runs.
pub type RunCache = ObjectCache<ToolRun>;

pub struct ObjectCache<K> {
    store: Store<DynamicObject>,
    resource: ApiResource,
    namespace: String,
    ready: AtomicBool,
    waiters: Waiters,
    metrics: Arc<Metrics>,
    kind: PhantomData<fn() -> K>,
}

/// One sender per name somebody waits on; woken on that name's events.
struct Waiters {
    senders: Mutex<HashMap<String, watch::Sender<()>>>,
    metrics: Arc<Metrics>,
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<()>>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.senders.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A caller's interest in one object (of any kind); dropping it unregisters it.
pub struct Subscription<'a> {
    waiters: &'a Waiters,
    name: String,
    receiver: Option<watch::Receiver<()>>,
}

impl Subscription<'_> {
    /// Resolves at the next event for this workflow (or a re-list).
    pub async fn changed(&mut self) {
        if let Some(receiver) = self.receiver.as_mut()
            && receiver.changed().await.is_err()
        {
            // The cache is gone (shutting down): never wake again.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        drop(self.receiver.take());
        let mut waiters = self.waiters.lock();
        if waiters.get(&self.name).is_some_and(|sender| sender.receiver_count() == 0) {
            waiters.remove(&self.name);
        }
        self.waiters.metrics.waiters.dec();
    }
}

impl<K: Kind> ObjectCache<K> {
    /// The cache and the future that keeps it filled (run it on a task).
    pub fn new(
        client: kube::Client,
        namespace: &str,
        metrics: Arc<Metrics>,
    ) -> (Arc<Self>, impl std::future::Future<Output = ()> + Send + 'static) {
        let resource = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let cache = Arc::new(Self {
            store,
            resource: resource.clone(),
            namespace: namespace.to_string(),
            ready: AtomicBool::new(false),
            waiters: Waiters { senders: Mutex::new(HashMap::new()), metrics: metrics.clone() },
            metrics,
            kind: PhantomData,
        });
        // Only workflows started through MCP carry the caller label.
        // Paged: anyone may pad a workflow's metadata, so no list is held whole.
        let config = watcher::Config::default().labels(labels::CALLER).page_size(50);
        let runner = cache.clone();
        let run = async move {
            // The cache keeps only what the tools read: one trimmed copy per
            // workflow, shared by every reader and waiter.
            let watched = watcher(api, config).default_backoff().modify(|object: &mut DynamicObject| {
                mining_api::trim_for_cache(&mut object.metadata);
            });
            let events = reflector::reflector(writer, watched);
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => runner.on_event(event),
                    Err(err) => {
                        runner.metrics.watch_errors.inc();
                        tracing::warn!(error = %err, kind = K::NOUN, "watching failed; retrying");
                    }
                }
            }
        };
        (cache, run)
    }

    fn on_event(&self, event: watcher::Event<DynamicObject>) {
        self.metrics.watch_events.inc();
        match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                if let Some(name) = object.metadata.name.as_deref() {
                    self.wake(name);
                }
            }
            watcher::Event::InitDone => {
                self.ready.store(true, Ordering::Release);
                // After a re-list anything may have changed or gone.
                self.wake_all();
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }

    fn wake(&self, name: &str) {
        if let Some(sender) = self.waiters.lock().get(name) {
            sender.send_replace(());
        }
    }

    fn wake_all(&self) {
        for sender in self.waiters.lock().values() {
            sender.send_replace(());
        }
    }

    /// Registers interest in `name` before reading it, so no change between
    /// the read and the wait is missed.
    pub fn subscribe(&self, name: &str) -> Subscription<'_> {
        let receiver =
            self.waiters.lock().entry(name.to_string()).or_insert_with(|| watch::channel(()).0).subscribe();
        self.metrics.waiters.inc();
        Subscription { waiters: &self.waiters, name: name.to_string(), receiver: Some(receiver) }
    }

    /// The namespace this cache watches.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// True once the first list has completed.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn get(&self, name: &str) -> Entry<K> {
        let key = ObjectRef::new_with(name, self.resource.clone()).within(&self.namespace);
        match self.store.get(&key) {
            None => Entry::Missing,
            Some(object) => read(&object),
        }
    }

    /// Every cached object.
    pub fn all(&self) -> Vec<Entry<K>> {
        self.store.state().iter().map(|object| read(object)).collect()
    }

    /// Every cached object carrying `caller_label`.
    pub fn list_for(&self, caller_label: &str) -> Vec<Entry<K>> {
        self.store
            .state()
            .iter()
            .filter(|object| caller_label_of(object) == Some(caller_label))
            .map(|object| read(object))
            .collect()
    }

    /// How many cached objects carry `caller_label`, and match `counted`.
    pub fn count_for(&self, caller_label: &str, counted: impl Fn(&K) -> bool) -> usize {
        self.list_for(caller_label)
            .into_iter()
            .filter(|entry| matches!(entry, Entry::Found(object) if counted(object)))
            .count()
    }
}

fn caller_label_of(object: &DynamicObject) -> Option<&str> {
    object.metadata.labels.as_ref()?.get(labels::CALLER).map(String::as_str)
}

/// Reads a cached object as a MiningWorkflow, or says why it cannot be.
pub fn read_workflow(object: &DynamicObject) -> Cached {
    read(object)
}

/// Reads a cached object as its kind, or says why it cannot be.
pub fn read<K: Kind>(object: &DynamicObject) -> Entry<K> {
    let parsed = serde_json::to_value(object).and_then(serde_json::from_value::<K>);
    match parsed {
        Ok(found) => match found.unreadable() {
            Some(problem) => {
                Entry::Unreadable { caller_label: caller_label_of(object).map(str::to_string), problem }
            }
            None => Entry::Found(Box::new(found)),
        },
        Err(err) => Entry::Unreadable {
            caller_label: caller_label_of(object).map(str::to_string),
            problem: format!("the stored {} cannot be read: {err}", K::NOUN),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_readable_object_is_found() {
        let cached = read_workflow(&object(json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
            "metadata": {"name": "w", "labels": {labels::CALLER: "abc"}},
            "spec": {"difficulty": 8, "blocks": 2},
            "status": {"phase": "Mining", "currentBlock": 1},
        })));
        let Cached::Found(workflow) = cached else { panic!("{cached:?}") };
        assert_eq!(workflow.spec.blocks, 2);
    }

    #[test]
    fn a_status_wider_than_the_rust_type_is_unreadable_not_fatal() {
        let cached = read_workflow(&object(json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
            "metadata": {"name": "w", "labels": {labels::CALLER: "abc"}},
            "spec": {"difficulty": 8},
            "status": {"currentBlock": 99_999_999_999u64, "phase": "Bogus"},
        })));
        let Cached::Unreadable { caller_label, problem } = cached else { panic!("{cached:?}") };
        assert_eq!(caller_label.as_deref(), Some("abc"));
        assert!(problem.starts_with("the stored status cannot be read"), "{problem}");
    }
}
