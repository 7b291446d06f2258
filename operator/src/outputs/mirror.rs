//! A standby's copy of the leader's files, for the embedded store: the
//! store is a directory of the leading replica, so without a copy every
//! leader change (a `helm upgrade`, a drain, a crash) would drop the files
//! of every finished run that has not expired yet.
//!
//! Each replica that does not lead fetches, every few seconds, the files
//! that succeeded runs record in their status and it does not hold yet,
//! from the leader through the outputs Service (the URL tool Pods upload
//! to), with a read token it signs itself (every replica holds the
//! ownership key), and keeps each only if its size and SHA-256 are the
//! ones the run recorded. A new replica is not ready until its first copy
//! is complete (or [`FIRST_COPY_PATIENCE`] passed), so a rolling upgrade
//! replaces the leader only once another replica holds its files.
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
    leader_url: String,
    leadership: Leadership,
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
            tracing::error!(error = %err, "cannot make an HTTP client: this standby keeps no copy of the leader's files");
            first_copy.done();
            return;
        }
    };
    // What this replica holds already.
    let mut held: HashSet<(String, String, String)> = HashSet::new();
    loop {
        if leadership.is_leading() {
            first_copy.done();
        } else {
            let missing = copy_missing(&outputs, &runs, &keys, &leader_url, &client, &mut held).await;
            if missing == 0 {
                first_copy.done();
            } else if started.elapsed() > FIRST_COPY_PATIENCE && !first_copy.is_listed() {
                tracing::warn!(missing, "ready without a copy of every file of the leader's store");
                first_copy.done();
            }
        }
        tokio::time::sleep(MIRROR_EVERY).await;
    }
}

/// One pass; returns how many wanted files are still missing.
async fn copy_missing(
    outputs: &Outputs,
    runs: &Store<ToolRun>,
    keys: &mining_api::ownership::OwnershipKeys,
    leader_url: &str,
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
        match copy_one(outputs, keys, leader_url, client, [&namespace, &name, &uid], &output).await {
            Ok(()) => {
                tracing::info!(namespace = %namespace, run = %name, file = %output.name, bytes = output.size,
                    "copied a tool output from the leader");
                held.insert(key);
            }
            Err(why) => {
                tracing::debug!(namespace = %namespace, run = %name, file = %output.name, %why,
                    "cannot copy a tool output from the leader yet");
                missing += 1;
            }
        }
    }
    missing
}

/// Fetches one file from the leader and keeps it if it is what the run recorded.
async fn copy_one(
    outputs: &Outputs,
    keys: &mining_api::ownership::OwnershipKeys,
    leader_url: &str,
    client: &reqwest::Client,
    run: [&str; 3],
    output: &ToolOutput,
) -> Result<(), String> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let expires = now + READ_TOKEN_SECONDS;
    let token = keys.outputs_read_token(run, &output.name, expires);
    let url = format!(
        "{}{}/{}?expires={expires}",
        leader_url.trim_end_matches('/'),
        super::run_path(run[0], run[1], run[2]),
        output.name
    );
    let mut response = client.get(&url).bearer_auth(token).send().await.map_err(|err| err.to_string())?;
    if !response.status().is_success() {
        return Err(format!("the leader answered {}", response.status()));
    }
    let data = Path::from(tool_outputs::object_key(run[0], run[2], &output.name));
    let mut writer = BufWriter::with_capacity(outputs.store().clone(), data, super::store::PART_BYTES);
    let (mut size, mut digest) = (0u64, Sha256::new());
    let copied = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                size += chunk.len() as u64;
                if size > output.size {
                    break Err(format!("the leader sent more than the {} bytes recorded", output.size));
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
            .ok_or_else(|| "the leader's bytes are not what the run recorded".to_string())
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

    /// A standby copies what the run recorded from the leader's server, and
    /// keeps nothing the leader serves that differs from the record.
    #[tokio::test]
    async fn a_standby_copies_the_recorded_files_from_the_leaders_server() {
        // The process's TLS provider, as main installs it (reqwest needs one).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let keys = mining_api::ownership::OwnershipKeys::new(vec![7; 32], None).unwrap();
        let (leader, standby) = (in_memory(), in_memory());
        let body = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"n,v\n1,1\n"))]);
        let stored = leader.upload(["ns", "r", "u"], "", "data.csv", Some("text/csv"), body).await.unwrap();
        let (runs, mut writer) = kube::runtime::reflector::store();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(super::super::server::serve_on(listener, leader.clone(), keys.clone(), runs.clone()));
        let client = reqwest::Client::new();
        let mut held = HashSet::new();

        // A record the leader's bytes do not match: nothing is kept.
        let forged = ToolOutput { sha256: "00".repeat(32), ..stored.clone() };
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(
            (*run(ToolRunPhase::Succeeded, vec![forged])).clone(),
        ));
        assert_eq!(copy_missing(&standby, &runs, &keys, &url, &client, &mut held).await, 1);
        assert!(standby.recorded("ns", "u").await.unwrap().is_empty());

        // The run's own record: copied, then served by the standby as recorded.
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(
            (*run(ToolRunPhase::Succeeded, vec![stored.clone()])).clone(),
        ));
        assert_eq!(copy_missing(&standby, &runs, &keys, &url, &client, &mut held).await, 0);
        assert_eq!(standby.recorded("ns", "u").await.unwrap(), vec![stored.clone()]);
        let (_, bytes) = standby.read("ns", "u", "data.csv").await.unwrap();
        let bytes: Vec<bytes::Bytes> = futures::TryStreamExt::try_collect(bytes).await.unwrap();
        assert_eq!(bytes.concat(), b"n,v\n1,1\n");
        // Held: the next pass asks the leader for nothing.
        assert_eq!(copy_missing(&standby, &runs, &keys, "http://127.0.0.1:1", &client, &mut held).await, 0);
    }
}
