//! What a reconcile observes of a workflow's Jobs: from the Job store, with
//! expectations for Jobs created but not seen yet, and the results of
//! finished ones from their Pods.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use mining_api::pod_start::Blocked;
use mining_api::{MiningWorkflow, Work as _, annotations, labels};
use tracing::warn;

use crate::memory::Memory;
use crate::mining::provenance::job_mismatch;
use crate::naming::workflow_label;
use crate::{Error, Result};

/// What a block's Job has come to.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockJob {
    /// Created and not finished (or being deleted).
    Running,
    /// Completed; `message` is its Pod's termination message, if any.
    Succeeded { message: Option<String>, started: Option<Time>, finished: Option<Time> },
    /// Failed for good (retries or deadline exhausted).
    Failed { reason: String, message: String },
    /// Created and not finished, and its Pods cannot start (see
    /// [`mining_api::pod_start`]): the plan decides whether it waits or fails.
    Blocked(Blocked),
}

impl BlockJob {
    /// Whether the Job still runs (or waits to): not finished either way.
    pub fn is_running(&self) -> bool {
        matches!(self, BlockJob::Running | BlockJob::Blocked(_))
    }
}

/// Since when the workflow's unfinished Jobs wait for a node, when every
/// one of them does (none of their Pods runs): what fair share at the node
/// reads (`admission::node`).
pub fn waiting_for_node(
    blocks: &BTreeMap<u32, BlockJob>,
    ranges: &BTreeMap<u32, Vec<RangeJob>>,
) -> Option<k8s_openapi::jiff::Timestamp> {
    let unfinished = (blocks.values())
        .chain(ranges.values().flatten().map(|range| &range.state))
        .filter(|job| job.is_running());
    let mut since: Option<k8s_openapi::jiff::Timestamp> = None;
    for job in unfinished {
        match job {
            BlockJob::Blocked(blocked) if blocked.cause == mining_api::pod_start::Cause::NoCapacity => {
                since = Some(since.map_or(blocked.since, |s| s.min(blocked.since)));
            }
            _ => return None,
        }
    }
    since
}

/// What a reconcile observed of a workflow's Jobs.
#[derive(Debug, Default)]
pub struct ObservedJobs {
    /// Whole-block Jobs by block.
    pub blocks: BTreeMap<u32, BlockJob>,
    /// Ranged Jobs by block.
    pub ranges: BTreeMap<u32, Vec<RangeJob>>,
    /// Look again after this long though nothing watched changes (a Job
    /// that made no Pod yet, or whose Pods wait to start).
    pub look_again: Option<Duration>,
}

/// One range's Job as observed.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeJob {
    pub name: String,
    pub start: u64,
    pub count: u64,
    pub state: BlockJob,
}

impl RangeJob {
    pub(crate) fn nonces(&self) -> Range<u64> {
        self.start..self.start.saturating_add(self.count)
    }
}

/// Where observations come from: the controller's stores, the client for
/// live reads, and the Jobs created but not seen yet. Passed in, so that
/// observing depends on nothing of the controller's.
pub struct JobSources<'a> {
    pub client: &'a Client,
    pub jobs: &'a Store<Job>,
    pub pods: &'a Store<Pod>,
    /// Jobs created and not seen yet.
    pub memory: &'a Memory,
    /// The Job the operator builds for a block (and nonce range), when it
    /// can say: a stored Job is read only when its Pod template is that one.
    pub built: &'a (dyn Fn(u32, Option<(u64, u64)>) -> Option<Job> + Sync),
}

/// Longest Pod message carried into a workflow's status.
const MAX_POD_MESSAGE: usize = 512;

/// This workflow's Jobs by block, each classified, from the Job store; only
/// a finished Job whose block is not verified yet has its Pods read, live
/// (not from a cache), so a result is never missed for being late. A Job
/// the workflow controls whose Pod template is not what the operator builds
/// is an error ([`Error::ForeignJob`]): its block fails, and it is never read.
pub async fn observe_jobs(
    workflow: &MiningWorkflow,
    name: &str,
    namespace: &str,
    sources: &JobSources<'_>,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<ObservedJobs> {
    let label = workflow_label(name);
    let uid = workflow.metadata.uid.as_deref().unwrap_or_default();
    // Blocks already verified in the status need no second look (and no Pod
    // reads: those would grow with the chain on every reconcile).
    let verified = workflow.status.as_ref().map_or(0, |s| s.blocks.len() as u32);
    let mut observed = BTreeMap::new();
    let mut ranges: BTreeMap<u32, Vec<RangeJob>> = BTreeMap::new();
    let mut look_again: Option<Duration> = None;
    let mut seen = Vec::new();
    for job in sources.jobs.state() {
        if job.metadata.namespace.as_deref() != Some(namespace)
            || job.labels().get(labels::WORKFLOW) != Some(&label)
        {
            continue;
        }
        seen.push(job.name_any());
        // Only Jobs this workflow (this uid) controls: a same-named predecessor's are not ours.
        let ours = job.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == uid);
        let block = job.labels().get(labels::BLOCK).and_then(|b| b.parse::<u32>().ok());
        let (true, Some(block)) = (ours, block) else { continue };
        if block <= verified {
            continue;
        }
        let range = match job_range(&job) {
            Ok(range) => range,
            Err(why) => {
                warn!(workflow = %name, job = %job.name_any(), %why, "ignoring a Job with a garbled range");
                continue;
            }
        };
        // A Job for a block the operator would not build now is never read.
        let Some(built) = (sources.built)(block, range) else { continue };
        if let Some(why) = job_mismatch(&job, &built) {
            return Err(Error::ForeignJob { name: job.name_any(), why });
        }
        let (state, again) = classify_job(&job, &built, sources, now).await?;
        look_again = match (look_again, again) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match range {
            None => {
                observed.insert(block, state);
            }
            Some((start, count)) => {
                ranges.entry(block).or_default().push(RangeJob { name: job.name_any(), start, count, state });
            }
        }
    }
    // Created but not yet seen: running, as far as planning goes.
    for (job, e) in sources.memory.expected_jobs(uid, verified, &seen) {
        match e.range {
            None => {
                observed.entry(e.block).or_insert(BlockJob::Running);
            }
            Some((start, count)) => ranges.entry(e.block).or_default().push(RangeJob {
                name: job,
                start,
                count,
                state: BlockJob::Running,
            }),
        }
    }
    Ok(ObservedJobs { blocks: observed, ranges, look_again })
}

/// The nonce range a Job mines, from its annotations (`None`: a whole block).
fn job_range(job: &Job) -> std::result::Result<Option<(u64, u64)>, String> {
    let read =
        |key: &str| job.annotations().get(key).map(|v| v.parse::<u64>().map_err(|e| format!("{key}: {e}")));
    match (read(annotations::NONCE_START), read(annotations::NONCE_COUNT)) {
        (None, None) => Ok(None),
        (Some(start), Some(count)) => Ok(Some((start?, count?))),
        _ => Err("only one of the range annotations is set".into()),
    }
}

/// What `job` has come to, and when to look again at one that cannot start.
async fn classify_job(
    job: &Job,
    built: &Job,
    sources: &JobSources<'_>,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<(BlockJob, Option<Duration>)> {
    let state = finished_state(job, sources).await?;
    if state != BlockJob::Running || job.metadata.deletion_timestamp.is_some() {
        return Ok((state, None));
    }
    let own = crate::work::pods::cached_own(sources.pods, job, MiningWorkflow::READS);
    let own: Vec<&Pod> = own.iter().map(AsRef::as_ref).collect();
    let starting = crate::work::pod_start::observe(sources.client, job, built, &own, now).await;
    let state = starting.blocked.map_or(BlockJob::Running, BlockJob::Blocked);
    Ok((state, starting.look_again))
}

async fn finished_state(job: &Job, sources: &JobSources<'_>) -> Result<BlockJob> {
    let status = job.status.clone().unwrap_or_default();
    let condition = |type_: &str| {
        status.conditions.iter().flatten().find(|c| c.type_ == type_ && c.status == "True").cloned()
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(BlockJob::Running);
    }
    if condition("Complete").is_some() {
        let succeeded_message = |pods: &[Pod]| {
            pods.iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
                .find_map(terminated_message)
        };
        // The Pod store usually has the result already; when it lags, read live.
        let message = match succeeded_message(&cached_job_pods(job, sources.pods)) {
            Some(message) => Some(message),
            None => succeeded_message(&job_pods(job, sources.client).await?),
        };
        return Ok(BlockJob::Succeeded {
            message,
            started: status.start_time,
            finished: status.completion_time,
        });
    }
    if let Some(failed) = condition("Failed") {
        // Live: the most recent failed Pod says best what went wrong.
        let pods = job_pods(job, sources.client).await?;
        let last_message = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
            .max_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0))
            .and_then(terminated_message)
            .unwrap_or_else(|| failed.message.clone().unwrap_or_default());
        let message = mining_api::pow::clip(last_message.trim(), MAX_POD_MESSAGE).to_string();
        return Ok(BlockJob::Failed { reason: failed.reason.unwrap_or_else(|| "Failed".into()), message });
    }
    Ok(BlockJob::Running)
}

/// The Job's Pods as the Pod store has them.
fn cached_job_pods(job: &Job, pods: &Store<Pod>) -> Vec<Pod> {
    let own = crate::work::pods::cached_own(pods, job, MiningWorkflow::READS);
    own.into_iter().map(|pod| pod.as_ref().clone()).collect()
}

/// The Job's own Pods from the API server, a page at a time (a Job's own
/// are few: its backoff limit bounds them; anyone's look-alikes are not).
async fn job_pods(job: &Job, client: &Client) -> Result<Vec<Pod>> {
    let pods: Api<Pod> =
        Api::namespaced(client.clone(), job.metadata.namespace.as_deref().unwrap_or_default());
    let mut own = Vec::new();
    crate::work::pods::each_own_page(&pods, job, MiningWorkflow::READS, |page| {
        own.extend(page.into_iter().cloned());
    })
    .await?;
    Ok(own)
}

fn terminated_message(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let status = statuses.iter().find(|s| s.name == "miner").or(statuses.first())?;
    status.state.as_ref()?.terminated.as_ref()?.message.clone().filter(|m| !m.trim().is_empty())
}
