//! Every replica's copy of the embedded store. The store is a directory of
//! each replica (an emptyDir), and the leader's is the one served: without
//! copies every change of leader (a `helm upgrade`, a drain, a crash)
//! would drop the files of every finished run that has not expired yet.
//!
//! Each replica fetches, every few seconds, the files that succeeded runs
//! record in their status and it does not hold yet: from the leader
//! through the outputs Service (the URL tool Pods upload to), else from
//! any other replica (the running Pods sharing its own Pod's name,
//! instance and component labels, at its outputs port), with a read token
//! it signs itself (every replica holds the ownership key); it keeps a file
//! only if its size and SHA-256 are the ones the run recorded, so no Pod
//! that answers can plant bytes. A fresh replica that wins the Lease during
//! a rolling upgrade so fills its store from the others within seconds. A
//! new replica is not ready until its first copy is complete (or
//! [`FIRST_COPY_PATIENCE`] passed), so a rolling upgrade removes an old
//! replica only once a new one holds its files.
//!
//! Lost on a change of leader: the files of runs still running (uploaded to
//! the leader only: the run then succeeds with the files its new leader
//! holds), and those of a run that succeeded within [`MIRROR_EVERY`] before
//! its leader died. Not used with a store the replicas share (S3, or one
//! PersistentVolumeClaim): nothing to copy there.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::runtime::reflector::Store;
use mining_api::tool_outputs::{self, ToolOutput};
use mining_api::{ToolRun, ToolRunPhase};
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{ObjectStoreExt as _, PutPayload};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt as _;
use tokio::time::Instant;

use super::Outputs;

/// How often a replica looks for files it lacks.
pub const MIRROR_EVERY: Duration = Duration::from_secs(5);
/// How long a new replica waits for its first complete copy before it
/// says it is ready anyway (the files' holders may be gone).
pub const FIRST_COPY_PATIENCE: Duration = Duration::from_secs(120);
/// What `/readyz` waits for, by name.
pub const FIRST_COPY: &str = "a copy of the other replicas' tool files";
/// How long one file's copy may take.
const COPY_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest wait before a file that could not be copied is asked for again.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(300);
/// Every this many passes (a minute) what it holds is looked at again: a
/// sweep may have removed a copy its cache did not yet know to keep.
const RECHECK_HELD_EVERY: u32 = 12;
/// Why a copy failed when the source does not hold the file, or nothing answers there.
const LACKS_IT: &str = "no such file there";
/// How long a read token the replica signs is valid (checked as a read starts).
const READ_TOKEN_SECONDS: u64 = 60;

/// One file a replica should hold: (namespace, run name, uid, the recorded file).
type Wanted = (String, String, String, ToolOutput);
/// A file as `held` and `retry` know it: (namespace, uid, name/sha256).
type FileKey = (String, String, String);

/// The files succeeded runs record (pure): what the store keeps of them.
/// A record that no upload could have made (a bad name, more files or
/// bytes than any run may hand over) is skipped: status is a claim.
pub fn wanted(runs: &[Arc<ToolRun>], max_file_bytes: u64) -> Vec<Wanted> {
    let mut wanted = Vec::new();
    for run in runs {
        if run.phase() != ToolRunPhase::Succeeded {
            continue;
        }
        let meta = &run.metadata;
        let (Some(ns), Some(name), Some(uid)) = (&meta.namespace, &meta.name, &meta.uid) else { continue };
        let outputs = run.status.as_ref().map(|s| s.outputs.as_slice()).unwrap_or_default();
        if tool_outputs::check_recorded(outputs).is_err() {
            continue;
        }
        for output in outputs.iter().filter(|o| o.size <= max_file_bytes) {
            wanted.push((ns.clone(), name.clone(), uid.clone(), output.clone()));
        }
    }
    wanted
}

/// Says `/readyz` may pass, once: when the first copy is complete, when
/// [`FIRST_COPY_PATIENCE`] ran out, or when the copying task ends (a panic
/// included), so no replica stays unready for ever.
#[derive(Clone)]
pub struct FirstCopy(Arc<Mutex<Option<Said>>>);

/// What says it (once).
type Said = Box<dyn FnOnce() + Send>;

impl FirstCopy {
    pub fn new(done: impl FnOnce() + Send + 'static) -> Self {
        Self(Arc::new(Mutex::new(Some(Box::new(done)))))
    }

    fn done(&self) -> bool {
        let done = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        done.map(|done| done()).is_some()
    }
}

/// Calls [`FirstCopy::done`] when dropped.
struct DoneOnDrop(FirstCopy);

impl Drop for DoneOnDrop {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// What the copying task needs.
pub struct Mirror {
    pub outputs: Arc<Outputs>,
    pub runs: Store<ToolRun>,
    pub keys: mining_api::ownership::OwnershipKeys,
    /// The outputs Service: the leader.
    pub leader_url: String,
    /// The port the other replicas' outputs servers listen on.
    pub outputs_port: u16,
    pub api: kube::Client,
    /// Whether every other watch has listed (the runs' cache is complete).
    pub caches_listed: Box<dyn Fn() -> bool + Send + Sync>,
}

/// Copies every [`MIRROR_EVERY`], for as long as the process runs.
pub async fn mirror_every(mirror: Mirror, first_copy: FirstCopy) {
    let _ends = DoneOnDrop(first_copy.clone());
    let patience = first_copy.clone();
    tokio::spawn(async move {
        tokio::time::sleep(FIRST_COPY_PATIENCE).await;
        if patience.done() {
            tracing::warn!("ready without a copy of every file of the other replicas");
        }
    });
    // A partial list of runs would look like nothing to copy.
    while !(mirror.caches_listed)() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The Mozilla roots compiled in (the image has no system certificates),
    // and never a proxy: the requests carry read tokens.
    let client = telemetry::bundled_roots_tls([]).map_err(|err| err.to_string()).and_then(|tls| {
        let builder = reqwest::Client::builder().tls_backend_preconfigured(tls).no_proxy();
        builder
            .connect_timeout(Duration::from_secs(5))
            .timeout(COPY_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())
    });
    let client = match client {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(error = %err, "cannot make an HTTP client: this replica keeps no copy of the others' files");
            return;
        }
    };
    let mut copier = Copier::default();
    loop {
        copier.passes += 1;
        if copier.passes.is_multiple_of(RECHECK_HELD_EVERY) {
            copier.held.clear();
        }
        let peers = Some((mirror.api.clone(), mirror.outputs_port));
        let mut sources = Sources::new(mirror.leader_url.clone(), peers);
        if copier.copy_missing(&mirror.outputs, &mirror.runs, &mirror.keys, &mut sources, &client).await == 0
        {
            first_copy.done();
        }
        tokio::time::sleep(MIRROR_EVERY).await;
    }
}

/// Where a missing file may be had: the leader (through the Service), then
/// the other replicas, listed once per pass and only when a file is missing.
pub(super) struct Sources {
    leader: String,
    peers: Option<(kube::Client, u16)>,
    listed: Option<Vec<String>>,
}

impl Sources {
    pub(super) fn new(leader: String, peers: Option<(kube::Client, u16)>) -> Self {
        Self { leader, peers, listed: None }
    }

    async fn urls(&mut self) -> Vec<String> {
        if self.listed.is_none() {
            let mut urls = vec![self.leader.clone()];
            if let Some((api, port)) = &self.peers {
                urls.extend(peer_urls(api, *port).await);
            }
            self.listed = Some(urls);
        }
        self.listed.clone().unwrap_or_default()
    }
}

/// The outputs servers of the other running replicas: the Pods of this
/// Pod's namespace with its name, instance and component labels
/// (`POD_NAME`, `POD_NAMESPACE`: the chart sets both; none without them).
async fn peer_urls(api: &kube::Client, port: u16) -> Vec<String> {
    use k8s_openapi::api::core::v1::Pod;
    let (Ok(me), Ok(namespace)) = (std::env::var("POD_NAME"), std::env::var("POD_NAMESPACE")) else {
        return Vec::new();
    };
    let pods: kube::Api<Pod> = kube::Api::namespaced(api.clone(), &namespace);
    let Ok(mine) = pods.get(&me).await else { return Vec::new() };
    let labels = mine.metadata.labels.unwrap_or_default();
    let selector: Vec<String> =
        ["app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"]
            .iter()
            .filter_map(|key| labels.get(*key).map(|value| format!("{key}={value}")))
            .collect();
    if selector.len() < 3 {
        return Vec::new();
    }
    let listed = match pods.list(&kube::api::ListParams::default().labels(&selector.join(","))).await {
        Ok(listed) => listed.items,
        Err(err) => {
            tracing::debug!(error = %err, "cannot list the other replicas");
            return Vec::new();
        }
    };
    // Only running, undeleted Pods: an ended Pod's address may be another's by now.
    listed
        .into_iter()
        .filter(|pod| {
            pod.metadata.name.as_deref() != Some(me.as_str()) && pod.metadata.deletion_timestamp.is_none()
        })
        .filter_map(|pod| pod.status.filter(|s| s.phase.as_deref() == Some("Running"))?.pod_ip)
        .map(
            |ip| {
                if ip.contains(':') { format!("http://[{ip}]:{port}") } else { format!("http://{ip}:{port}") }
            },
        )
        .collect()
}

/// What one replica's copying remembers between passes.
#[derive(Default)]
pub(super) struct Copier {
    /// Files this replica holds.
    held: HashSet<FileKey>,
    /// Files that could not be copied: failures in a row, when to ask
    /// again, and whether every source lacked it (nothing to wait for).
    retry: HashMap<FileKey, (u32, Instant, bool)>,
    passes: u32,
}

impl Copier {
    /// One pass; returns how many wanted files are still missing (not
    /// counting those no source holds).
    pub(super) async fn copy_missing(
        &mut self,
        outputs: &Outputs,
        runs: &Store<ToolRun>,
        keys: &mining_api::ownership::OwnershipKeys,
        sources: &mut Sources,
        client: &reqwest::Client,
    ) -> usize {
        let wanted = wanted(&runs.state(), outputs.limits().file_bytes);
        let key_of = |ns: &str, uid: &str, o: &ToolOutput| {
            (ns.to_string(), uid.to_string(), format!("{}/{}", o.name, o.sha256))
        };
        let live: HashSet<FileKey> = wanted.iter().map(|(ns, _, uid, o)| key_of(ns, uid, o)).collect();
        self.held.retain(|key| live.contains(key));
        self.retry.retain(|key, _| live.contains(key));
        let mut missing = 0;
        for (namespace, name, uid, output) in wanted {
            let key = key_of(&namespace, &uid, &output);
            if self.held.contains(&key) {
                continue;
            }
            if let Some((_, next, lacked)) = self.retry.get(&key)
                && Instant::now() < *next
            {
                missing += usize::from(!lacked);
                continue;
            }
            let recorded = outputs.recorded(&namespace, &uid).await.unwrap_or_default();
            if recorded.contains(&output) {
                self.held.insert(key);
                continue;
            }
            let mut failed = None;
            let mut copied = false;
            for source in sources.urls().await {
                match copy_one(outputs, keys, &source, client, [&namespace, &name, &uid], &output).await {
                    Ok(()) => {
                        tracing::info!(namespace = %namespace, run = %name, file = %output.name,
                            bytes = output.size, %source, "copied a tool output from another replica");
                        copied = true;
                        break;
                    }
                    // This one lacks it: another may not.
                    Err(why) if why == LACKS_IT => {}
                    Err(why) => failed = Some(why),
                }
            }
            if copied {
                self.retry.remove(&key);
                self.held.insert(key);
                continue;
            }
            // Asked again later, less often each time; a file every source
            // lacks (lost with an earlier leader) is nothing to wait for.
            if let Some(why) = &failed {
                tracing::debug!(namespace = %namespace, run = %name, file = %output.name, %why,
                    "cannot copy a tool output yet");
                missing += 1;
            }
            let failures = self.retry.get(&key).map_or(0, |(n, ..)| *n) + 1;
            let wait = MIRROR_EVERY.saturating_mul(1 << (failures - 1).min(8)).min(MAX_RETRY_WAIT);
            self.retry.insert(key, (failures, Instant::now() + wait, failed.is_none()));
        }
        missing
    }
}

/// Fetches one file from `source` and keeps it if it is what the run recorded.
async fn copy_one(
    outputs: &Outputs,
    keys: &mining_api::ownership::OwnershipKeys,
    source: &str,
    client: &reqwest::Client,
    run: [&str; 3],
    output: &ToolOutput,
) -> Result<(), String> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let expires = now + READ_TOKEN_SECONDS;
    let token = keys.outputs_read_token(run, &output.name, expires);
    let url = format!(
        "{}{}/{}?expires={expires}",
        source.trim_end_matches('/'),
        super::run_path(run[0], run[1], run[2]),
        output.name
    );
    let mut response = match client.get(&url).bearer_auth(token).send().await {
        Ok(response) => response,
        // Nobody serves there (a replica gone, a Service without a leader).
        Err(err) if err.is_connect() => return Err(LACKS_IT.into()),
        Err(err) => return Err(err.to_string()),
    };
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Err(LACKS_IT.into());
    }
    if !response.status().is_success() {
        return Err(format!("{source} answered {}", response.status()));
    }
    // What the source says it holds, before any byte is read.
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    if header("content-length").is_some_and(|length| length != output.size.to_string())
        || header("x-content-sha256").is_some_and(|sha| sha != output.sha256)
    {
        return Err(format!("{source} holds another {} than the run recorded", output.name));
    }
    let data = Path::from(tool_outputs::object_key(run[0], run[2], &output.name));
    let mut writer = BufWriter::with_capacity(outputs.store().clone(), data, super::store::PART_BYTES);
    let (mut size, mut digest) = (0u64, Sha256::new());
    let copied = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                size += chunk.len() as u64;
                if size > output.size {
                    break Err(format!("{source} sent more than the {} bytes recorded", output.size));
                }
                digest.update(&chunk);
                if let Err(err) = writer.write_all(&chunk).await {
                    break Err(err.to_string());
                }
            }
            Ok(None) => break Ok(()),
            Err(err) => break Err(err.to_string()),
        }
    };
    let hex: String = digest.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let copied = copied.and_then(|()| {
        (size == output.size && hex == output.sha256)
            .then_some(())
            .ok_or_else(|| format!("{source}'s bytes are not what the run recorded"))
    });
    if let Err(why) = copied {
        let _ = writer.abort().await;
        return Err(why);
    }
    writer.shutdown().await.map_err(|err| err.to_string())?;
    let meta = Path::from(tool_outputs::meta_key(run[0], run[2], &output.name));
    let record = serde_json::to_vec(output).map_err(|err| err.to_string())?;
    outputs.store().put(&meta, PutPayload::from(record)).await.map_err(|err| err.to_string())?;
    Ok(())
}

#[cfg(test)]
#[path = "mirror_tests.rs"]
mod tests;
