//! The agent loop: one task owns all pod bookkeeping; each running Pod has a
//! task of its own that runs its containers and reports their status.
//!
//! Scheduling: a Pod with no `nodeName` (and the default scheduler) is bound
//! to this node while fewer than `max_pods` of ours are running; the rest wait,
//! highest `spec.priority` first, then oldest, as kube-scheduler's queue sorts
//! them, each marked `PodScheduled=False` (`Unschedulable`, "Too many pods")
//! as kube-scheduler marks a Pod no node has room for. When the node is full and the first waiting Pod outranks a running
//! one, the lowest-priority, youngest running Pod is deleted (with its grace
//! period) to make room: kube-scheduler's preemption, one victim at a time,
//! never for a Pod whose `preemptionPolicy` is `Never` (it waits, first).
//! Deletion: a Pod with a `deletionTimestamp` gets SIGTERM on its
//! process groups, SIGKILL after its grace period (at most 30 s), and is then
//! removed with grace 0, which is the kubelet's part of a deletion.
//! Restart: the agent cannot wait on processes a previous incarnation started,
//! so a started, unfinished Pod it finds at start-up is killed and marked
//! Failed (reason NodeAgentRestarted) rather than left Running forever; its
//! Job then replaces it like any failed Pod.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    Binding, ContainerState, ContainerStateTerminated, ContainerStatus, ObjectReference, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::Config;
use crate::network::PodIps;
use crate::runner::PodRunner;

pub const MAX_GRACE: Duration = Duration::from_secs(30);

struct PodHandle {
    /// Sends the grace period to stop with.
    stop: watch::Sender<Option<Duration>>,
    /// Its `spec.priority`, which preemption compares.
    priority: i32,
    /// When this incarnation started it: among equals the youngest goes first.
    started: std::time::Instant,
    namespace: String,
    name: String,
}

/// An unbound Pod waiting for a slot. Sorts as kube-scheduler's queue does:
/// higher priority first, then older.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Queued {
    rank: std::cmp::Reverse<i32>,
    created: Option<Timestamp>,
    namespace: String,
    name: String,
    /// Its `preemptionPolicy` is not `Never`.
    preempts: bool,
}

impl Queued {
    fn priority(&self) -> i32 {
        self.rank.0
    }
}

/// A Pod's resolved priority (the Priority admission plugin sets it from
/// `priorityClassName`); 0 when unset, as the scheduler reads it.
fn priority_of(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

struct Agent {
    client: kube::Client,
    config: Config,
    /// Pods whose processes this incarnation runs, by uid.
    running: HashMap<String, PodHandle>,
    /// Pods this incarnation ran to the end (events about them may still be in flight).
    finished: HashSet<String>,
    /// Unbound pods waiting for a free slot, by uid.
    unscheduled: HashMap<String, Queued>,
    /// Pods this node can never take (said so once), by uid.
    unschedulable: HashSet<String>,
    /// Unbound Pods told the node has no room for them now (once each), by uid.
    told_full: HashSet<String>,
    /// The running Pod deleted to make room for a higher-priority one, until it ends.
    preempting: Option<String>,
    /// Pods bound here (by us or someone else) not started yet: waiting for a slot.
    waiting: HashMap<String, Pod>,
    /// Pods bound by us whose bound object has not been seen yet.
    binding: HashSet<String>,
    /// Each running Pod's own address.
    ips: PodIps,
    /// Where in-cluster Pods reach the API server, when configured.
    api_server: Option<crate::credentials::ApiServer>,
    /// The Service proxy's view of Services, for Pods' `/etc/hosts`.
    services: Option<crate::services::ServiceDirectory>,
    done_tx: mpsc::UnboundedSender<String>,
    /// Images from podman's store; only as root, which mounts need.
    image_store: Option<std::sync::Arc<crate::image::ImageStore>>,
    /// Pulls into that store, shared by every Pod (one pull at a time).
    puller: Option<std::sync::Arc<crate::pull::Puller>>,
}

pub async fn run(
    client: kube::Client,
    config: Config,
    services: Option<crate::services::ServiceDirectory>,
) -> anyhow::Result<()> {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let api_server = config.in_cluster()?;
    let pod_cidr = config.pod_cidr;
    let image_store = nix::unistd::geteuid()
        .is_root()
        .then(|| crate::image::ImageStore::new(config.podman.clone(), config.state_dir.join("images")));
    let puller = image_store.as_ref().map(|_| crate::pull::Puller::of(&config));
    let mut agent = Agent {
        client: client.clone(),
        config,
        running: HashMap::new(),
        finished: HashSet::new(),
        unscheduled: HashMap::new(),
        unschedulable: HashSet::new(),
        told_full: HashSet::new(),
        preempting: None,
        waiting: HashMap::new(),
        binding: HashSet::new(),
        ips: PodIps::new(pod_cidr),
        api_server,
        services,
        done_tx,
        image_store,
        puller,
    };
    let pods: Api<Pod> = Api::all(client);
    let mut events = watcher(pods, watcher::Config::default()).default_backoff().boxed();
    let mut retry = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            event = events.try_next() => match event {
                Ok(Some(event)) => agent.on_event(event).await,
                Ok(None) => anyhow::bail!("pod watch ended"),
                Err(err) => tracing::warn!(error = %err, "pod watch error"),
            },
            Some(uid) = done_rx.recv() => agent.on_pod_done(uid).await,
            _ = retry.tick() => agent.fill_slots().await,
        }
    }
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

pub fn key_of(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn pods_in(client: &kube::Client, pod: &Pod) -> Api<Pod> {
    Api::namespaced(client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"))
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

impl Agent {
    fn pod_dir(&self, pod: &Pod) -> PathBuf {
        let meta = &pod.metadata;
        self.config.state_dir.join("pods").join(format!(
            "{}_{}_{}",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or(""),
            uid_of(pod)
        ))
    }

    fn busy_slots(&self) -> usize {
        self.running.len() + self.binding.len()
    }

    async fn on_event(&mut self, event: watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => self.on_pod(pod).await,
            watcher::Event::Delete(pod) => self.on_pod_gone(&pod),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    async fn on_pod(&mut self, pod: Pod) {
        let uid = uid_of(&pod);
        let Some(spec) = pod.spec.as_ref() else { return };
        match spec.node_name.as_deref() {
            None => {
                let ours = spec.scheduler_name.as_deref().is_none_or(|s| s == "default-scheduler");
                let pending = pod.metadata.deletion_timestamp.is_none() && !is_terminal(&pod);
                if ours
                    && pending
                    && let Some(why) = crate::node::cannot_take(&self.config, &pod)
                {
                    // As kube-scheduler says it: the Pod stays Pending, unscheduled.
                    if self.unschedulable.insert(uid.clone()) {
                        tracing::info!(pod = %key_of(&pod), %why, "unschedulable");
                        let now = Time(Timestamp::now());
                        let patch = json!({"status": {"phase": "Pending", "conditions": [
                            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                             "message": why, "lastTransitionTime": now}]}});
                        patch_status(&self.client, &pod, patch).await;
                    }
                    return;
                }
                if ours && pending {
                    let queued = Queued {
                        rank: std::cmp::Reverse(priority_of(&pod)),
                        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
                        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                        name: pod.metadata.name.clone().unwrap_or_default(),
                        preempts: spec.preemption_policy.as_deref() != Some("Never"),
                    };
                    self.unscheduled.insert(uid, queued);
                    self.fill_slots().await;
                }
            }
            Some(node) if node == self.config.node_name => {
                self.unscheduled.remove(&uid);
                self.binding.remove(&uid);
                self.on_own_pod(pod).await;
            }
            Some(_) => {
                self.unscheduled.remove(&uid);
            }
        }
    }

    async fn on_own_pod(&mut self, pod: Pod) {
        let uid = uid_of(&pod);
        if let Some(handle) = self.running.get(&uid) {
            if pod.metadata.deletion_timestamp.is_some() {
                let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(30).max(0) as u64;
                let _ = handle.stop.send(Some(Duration::from_secs(grace).min(MAX_GRACE)));
            }
            return;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            self.waiting.remove(&uid);
            self.kill_recorded_processes(&pod);
            finalize_deletion(&self.client, &pod).await;
            return;
        }
        if self.finished.contains(&uid) || is_terminal(&pod) {
            return;
        }
        let started_before = pod.status.as_ref().is_some_and(|s| s.start_time.is_some());
        if started_before {
            // Started by an earlier incarnation of this agent: we cannot wait on
            // its processes, so end them and say so rather than leave it Running.
            self.kill_recorded_processes(&pod);
            fail_pod(
                &self.client,
                &pod,
                "NodeAgentRestarted",
                "the node agent restarted while this pod ran; its processes were killed",
            )
            .await;
            self.finished.insert(uid);
            return;
        }
        self.waiting.insert(uid, pod);
        self.fill_slots().await;
    }

    fn on_pod_gone(&mut self, pod: &Pod) {
        let uid = uid_of(pod);
        self.unscheduled.remove(&uid);
        self.unschedulable.remove(&uid);
        self.told_full.remove(&uid);
        self.waiting.remove(&uid);
        self.binding.remove(&uid);
        self.finished.remove(&uid);
        if let Some(handle) = self.running.get(&uid) {
            // Removed outright (e.g. force-deleted): no grace left.
            let _ = handle.stop.send(Some(Duration::ZERO));
        }
    }

    async fn on_pod_done(&mut self, uid: String) {
        self.running.remove(&uid);
        if self.preempting.as_ref() == Some(&uid) {
            self.preempting = None;
        }
        if let Some(ip) = self.ips.release(&uid) {
            crate::network::unplumb(ip);
        }
        self.finished.insert(uid);
        self.fill_slots().await;
    }

    /// Starts waiting pods, then binds unscheduled ones in queue order while
    /// slots are free; when none is free, preempts for the first in the queue.
    async fn fill_slots(&mut self) {
        while self.busy_slots() < self.config.max_pods {
            let Some(uid) =
                (self.waiting.iter()).max_by_key(|(_, pod)| priority_of(pod)).map(|(uid, _)| uid.clone())
            else {
                break;
            };
            let pod = self.waiting.remove(&uid).expect("key just listed");
            self.start(pod);
        }
        let mut queue: Vec<_> = self.unscheduled.iter().map(|(uid, q)| (q.clone(), uid.clone())).collect();
        queue.sort();
        for (queued, uid) in &queue {
            if self.busy_slots() >= self.config.max_pods {
                break;
            }
            self.unscheduled.remove(uid);
            match self.bind(&queued.namespace, &queued.name, uid).await {
                Ok(()) => {
                    self.binding.insert(uid.clone());
                }
                Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {}
                Err(err) => {
                    let pod = format!("{}/{}", queued.namespace, queued.name);
                    tracing::warn!(%pod, error = %err, "binding failed; will retry");
                    self.unscheduled.insert(uid.clone(), queued.clone());
                }
            }
        }
        // As kube-scheduler says of a Pod no node has room for (the API
        // server's binding sets PodScheduled=True once one is bound).
        for (queued, uid) in &queue {
            if self.unscheduled.contains_key(uid) && self.told_full.insert(uid.clone()) {
                crate::node::tell_full(&self.client, &queued.namespace, &queued.name).await;
            }
        }
        if let Some((first, _)) = queue.iter().find(|(_, uid)| self.unscheduled.contains_key(uid)) {
            self.preempt_for(first.clone()).await;
        }
    }

    /// Deletes the running Pod that `waiting` outranks by the most (the
    /// youngest among equals), unless a victim is still terminating.
    async fn preempt_for(&mut self, waiting: Queued) {
        if !waiting.preempts || self.preempting.is_some() || self.busy_slots() < self.config.max_pods {
            return;
        }
        let victim = (self.running.iter())
            .filter(|(_, handle)| handle.priority < waiting.priority())
            .min_by_key(|(_, handle)| (handle.priority, std::cmp::Reverse(handle.started)))
            .map(|(uid, handle)| (uid.clone(), handle.namespace.clone(), handle.name.clone()));
        let Some((uid, namespace, name)) = victim else { return };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
            ..Default::default()
        };
        match pods.delete(&name, &params).await {
            Ok(_) => {
                tracing::info!(victim = %format!("{namespace}/{name}"),
                    for_pod = %format!("{}/{}", waiting.namespace, waiting.name), "preempted");
                self.preempting = Some(uid);
            }
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(err) => {
                tracing::warn!(victim = %format!("{namespace}/{name}"), error = %err, "preemption failed")
            }
        }
    }

    async fn bind(&self, namespace: &str, name: &str, uid: &str) -> kube::Result<()> {
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                uid: Some(uid.to_string()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(self.config.node_name.clone()),
                ..Default::default()
            },
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let _: serde_json::Value =
            pods.create_subresource("binding", name, &PostParams::default(), &binding).await?;
        tracing::info!(pod = %format!("{namespace}/{name}"), node = %self.config.node_name, "bound");
        Ok(())
    }

    fn start(&mut self, pod: Pod) {
        let uid = uid_of(&pod);
        let (stop, stop_rx) = watch::channel(None);
        let handle = PodHandle {
            stop,
            priority: priority_of(&pod),
            started: std::time::Instant::now(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
        };
        let pod_ip = match self.ips.assign(&uid).map(|ip| (ip, crate::network::plumb(ip))) {
            Some((ip, Ok(()))) => ip,
            failed => {
                // Not root, or no `ip`: the Pod shares the host's loopback address.
                let problem =
                    failed.map_or("every Pod IP is taken".into(), |(_, r)| r.err().unwrap_or_default());
                tracing::warn!(pod = %key_of(&pod), %problem, "no Pod IP; sharing 127.0.0.1");
                self.ips.release(&uid);
                Ipv4Addr::LOCALHOST
            }
        };
        let runner = PodRunner {
            pod_ip,
            api_server: self.api_server.clone(),
            services: self.services.clone(),
            client: self.client.clone(),
            images: self.config.images.clone(),
            puller: self.puller.clone(),
            image_store: self.image_store.clone(),
            dir: self.pod_dir(&pod),
            pod,
        };
        let done = self.done_tx.clone();
        let task_uid = uid.clone();
        tokio::spawn(async move {
            runner.run(stop_rx).await;
            let _ = done.send(task_uid);
        });
        self.running.insert(uid, handle);
    }

    /// Kills the process groups an earlier incarnation recorded for this pod.
    fn kill_recorded_processes(&self, pod: &Pod) {
        let Ok(entries) = std::fs::read_dir(self.pod_dir(pod)) else { return };
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "pgid")
                && let Some(pgid) =
                    std::fs::read_to_string(entry.path()).ok().and_then(|s| s.trim().parse().ok())
            {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                tracing::info!(pod = %key_of(pod), pgid, "killed processes of an earlier agent");
            }
        }
    }
}

/// The kubelet's last step of a deletion: remove the object for good.
pub async fn finalize_deletion(client: &kube::Client, pod: &Pod) {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
        ..Default::default()
    };
    match pods_in(client, pod).delete(pod.metadata.name.as_deref().unwrap_or(""), &params).await {
        Ok(_) => tracing::info!(pod = %key_of(pod), "deleted"),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(err) => tracing::warn!(pod = %key_of(pod), error = %err, "final delete failed"),
    }
}

pub async fn fail_pod(client: &kube::Client, pod: &Pod, reason: &str, message: &str) {
    let now = Time(Timestamp::now());
    let statuses: Vec<ContainerStatus> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some(reason.into()),
                    message: Some(message.into()),
                    finished_at: Some(now.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    // Not ready, as a kubelet says of a Pod whose containers are gone: the
    // Endpoints controller must stop routing to its (reusable) IP.
    let condition =
        |type_: &str, status: &str| json!({"type": type_, "status": status, "lastTransitionTime": now});
    let patch = json!({"status": {
        "phase": "Failed", "reason": reason, "message": message, "containerStatuses": statuses,
        "conditions": [
            condition("PodScheduled", "True"), condition("Initialized", "True"),
            condition("ContainersReady", "False"), condition("Ready", "False"),
        ],
    }});
    patch_status(client, pod, patch).await;
}

pub async fn patch_status(client: &kube::Client, pod: &Pod, patch: serde_json::Value) {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    if let Err(err) =
        pods_in(client, pod).patch_status(name, &PatchParams::default(), &Patch::Merge(patch)).await
    {
        tracing::warn!(pod = %key_of(pod), error = %err, "status update failed");
    }
}
