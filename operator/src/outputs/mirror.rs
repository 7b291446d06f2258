//! A standby's copy of the leader's files, for the embedded store: the
//! store is a directory of the leading replica, so without a copy every
//! leader change (a `helm upgrade`, a drain, a crash) would drop the files
//! of every finished run that has not expired yet.
//!
//! Each replica fetches, every few seconds, the files that succeeded runs
//! record in their status and it does not hold yet: from the leader
//! through the outputs Service (the URL tool Pods upload to), else from
//! any other replica (the Pods sharing its own Pod's name, instance and
//! component labels, at its outputs port), with a read token it signs
//! itself (every replica holds the ownership key); it keeps a file only if
//! its size and SHA-256 are the ones the run recorded, so no Pod that
//! answers can plant bytes. A new leader that started empty (a fresh
//! replica can win the Lease during a rolling upgrade) so fills its store
//! from the standbys within seconds. A new replica is not ready until its
//! first copy is complete (or [`FIRST_COPY_PATIENCE`] passed), so a
//! rolling upgrade replaces the old replicas only once a new one holds
//! their files.
//!
//! Not copied: files of runs still running (their uploads go to the leader
//! only; a run whose leader is replaced mid-upload sees its upload fail and
//! may upload again), and files of a run that succeeded in the last
//! [`MIRROR_EVERY`] before the leader died without a successor ready.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::Store;
use mining_api::tool_outputs::{self, ToolOutput};
use mining_api::{ToolRun, ToolRunPhase};
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{ObjectStoreExt as _, PutPayload};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt as _;

use super::Outputs;
use crate::leader::Leadership;
use crate::work::Readiness;

/// How often a standby looks for files it lacks.
pub const MIRROR_EVERY: Duration = Duration::from_secs(5);
/// How long a new replica waits for its first complete copy before it
/// says it is ready anyway (the leader may be gone with its files).
pub const FIRST_COPY_PATIENCE: Duration = Duration::from_secs(120);
/// How long one file's copy may take.
const COPY_TIMEOUT: Duration = Duration::from_secs(300);
/// Why a copy failed when the source does not hold the file, or nothing answers there.
const LACKS_IT: &str = "no such file there";
/// How long a read token the standby signs is valid.
const READ_TOKEN_SECONDS: u64 = 600;

/// One file a standby should hold: (namespace, run name, uid, the recorded file).
type Wanted = (String, String, String, ToolOutput);

/// The files succeeded runs record (pure): what the store keeps of them.
pub fn wanted(runs: &[Arc<ToolRun>]) -> Vec<Wanted> {
    let mut wanted = Vec::new();
    for run in runs {
        if run.phase() != ToolRunPhase::Succeeded {
            continue;
        }
        let meta = &run.metadata;
        let (Some(ns), Some(name), Some(uid)) = (&meta.namespace, &meta.name, &meta.uid) else { continue };
        for output in run.status.iter().flat_map(|s| s.outputs.iter()) {
            wanted.push((ns.clone(), name.clone(), uid.clone(), output.clone()));
        }
    }
    wanted
}

/// What a standby's `/readyz` waits for, by name (see [`Readiness`]).
const FIRST_COPY: &str = "a copy of the leader's tool files";

/// Copies from the leader while this replica does not lead; says ready
/// (through `readiness`) once a pass found nothing missing, once it leads,
/// or after [`FIRST_COPY_PATIENCE`].
pub async fn mirror_every(
    outputs: Arc<Outputs>,
    runs: Store<ToolRun>,
    keys: mining_api::ownership::OwnershipKeys,
    (leader_url, outputs_port): (String, u16),
    (leadership, api): (Leadership, kube::Client),
    readiness: Arc<Readiness>,
) {
    let first_copy = readiness.register_for_readyz(FIRST_COPY);
    let started = tokio::time::Instant::now();
    // The runs' cache complete first (every other watch listed), or a
    // partial list would look like nothing to copy.
    while readiness.listing().iter().any(|name| name != FIRST_COPY) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The Mozilla roots compiled in: the image has no system certificates
    // (the Service is plain HTTP, but an https `--outputs-url` must work too).
    let client = telemetry::bundled_roots_tls([]).map_err(|err| err.to_string()).and_then(|tls| {
        let builder = reqwest::Client::builder().tls_backend_preconfigured(tls);
        builder
            .connect_timeout(Duration::from_secs(5))
            .timeout(COPY_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())
    });
    let client = match client {
        Ok(client) => client,
        Err(err) => {
            // Never a replica that is not ready for ever: say why, and stand by without copies.
            tracing::error!(error = %err, "cannot make an HTTP client: this replica keeps no copy of other replicas' files");
            first_copy.done();
            return;
        }
    };
    // What this replica holds already.
    let mut held: HashSet<(String, String, String)> = HashSet::new();
    loop {
        let mut sources = Sources::new(leader_url.clone(), Some((api.clone(), outputs_port)));
        let missing = copy_missing(&outputs, &runs, &keys, &mut sources, &client, &mut held).await;
        if missing == 0 || leadership.is_leading() {
            first_copy.done();
        } else if started.elapsed() > FIRST_COPY_PATIENCE && !first_copy.is_listed() {
            tracing::warn!(missing, "ready without a copy of every file of the other replicas");
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

    async fn urls(&mut self) -> &[String] {
        if self.listed.is_none() {
            let mut urls = vec![self.leader.clone()];
            if let Some((api, port)) = &self.peers {
                urls.extend(peer_urls(api, *port).await);
            }
            self.listed = Some(urls);
        }
        self.listed.as_deref().unwrap_or_default()
    }
}

/// The outputs servers of the other replicas: the Pods of this Pod's
/// namespace with its name, instance and component labels (`POD_NAME`,
/// `POD_NAMESPACE`: the chart sets both; none without them).
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
    listed
        .into_iter()
        .filter(|pod| pod.metadata.name.as_deref() != Some(me.as_str()))
        .filter_map(|pod| pod.status?.pod_ip)
        .map(
            |ip| {
                if ip.contains(':') { format!("http://[{ip}]:{port}") } else { format!("http://{ip}:{port}") }
            },
        )
        .collect()
}

/// One pass; returns how many wanted files are still missing (not counting
/// those no source holds).
async fn copy_missing(
    outputs: &Outputs,
    runs: &Store<ToolRun>,
    keys: &mining_api::ownership::OwnershipKeys,
    sources: &mut Sources,
    client: &reqwest::Client,
    held: &mut HashSet<(String, String, String)>,
) -> usize {
    let wanted = wanted(&runs.state());
    let key_of = |ns: &str, uid: &str, o: &ToolOutput| {
        (ns.to_string(), uid.to_string(), format!("{}/{}", o.name, o.sha256))
    };
    let live: HashSet<_> = wanted.iter().map(|(ns, _, uid, o)| key_of(ns, uid, o)).collect();
    held.retain(|key| live.contains(key));
    let mut missing = 0;
    for (namespace, name, uid, output) in wanted {
        let key = key_of(&namespace, &uid, &output);
        if held.contains(&key) {
            continue;
        }
        let recorded = outputs.recorded(&namespace, &uid).await.unwrap_or_default();
        if recorded.iter().any(|o| *o == output) {
            held.insert(key);
            continue;
        }
        let mut failed = None;
        for source in sources.urls().await.to_vec() {
            match copy_one(outputs, keys, &source, client, [&namespace, &name, &uid], &output).await {
                Ok(()) => {
                    tracing::info!(namespace = %namespace, run = %name, file = %output.name, bytes = output.size,
                        %source, "copied a tool output from another replica");
                    held.insert(key.clone());
                    failed = None;
                    break;
                }
                // This one lacks it: another may not.
                Err(why) if why == LACKS_IT => {}
                Err(why) => failed = Some(why),
            }
        }
        // Every source lacks it (lost with an earlier leader): nothing to
        // wait for, though it is asked for again next time.
        if let Some(why) = failed.filter(|_| !held.contains(&key)) {
            tracing::debug!(namespace = %namespace, run = %name, file = %output.name, %why,
                "cannot copy a tool output yet");
            missing += 1;
        }
    }
    missing
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
    outputs.add_used(output.size);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::Limits;

    fn run(phase: ToolRunPhase, outputs: Vec<ToolOutput>) -> Arc<ToolRun> {
        let mut run: ToolRun = serde_json::from_value(serde_json::json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
            "metadata": {"name": "r", "namespace": "ns", "uid": "u"},
            "spec": {"tool": "t", "arguments": "{}", "jobTemplate": {"spec": {"template": {}}}}
        }))
        .unwrap();
        let status = mining_api::ToolRunStatus { phase: Some(phase), outputs, ..Default::default() };
        run.status = Some(status);
        Arc::new(run)
    }

    fn in_memory() -> Arc<Outputs> {
        let limits = Limits {
            file_bytes: 1 << 20,
            run_bytes: 1 << 20,
            total_bytes: 1 << 30,
            uploads_at_once: 4,
            caller_bytes: 1 << 30,
            uploads_per_caller: 4,
        };
        Arc::new(Outputs::with_store(Arc::new(object_store::memory::InMemory::new()), limits))
    }

    #[test]
    fn only_succeeded_runs_files_are_wanted() {
        let output = ToolOutput {
            name: "data.csv".into(),
            media_type: "text/csv".into(),
            size: 3,
            sha256: "ab".repeat(32),
        };
        let runs = [ToolRunPhase::Succeeded, ToolRunPhase::Failed, ToolRunPhase::Running]
            .map(|phase| run(phase, vec![output.clone()]));
        assert_eq!(wanted(&runs), vec![("ns".into(), "r".into(), "u".into(), output)]);
    }

    async fn serving(outputs: Arc<Outputs>, keys: &mining_api::ownership::OwnershipKeys) -> String {
        let (runs, _) = kube::runtime::reflector::store();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(super::super::server::serve_on(listener, outputs, keys.clone(), runs));
        url
    }

    fn only(urls: &[&str]) -> Sources {
        let listed = Some(urls.iter().map(|u| u.to_string()).collect());
        Sources { leader: urls[0].to_string(), peers: None, listed }
    }

    /// A replica copies what the run recorded from the leader's server, or
    /// from another replica when the leader lacks it (a fresh leader), and
    /// keeps nothing a server sends that differs from the record.
    #[tokio::test]
    async fn a_replica_copies_the_recorded_files_from_the_leader_or_another_replica() {
        // The process's TLS provider, as main installs it (reqwest needs one).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let keys = mining_api::ownership::OwnershipKeys::new(vec![7; 32], None).unwrap();
        let (holder, empty_leader, copier) = (in_memory(), in_memory(), in_memory());
        let body = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"n,v\n1,1\n"))]);
        let stored = holder.upload(["ns", "r", "u"], "", "data.csv", Some("text/csv"), body).await.unwrap();
        let holder_url = serving(holder.clone(), &keys).await;
        let empty_url = serving(empty_leader, &keys).await;
        let (runs, mut writer) = kube::runtime::reflector::store();
        let client = reqwest::Client::new();
        let mut held = HashSet::new();
        let apply = |writer: &mut kube::runtime::reflector::store::Writer<ToolRun>, run: Arc<ToolRun>| {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply((*run).clone()))
        };

        // A record the served bytes do not match: nothing is kept, and it counts as missing.
        let forged = ToolOutput { sha256: "00".repeat(32), ..stored.clone() };
        apply(&mut writer, run(ToolRunPhase::Succeeded, vec![forged]));
        assert_eq!(
            copy_missing(&copier, &runs, &keys, &mut only(&[&holder_url]), &client, &mut held).await,
            1
        );
        assert!(copier.recorded("ns", "u").await.unwrap().is_empty());

        // The run's own record: the leader lacks it, another replica has it.
        apply(&mut writer, run(ToolRunPhase::Succeeded, vec![stored.clone()]));
        let mut sources = only(&[&empty_url, &holder_url]);
        assert_eq!(copy_missing(&copier, &runs, &keys, &mut sources, &client, &mut held).await, 0);
        assert_eq!(copier.recorded("ns", "u").await.unwrap(), vec![stored.clone()]);
        let (_, bytes) = copier.read("ns", "u", "data.csv").await.unwrap();
        let bytes: Vec<bytes::Bytes> = futures::TryStreamExt::try_collect(bytes).await.unwrap();
        assert_eq!(bytes.concat(), b"n,v\n1,1\n");

        // A file no source holds (lost with an earlier leader), nor any
        // server answering: nothing to wait for, nothing kept.
        let lost = ToolOutput { name: "lost.csv".into(), ..stored.clone() };
        let mut other = (*run(ToolRunPhase::Succeeded, vec![lost])).clone();
        other.metadata.name = Some("other".into());
        other.metadata.uid = Some("u2".into());
        apply(&mut writer, Arc::new(other));
        let mut sources = only(&[&empty_url, "http://127.0.0.1:1"]);
        assert_eq!(copy_missing(&copier, &runs, &keys, &mut sources, &client, &mut held).await, 0);
        assert!(copier.recorded("ns", "u2").await.unwrap().is_empty());
        assert_eq!(copier.recorded("ns", "u").await.unwrap(), vec![stored], "what it held stays");
    }
}
