//! Per-caller quotas that hold across every replica: unfinished workflows,
//! and starts per minute.
//!
//! A watch cache cannot be the arbiter (two replicas, or two concurrent
//! calls on one, each see the other's create too late), so every start goes
//! through one small ledger per caller, a Lease in the workflows' namespace,
//! written with its `resourceVersion`: the API server lets exactly one of
//! two concurrent writers through, and the other re-reads and decides again.
//! The ledger holds the caller's starts of the last minute and the names it
//! reserved whose workflows a fresh (quorum) list may not show yet; the
//! unfinished workflows themselves are counted from that list.
//!
//! The ledger carries the frontend's MAC: one that anybody else wrote counts
//! as empty, so whoever may edit Leases there can at most forget a caller's
//! reservations, never fill them to lock the caller out.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, PostParams};
use mining_api::{MiningWorkflow, labels};
use serde::{Deserialize, Serialize};

use crate::ids::Caller;
use crate::ownership::OwnershipKeys;
use crate::workflows::{API_TIMEOUT, MANAGER};

/// The window of `--max-starts-per-minute`.
pub const RATE_WINDOW_SECONDS: i64 = 60;
/// How long a reservation counts while the list does not show its workflow
/// (the create's own time limit, and then some).
pub const RESERVATION_SECONDS: i64 = 3 * API_TIMEOUT.as_secs() as i64;
/// Writers that lose a race re-read and decide again, at most this often,
/// after a random pause that grows with each attempt (so a burst of one
/// caller's starts spreads out instead of colliding again).
const ATTEMPTS: u32 = 16;
const BACKOFF_STEP_MS: u64 = 20;

/// The quotas, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    pub max_running: u32,
    pub max_starts_per_minute: u32,
}

/// One caller's ledger (the Lease's annotation, as JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Unix seconds of the starts within the last minute.
    #[serde(default)]
    pub starts: Vec<i64>,
    /// Workflow names reserved, with the unix second they were reserved at.
    #[serde(default)]
    pub reserved: BTreeMap<String, i64>,
}

/// Why a start is refused; the text says which quota and when to retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaRefusal {
    #[error(
        "you already have {unfinished} unfinished mining workflows (the limit is {limit}); retry when one \
         has finished (wait for it with get_mining_result) or stop one with cancel_mining"
    )]
    Running { unfinished: usize, limit: u32 },
    #[error(
        "you started {limit} mining workflows within the last minute (the limit is {limit} per minute); \
         retry in {retry_after_seconds} seconds"
    )]
    Rate { limit: u32, retry_after_seconds: i64 },
    #[error(
        "could not start mining: your quota could not be checked now (the Kubernetes API: {0}); nothing \
         was created, retry in a few seconds"
    )]
    Unavailable(String),
}

impl QuotaRefusal {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Running { .. } => "running",
            Self::Rate { .. } => "rate",
            Self::Unavailable(_) => "unavailable",
        }
    }
}

/// Decides one start (pure): the ledger to write if `name` may start now.
/// `listed` names every workflow of the caller the API server has (any
/// phase); `unfinished` those of them not finished.
pub fn admit(
    ledger: &Ledger,
    listed: &HashSet<String>,
    unfinished: usize,
    name: &str,
    now: i64,
    quotas: Quotas,
) -> Result<Ledger, QuotaRefusal> {
    let mut next = Ledger {
        starts: ledger
            .starts
            .iter()
            .copied()
            .filter(|at| now.saturating_sub(*at) < RATE_WINDOW_SECONDS)
            .collect(),
        reserved: ledger
            .reserved
            .iter()
            .filter(|(reserved, at)| {
                !listed.contains(*reserved) && now.saturating_sub(**at) < RESERVATION_SECONDS
            })
            .map(|(reserved, at)| (reserved.clone(), *at))
            .collect(),
    };
    if next.starts.len() >= quotas.max_starts_per_minute as usize {
        let oldest = next.starts.iter().copied().min().unwrap_or(now);
        let retry_after_seconds = oldest.saturating_add(RATE_WINDOW_SECONDS).saturating_sub(now).max(1);
        return Err(QuotaRefusal::Rate { limit: quotas.max_starts_per_minute, retry_after_seconds });
    }
    let counted = unfinished.saturating_add(next.reserved.len());
    if counted >= quotas.max_running as usize {
        return Err(QuotaRefusal::Running { unfinished: counted, limit: quotas.max_running });
    }
    next.starts.push(now);
    next.reserved.insert(name.to_string(), now);
    Ok(next)
}

/// The ledger Lease of a caller (its label is a digest: no name in it).
pub fn lease_name(caller: &Caller) -> String {
    format!("mcp-quota-{}", caller.label)
}

/// Where the ledger, and the frontend's MAC over it, are kept on the Lease.
const LEDGER: &str = "mining-operator.dev/quota-ledger";
const LEDGER_PROOF: &str = "mining-operator.dev/quota-proof";

/// The ledger a Lease holds, if the frontend wrote it; else an empty one.
fn read_ledger(keys: &OwnershipKeys, namespace: &str, lease: &Lease) -> Ledger {
    let annotations = lease.metadata.annotations.as_ref();
    let text = annotations.and_then(|a| a.get(LEDGER)).map(String::as_str).unwrap_or_default();
    let proof = annotations.and_then(|a| a.get(LEDGER_PROOF)).map(String::as_str).unwrap_or_default();
    let name = lease.metadata.name.as_deref().unwrap_or_default();
    if !keys.proves_ledger(namespace, name, text, proof) {
        return Ledger::default();
    }
    serde_json::from_str(text).unwrap_or_default()
}

fn write_ledger(keys: &OwnershipKeys, namespace: &str, lease: &mut Lease, ledger: &Ledger) {
    let text = serde_json::to_string(ledger).unwrap_or_default();
    let name = lease.metadata.name.clone().unwrap_or_default();
    let proof = keys.ledger_proof(namespace, &name, &text);
    let annotations = lease.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(LEDGER.into(), text);
    annotations.insert(LEDGER_PROOF.into(), proof);
}

/// Reserves a start of `name` for `caller`, or says which quota refuses it.
/// `owned` tells the caller's own workflows from objects that merely carry
/// its label.
pub async fn reserve(
    leases: &Api<Lease>,
    workflows: &Api<MiningWorkflow>,
    keys: &OwnershipKeys,
    caller: &Caller,
    name: &str,
    quotas: Quotas,
    owned: impl Fn(&MiningWorkflow) -> bool,
) -> Result<(), QuotaRefusal> {
    let namespace = workflows.namespace().unwrap_or_default().to_string();
    let lease_name = lease_name(caller);
    let unavailable =
        |what: &str, err: &dyn std::fmt::Display| QuotaRefusal::Unavailable(format!("{what}: {err}"));
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(jittered_pause(attempt)).await;
        }
        let existing =
            timed(leases.get_opt(&lease_name)).await.map_err(|e| unavailable("reading the ledger", &e))?;
        // A quorum read: a cache could miss a create another replica just made.
        let selector = format!("{}={}", labels::CALLER, caller.label);
        let list = timed(workflows.list(&ListParams::default().labels(&selector)))
            .await
            .map_err(|e| unavailable("listing your workflows", &e))?;
        let listed: HashSet<String> = list.items.iter().filter_map(|w| w.metadata.name.clone()).collect();
        let unfinished = list.items.iter().filter(|w| owned(w) && !w.is_finished()).count();
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let ledger = existing.as_ref().map(|lease| read_ledger(keys, &namespace, lease)).unwrap_or_default();
        let next = admit(&ledger, &listed, unfinished, name, now, quotas)?;
        let written = match existing {
            Some(mut lease) => {
                write_ledger(keys, &namespace, &mut lease, &next);
                timed(leases.replace(&lease_name, &PostParams::default(), &lease)).await
            }
            None => {
                let mut lease = Lease::default();
                lease.metadata.name = Some(lease_name.clone());
                lease.metadata.labels = Some([(labels::MANAGED_BY.to_string(), MANAGER.to_string())].into());
                write_ledger(keys, &namespace, &mut lease, &next);
                timed(leases.create(&PostParams::default(), &lease)).await
            }
        };
        match written {
            Ok(_) => return Ok(()),
            // Another writer got there first: decide again on what it wrote.
            Err(CallError::Api(kube::Error::Api(status))) if status.code == 409 => continue,
            Err(err) => return Err(unavailable("writing the ledger", &err)),
        }
    }
    Err(QuotaRefusal::Unavailable("too many starts of yours at once".into()))
}

/// A random pause of up to `attempt` steps.
fn jittered_pause(attempt: u32) -> std::time::Duration {
    let mut bytes = [0u8; 2];
    let random = getrandom::fill(&mut bytes).map_or(0, |()| u64::from(u16::from_le_bytes(bytes)));
    let ceiling = BACKOFF_STEP_MS.saturating_mul(u64::from(attempt.min(10)));
    std::time::Duration::from_millis(random % ceiling.max(1))
}

/// One API call's failure: the API server's answer, or none in time.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer within {API_TIMEOUT:?}")]
    Timeout,
}

async fn timed<T>(future: impl Future<Output = Result<T, kube::Error>>) -> Result<T, CallError> {
    match tokio::time::timeout(API_TIMEOUT, future).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(CallError::Timeout),
    }
}

#[cfg(test)]
mod tests;
