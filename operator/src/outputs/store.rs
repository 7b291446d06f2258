//! The outputs store (I/O): one `object_store` behind every kind of place —
//! a directory (the embedded default) or an S3-compatible service — and the
//! bounds every upload is held to as it streams in.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use mining_api::tool_outputs::{self, MAX_OUTPUTS, ToolOutput};
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Semaphore;

/// The bounds of what runs may store.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub file_bytes: u64,
    pub run_bytes: u64,
    pub total_bytes: u64,
    /// Uploads streaming at once (each holds up to a multipart part in memory).
    pub uploads_at_once: usize,
    /// What the runs of one party (an MCP caller; unproven runs: one more) may hold.
    pub caller_bytes: u64,
    /// Uploads of one party's runs streaming at once.
    pub uploads_per_caller: usize,
}

impl Limits {
    /// The limits the operator's flags set.
    pub fn of(settings: &crate::config::OutputSettings) -> Self {
        let uploads_at_once = settings.uploads_at_once as usize;
        Self {
            file_bytes: settings.max_file_bytes,
            run_bytes: settings.max_run_bytes,
            total_bytes: settings.max_total_bytes,
            uploads_at_once,
            caller_bytes: settings.max_caller_bytes.unwrap_or(settings.max_total_bytes / 4),
            uploads_per_caller: settings
                .uploads_per_caller
                .map_or((uploads_at_once / 4).max(1), |n| n as usize),
        }
    }
}

/// How long an upload may send nothing before it is cut.
pub const IDLE_UPLOAD: Duration = Duration::from_secs(60);
/// The slowest an upload may average once past [`RATE_GRACE`]: one byte
/// every 15 s held an upload slot for ever (red team, round 5).
pub const MIN_UPLOAD_BYTES_PER_SECOND: u64 = 64 << 10;
/// How long an upload may take before its average rate counts.
pub const RATE_GRACE: Duration = Duration::from_secs(10);

/// How long to wait for an upload's next bytes, `elapsed` into it with
/// `size` received, and whether that wait is set by the minimum rate
/// rather than by idleness (pure).
pub fn patience(elapsed: Duration, size: u64) -> (Duration, bool) {
    let earned = RATE_GRACE.max(Duration::from_secs_f64(size as f64 / MIN_UPLOAD_BYTES_PER_SECOND as f64));
    let left = earned.saturating_sub(elapsed);
    if left < IDLE_UPLOAD { (left, true) } else { (IDLE_UPLOAD, false) }
}
/// Longest meta document read back (a recorded [`ToolOutput`] is ~300 bytes).
const MAX_META_BYTES: u64 = 4096;
/// Part size of multipart uploads: what one upload holds in memory at most.
pub(super) const PART_BYTES: usize = 5 << 20;

/// The S3 client's HTTP: reqwest over rustls (ring) trusting the Mozilla
/// roots compiled in, because the operator's image (`FROM scratch`) has no
/// system certificates for the platform verifier to find.
#[derive(Debug)]
struct WebpkiRoots;

impl object_store::client::HttpConnector for WebpkiRoots {
    fn connect(
        &self,
        _: &object_store::ClientOptions,
    ) -> object_store::Result<object_store::client::HttpClient> {
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| object_store::Error::Generic {
            store: "S3",
            source,
        };
        let tls = telemetry::bundled_roots_tls([]).map_err(|err| failed(Box::new(err)))?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|err| failed(Box::new(err)))?;
        Ok(object_store::client::HttpClient::new(client))
    }
}

/// Why an upload or a read was refused: an HTTP status and what to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
    /// Seconds after which trying again may succeed.
    pub retry_after: Option<u64>,
}

impl Refusal {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), retry_after: None }
    }

    fn store(err: object_store::Error) -> Self {
        tracing::warn!(error = %err, "outputs store");
        Self { status: 503, message: format!("the outputs store failed: {err}"), retry_after: Some(10) }
    }
}

pub struct Outputs {
    store: Arc<dyn ObjectStore>,
    limits: Limits,
    /// Bytes stored, as counted by the last sweep plus this replica's uploads since.
    used: AtomicU64,
    uploads: Semaphore,
    /// Each party's uploads streaming and bytes stored (the sweep recounts the bytes).
    parties: std::sync::Mutex<std::collections::HashMap<String, PartyUse>>,
}

/// What one party's runs use of the store.
#[derive(Debug, Default, Clone, Copy)]
struct PartyUse {
    streaming: usize,
    bytes: u64,
}

/// One of a party's upload slots, given back when dropped.
struct PartySlot<'a> {
    outputs: &'a Outputs,
    party: String,
}

impl Drop for PartySlot<'_> {
    fn drop(&mut self) {
        let mut parties = self.outputs.parties.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(usage) = parties.get_mut(&self.party) {
            usage.streaming = usage.streaming.saturating_sub(1);
        }
    }
}

impl Outputs {
    /// The store `url` names: `file:///DIR` (made if missing) or
    /// `s3://BUCKET[/PREFIX]` (credentials, region and endpoint from the
    /// `AWS_*` environment).
    pub fn open(url: &str, limits: Limits) -> Result<Self, String> {
        let store: Arc<dyn ObjectStore> = if let Some(dir) = url.strip_prefix("file://") {
            std::fs::create_dir_all(dir)
                .map_err(|err| format!("cannot make the outputs directory {dir}: {err}"))?;
            Arc::new(
                object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(|err| format!("outputs store {url}: {err}"))?,
            )
        } else if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let s3 = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_http_connector(WebpkiRoots)
                .build()
                .map_err(|err| format!("outputs store {url}: {err}"))?;
            match prefix.trim_matches('/') {
                "" => Arc::new(s3),
                prefix => Arc::new(object_store::prefix::PrefixStore::new(s3, prefix)),
            }
        } else {
            return Err(format!("outputs store {url}: use file:///DIR or s3://BUCKET/PREFIX"));
        };
        Ok(Self::with_store(store, limits))
    }

    pub fn with_store(store: Arc<dyn ObjectStore>, limits: Limits) -> Self {
        Self {
            store,
            limits,
            used: AtomicU64::new(0),
            uploads: Semaphore::new(limits.uploads_at_once.max(1)),
            parties: Default::default(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub(super) fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    pub(super) fn set_used(&self, bytes: u64) {
        self.used.store(bytes, Ordering::Relaxed);
    }

    /// The bytes each party's runs hold, as the sweep counted them.
    pub(super) fn set_party_bytes(&self, counted: std::collections::HashMap<String, u64>) {
        let mut parties = self.parties.lock().unwrap_or_else(|p| p.into_inner());
        parties.retain(|_, usage| usage.streaming > 0);
        for usage in parties.values_mut() {
            usage.bytes = 0;
        }
        for (party, bytes) in counted {
            parties.entry(party).or_default().bytes = bytes;
        }
    }

    /// One of `party`'s upload slots, or the refusal naming its limit.
    fn party_slot(&self, party: &str) -> Result<PartySlot<'_>, Refusal> {
        let mut parties = self.parties.lock().unwrap_or_else(|p| p.into_inner());
        let usage = parties.entry(party.to_string()).or_default();
        if usage.streaming >= self.limits.uploads_per_caller {
            return Err(Refusal {
                status: 503,
                message: format!(
                    "this caller's runs have {} uploads streaming, the most one caller may have at once; retry \
                     when one ends",
                    self.limits.uploads_per_caller
                ),
                retry_after: Some(5),
            });
        }
        usage.streaming += 1;
        Ok(PartySlot { outputs: self, party: party.to_string() })
    }

    /// Counts `bytes` more for `party`, unless that passes its share.
    fn add_party_bytes(&self, party: &str, bytes: u64) -> Result<(), Refusal> {
        let mut parties = self.parties.lock().unwrap_or_else(|p| p.into_inner());
        let usage = parties.entry(party.to_string()).or_default();
        if usage.bytes + bytes > self.limits.caller_bytes {
            return Err(Refusal {
                status: 507,
                message: format!(
                    "this caller's runs' files would exceed {} bytes, one caller's share of the store; retry \
                     once its older runs expire",
                    self.limits.caller_bytes
                ),
                retry_after: Some(60),
            });
        }
        usage.bytes += bytes;
        Ok(())
    }

    fn sub_party_bytes(&self, party: &str, bytes: u64) {
        let mut parties = self.parties.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(usage) = parties.get_mut(party) {
            usage.bytes = usage.bytes.saturating_sub(bytes);
        }
    }

    /// What the store holds for the run `uid` in `namespace`, as recorded
    /// when each file was stored, sorted by name.
    pub async fn recorded(&self, namespace: &str, uid: &str) -> Result<Vec<ToolOutput>, Refusal> {
        let prefix = Path::from(format!("{}/.meta", tool_outputs::run_prefix(namespace, uid)));
        let metas: Vec<_> = self
            .store
            .list(Some(&prefix))
            .take(MAX_OUTPUTS + 1)
            .try_collect()
            .await
            .map_err(Refusal::store)?;
        if metas.len() > MAX_OUTPUTS {
            return Err(Refusal::new(413, format!("the run stored more than {MAX_OUTPUTS} files")));
        }
        let mut outputs = Vec::with_capacity(metas.len());
        for meta in metas {
            if meta.size > MAX_META_BYTES {
                continue;
            }
            let bytes = self
                .store
                .get(&meta.location)
                .await
                .map_err(Refusal::store)?
                .bytes()
                .await
                .map_err(Refusal::store)?;
            let Ok(output) = serde_json::from_slice::<ToolOutput>(&bytes) else { continue };
            // Only what an upload could have recorded, under its own name.
            if meta.location.filename() != Some(output.name.as_str())
                || tool_outputs::check_recorded(std::slice::from_ref(&output)).is_err()
            {
                continue;
            }
            outputs.push(output);
        }
        outputs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(outputs)
    }

    /// Stores `body` as the file `name` of `run` (namespace, name, uid),
    /// a run of `party` (its proven caller's label, "" without a proof),
    /// within every bound, and records what it stored. A file of the same
    /// name is replaced; a refused upload leaves nothing behind.
    pub async fn upload<E: std::fmt::Display>(
        &self,
        run: [&str; 3],
        party: &str,
        name: &str,
        content_type: Option<&str>,
        body: impl Stream<Item = Result<Bytes, E>> + Unpin,
    ) -> Result<ToolOutput, Refusal> {
        let [namespace, _, uid] = run;
        tool_outputs::check_name(name).map_err(|why| Refusal::new(400, why))?;
        let media_type = tool_outputs::media_type(content_type).ok_or_else(|| {
            Refusal::new(
                400,
                "Content-Type is not a media type (type/subtype); leave it out for octet-stream",
            )
        })?;
        // The caller's share first: a refusal then never names a slot
        // another caller's runs hold.
        let _party_slot = self.party_slot(party)?;
        let Ok(_permit) = self.uploads.try_acquire() else {
            return Err(Refusal {
                status: 503,
                message: format!(
                    "{} uploads are streaming (the operator's limit); retry",
                    self.limits.uploads_at_once
                ),
                retry_after: Some(5),
            });
        };
        let existing = self.recorded(namespace, uid).await?;
        let replaced = existing.iter().find(|o| o.name == name).map(|o| o.size);
        if replaced.is_none() && existing.len() >= MAX_OUTPUTS {
            return Err(Refusal::new(413, format!("a run may hand over at most {MAX_OUTPUTS} files")));
        }
        let others: u64 = existing.iter().filter(|o| o.name != name).map(|o| o.size).sum();
        let meta_path = Path::from(tool_outputs::meta_key(namespace, uid, name));
        // The old record goes first: a replaced file is never served with
        // another's digest, and a failed replacement leaves no record.
        if replaced.is_some() {
            let _ = self.store.delete(&meta_path).await;
        }
        let data_path = Path::from(tool_outputs::object_key(namespace, uid, name));
        let mut writer = BufWriter::with_capacity(self.store.clone(), data_path, PART_BYTES);
        let (mut size, mut digest) = (0u64, Sha256::new());
        let mut body = body;
        let started = tokio::time::Instant::now();
        let outcome = loop {
            let (wait, by_rate) = patience(started.elapsed(), size);
            let chunk = match tokio::time::timeout(wait, body.next()).await {
                Err(_) if by_rate => {
                    break Err(Refusal::new(
                        408,
                        format!(
                            "the upload is slower than {} bytes/s on average (after its first {} s); send faster",
                            MIN_UPLOAD_BYTES_PER_SECOND,
                            RATE_GRACE.as_secs()
                        ),
                    ));
                }
                Err(_) => {
                    break Err(Refusal::new(
                        408,
                        format!("the upload sent nothing for {}s", IDLE_UPLOAD.as_secs()),
                    ));
                }
                Ok(None) => break Ok(()),
                Ok(Some(Err(err))) => break Err(Refusal::new(400, format!("the upload broke off: {err}"))),
                Ok(Some(Ok(chunk))) => chunk,
            };
            // `size` counts only what the party's and the store's counts hold.
            let next = size + chunk.len() as u64;
            if next > self.limits.file_bytes {
                break Err(Refusal::new(
                    413,
                    format!("{name} is larger than the limit of {} bytes per file", self.limits.file_bytes),
                ));
            }
            if others + next > self.limits.run_bytes {
                break Err(Refusal::new(
                    413,
                    format!("the run's files exceed the limit of {} bytes per run", self.limits.run_bytes),
                ));
            }
            // Counted for the party, then for the store: a refusal by either
            // leaves both counting exactly `size`, which the failure takes back.
            if let Err(refusal) = self.add_party_bytes(party, chunk.len() as u64) {
                break Err(refusal);
            }
            size = next;
            let before = self.used.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            if before + chunk.len() as u64 > self.limits.total_bytes {
                break Err(Refusal {
                    status: 507,
                    message: format!(
                        "the outputs store is full (its limit is {} bytes); retry once older runs expire",
                        self.limits.total_bytes
                    ),
                    retry_after: Some(60),
                });
            }
            digest.update(&chunk);
            if let Err(err) = writer.write_all(&chunk).await {
                break Err(Refusal::new(503, format!("the outputs store failed: {err}")));
            }
        };
        let stored = match outcome {
            Ok(()) => writer
                .shutdown()
                .await
                .map_err(|err| Refusal::new(503, format!("the outputs store failed: {err}"))),
            Err(refusal) => Err(refusal),
        };
        if let Err(refusal) = stored {
            let _ = writer.abort().await;
            self.used.fetch_sub(size.min(self.used.load(Ordering::Relaxed)), Ordering::Relaxed);
            self.sub_party_bytes(party, size);
            return Err(refusal);
        }
        let output = ToolOutput {
            name: name.to_string(),
            media_type,
            size,
            sha256: digest.finalize().iter().map(|b| format!("{b:02x}")).collect(),
        };
        let meta = serde_json::to_vec(&output).expect("a ToolOutput serialises");
        self.store.put(&meta_path, PutPayload::from(meta)).await.map_err(Refusal::store)?;
        if let Some(old) = replaced {
            self.used.fetch_sub(old.min(self.used.load(Ordering::Relaxed)), Ordering::Relaxed);
            self.sub_party_bytes(party, old);
        }
        Ok(output)
    }

    /// The file `name` of the run `uid` as recorded, and its bytes as a
    /// stream that fails at the end if they are not what was recorded.
    pub async fn read(
        &self,
        namespace: &str,
        uid: &str,
        name: &str,
    ) -> Result<(ToolOutput, impl Stream<Item = Result<Bytes, std::io::Error>> + use<>), Refusal> {
        tool_outputs::check_name(name).map_err(|why| Refusal::new(404, why))?;
        let recorded = self.recorded(namespace, uid).await?;
        let Some(output) = recorded.into_iter().find(|o| o.name == name) else {
            return Err(Refusal::new(404, format!("the run has no file {name}")));
        };
        let path = Path::from(tool_outputs::object_key(namespace, uid, name));
        let got = match self.store.get(&path).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(Refusal::new(404, format!("the run has no file {name}")));
            }
            Err(err) => return Err(Refusal::store(err)),
        };
        Ok((output.clone(), checked(got.into_stream(), output)))
    }

    /// Deletes every file of the run `uid`.
    pub async fn forget(&self, namespace: &str, uid: &str) {
        let prefix = Path::from(tool_outputs::run_prefix(namespace, uid));
        self.delete_where(&prefix, |_| true).await;
    }

    /// Deletes what lies under `prefix` and `doomed` picks; returns the bytes kept.
    pub(super) async fn delete_where(&self, prefix: &Path, doomed: impl Fn(&Path) -> bool) -> u64 {
        let mut listed = self.store.list(Some(prefix));
        let mut kept = 0;
        while let Some(item) = listed.next().await {
            match item {
                Ok(meta) if doomed(&meta.location) => {
                    if let Err(err) = self.store.delete(&meta.location).await {
                        tracing::warn!(error = %err, object = %meta.location, "cannot delete a stored output");
                    }
                }
                Ok(meta) => kept += meta.size,
                Err(err) => {
                    tracing::warn!(error = %err, prefix = %prefix, "cannot list stored outputs");
                    break;
                }
            }
        }
        kept
    }
}

/// `bytes`, failing at the end unless they are `output.size` bytes with its digest:
/// a file changed in the store after it was recorded is never served whole.
fn checked(
    bytes: impl Stream<Item = object_store::Result<Bytes>> + Send + 'static,
    output: ToolOutput,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
    let state = (Box::pin(bytes), Sha256::new(), 0u64, output, false);
    futures::stream::unfold(state, |(mut bytes, mut digest, mut size, output, done)| async move {
        if done {
            return None;
        }
        match bytes.next().await {
            Some(Ok(chunk)) => {
                digest.update(&chunk);
                size += chunk.len() as u64;
                Some((Ok(chunk), (bytes, digest, size, output, false)))
            }
            Some(Err(err)) => Some((Err(std::io::Error::other(err)), (bytes, digest, size, output, true))),
            None => {
                let hex: String = digest.clone().finalize().iter().map(|b| format!("{b:02x}")).collect();
                if size == output.size && hex == output.sha256 {
                    None
                } else {
                    let err = std::io::Error::other(format!(
                        "{} changed in the store since it was recorded",
                        output.name
                    ));
                    Some((Err(err), (bytes, digest, size, output, true)))
                }
            }
        }
    })
}
