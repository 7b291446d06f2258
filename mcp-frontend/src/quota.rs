//! Per-caller quotas that hold across every replica: unfinished workflows,
//! and starts per minute.
//!
//! A watch cache cannot be the arbiter (two replicas, or two concurrent
//! calls on one, each see the other's create too late), so every start goes
//! through one small ledger per caller, a `MiningLedger` in the release
//! namespace (where only admins and the frontend may write), written with
//! its `resourceVersion`: the API server lets exactly one of
//! two concurrent writers through, and the other re-reads and decides again.
//! The ledger holds the caller's starts of the last minute and the workflows
//! it holds: every one started, until it is seen finished or gone. So the
//! count never depends on a cache being fresh (a lagging cache only keeps a
//! finished workflow counted a moment longer), and no start lists the
//! caller's workflows — of which rate × retention may be retained. Only a
//! caller without a ledger yet (new, or its ledger deleted) is listed once,
//! from the API server, to seed it.
//!
//! The ledger carries the frontend's MAC: one that anybody else wrote counts
//! as empty and is seeded again, so even an admin's edit can at most cost a
//! list, never fill a caller's ledger to lock the caller out. Replaying a
//! caller's own earlier ledger needs write access to the release namespace,
//! which no untrusted party has (a type of its own, so the frontend's rights
//! there cover its ledgers and nothing else).

use std::collections::BTreeMap;

use kube::api::{Api, PostParams};
use mining_api::{MiningLedger, MiningLedgerSpec, labels};
use serde::{Deserialize, Serialize};

use crate::ids::Caller;
use crate::kube_calls::{API_TIMEOUT, MANAGER};
use crate::ownership::OwnershipKeys;

/// The window of `--max-starts-per-minute`.
pub const RATE_WINDOW_SECONDS: i64 = 60;
/// How long a held workflow the cache has not shown yet counts before it is
/// asked for (the create's own time limit, and then some).
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

/// One caller's ledger (a `MiningLedger`'s `spec.ledger`, as JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Unix seconds of the starts within the last minute.
    #[serde(default)]
    pub starts: Vec<i64>,
    /// Workflow names reserved, with the unix second they were reserved at.
    #[serde(default)]
    pub reserved: BTreeMap<String, i64>,
    /// Of those, the calls of defined tools, with the tool's name: a tool's
    /// own limit per caller is decided here, under the same write
    /// precondition as the rest, so a burst cannot pass it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, String>,
}

/// A defined tool's limit of unfinished calls per caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimit<'a> {
    pub tool: &'a str,
    pub limit: u32,
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
    #[error(
        "you already have {unfinished} unfinished calls of {tool} (its limit is {limit}); retry when one has \
         finished (wait for it with get_tool_result) or stop one with cancel_tool_run"
    )]
    ToolRunning { tool: String, unfinished: usize, limit: u32 },
}

impl QuotaRefusal {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Running { .. } => "running",
            Self::Rate { .. } => "rate",
            Self::Unavailable(_) => "unavailable",
            Self::ToolRunning { .. } => "tool_running",
        }
    }
}

/// What is known of a workflow a ledger holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// It exists and has not finished (or cannot be read: counted).
    Unfinished,
    /// It finished, or is gone after having existed.
    Released,
    /// Not seen yet: a create in flight, or one that failed.
    NotSeen,
}

/// Decides one start (pure): the ledger to write if `name` may start now.
/// `held` says what is known of each workflow the ledger holds.
pub fn admit(
    ledger: &Ledger,
    held: impl Fn(&str) -> Held,
    name: &str,
    now: i64,
    quotas: Quotas,
) -> Result<Ledger, QuotaRefusal> {
    admit_call(ledger, held, name, None, now, quotas)
}

/// [`admit`] for a call that may be a defined tool's, under its own limit too.
pub fn admit_call(
    ledger: &Ledger,
    held: impl Fn(&str) -> Held,
    name: &str,
    tool: Option<ToolLimit<'_>>,
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
            .filter(|(reserved, at)| match held(reserved) {
                Held::Unfinished => true,
                Held::Released => false,
                // A create that never landed stops counting after a while.
                Held::NotSeen => now.saturating_sub(**at) < RESERVATION_SECONDS,
            })
            .map(|(reserved, at)| (reserved.clone(), *at))
            .collect(),
        tools: BTreeMap::new(),
    };
    next.tools = (ledger.tools.iter())
        .filter(|(reserved, _)| next.reserved.contains_key(*reserved))
        .map(|(reserved, tool)| (reserved.clone(), tool.clone()))
        .collect();
    if next.starts.len() >= quotas.max_starts_per_minute as usize {
        let oldest = next.starts.iter().copied().min().unwrap_or(now);
        let retry_after_seconds = oldest.saturating_add(RATE_WINDOW_SECONDS).saturating_sub(now).max(1);
        return Err(QuotaRefusal::Rate { limit: quotas.max_starts_per_minute, retry_after_seconds });
    }
    let counted = next.reserved.len();
    if counted >= quotas.max_running as usize {
        return Err(QuotaRefusal::Running { unfinished: counted, limit: quotas.max_running });
    }
    if let Some(ToolLimit { tool, limit }) = tool {
        let unfinished = next.tools.values().filter(|called| *called == tool).count();
        if unfinished >= limit as usize {
            return Err(QuotaRefusal::ToolRunning { tool: tool.to_string(), unfinished, limit });
        }
        next.tools.insert(name.to_string(), tool.to_string());
    }
    next.starts.push(now);
    next.reserved.insert(name.to_string(), now);
    Ok(next)
}

/// The ledger object of a caller: named by its keyed label (no name in it,
/// and none anybody without the key could compute).
pub fn ledger_name(keys: &OwnershipKeys, caller: &Caller) -> String {
    format!("mcp-quota-{}", keys.caller_label(&caller.digest))
}

/// The ledger an object holds, if the frontend wrote it (else it is seeded again).
fn read_ledger(keys: &OwnershipKeys, namespace: &str, object: &MiningLedger) -> Option<Ledger> {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    let MiningLedgerSpec { ledger, proof } = &object.spec;
    if !keys.proves_ledger(namespace, name, ledger, proof) {
        return None;
    }
    serde_json::from_str(ledger).ok()
}

fn write_ledger(keys: &OwnershipKeys, namespace: &str, object: &mut MiningLedger, ledger: &Ledger) {
    let text = serde_json::to_string(ledger).unwrap_or_default();
    let name = object.metadata.name.clone().unwrap_or_default();
    object.spec.proof = keys.ledger_proof(namespace, &name, &text);
    object.spec.ledger = text;
}

/// Where `reserve` learns what became of the work (of every kind) a
/// caller's ledger holds: only the caller's own unfinished work counts, not
/// objects that merely carry its label.
pub trait HeldWork: Sync {
    /// From the watch caches: the caller's own and unfinished, released,
    /// or not there.
    fn cached(&self, name: &str) -> Held;
    /// From the API server, for a held name the caches have not shown for
    /// long (a broken watch must not release it).
    fn fetched(&self, name: &str) -> impl Future<Output = Result<Held, CallError>> + Send;
    /// The names of the caller's unfinished work, from a quorum list (a
    /// cache could miss a create another replica just made).
    fn unfinished(&self) -> impl Future<Output = Result<Vec<String>, CallError>> + Send;
}

/// What `reserve` works with: where the ledgers are, the key behind their
/// MACs, and the quotas.
pub struct Ledgers<'a> {
    pub ledgers: &'a Api<MiningLedger>,
    pub keys: &'a OwnershipKeys,
    pub quotas: Quotas,
}

/// Reserves a start of `name` for `caller`, or says which quota refuses it.
pub async fn reserve(
    ledgers: &Ledgers<'_>,
    caller: &Caller,
    name: &str,
    tool: Option<ToolLimit<'_>>,
    work: &impl HeldWork,
) -> Result<(), QuotaRefusal> {
    let Ledgers { ledgers, keys, quotas } = *ledgers;
    let namespace = ledgers.namespace().unwrap_or_default().to_string();
    let ledger_name = ledger_name(keys, caller);
    let unavailable =
        |what: &str, err: &dyn std::fmt::Display| QuotaRefusal::Unavailable(format!("{what}: {err}"));
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(jittered_pause(attempt)).await;
        }
        let existing =
            timed(ledgers.get_opt(&ledger_name)).await.map_err(|e| unavailable("reading the ledger", &e))?;
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let ledger = match existing.as_ref().and_then(|object| read_ledger(keys, &namespace, object)) {
            Some(ledger) => ledger,
            None => {
                let unfinished = work.unfinished().await.map_err(|e| unavailable("listing your work", &e))?;
                seed(unfinished, now)
            }
        };
        let mut asked = std::collections::HashMap::new();
        for (held, at) in &ledger.reserved {
            if work.cached(held) == Held::NotSeen && now.saturating_sub(*at) >= RESERVATION_SECONDS {
                let state = work.fetched(held).await.map_err(|e| unavailable("reading your work", &e))?;
                asked.insert(held.clone(), state);
            }
        }
        let held = |held: &str| asked.get(held).copied().unwrap_or_else(|| work.cached(held));
        let next = admit_call(&ledger, held, name, tool, now, quotas)?;
        let written = match existing {
            Some(mut object) => {
                write_ledger(keys, &namespace, &mut object, &next);
                timed(ledgers.replace(&ledger_name, &PostParams::default(), &object)).await
            }
            None => {
                let mut object = MiningLedger::new(&ledger_name, MiningLedgerSpec::default());
                object.metadata.labels = Some([(labels::MANAGED_BY.to_string(), MANAGER.to_string())].into());
                write_ledger(keys, &namespace, &mut object, &next);
                timed(ledgers.create(&PostParams::default(), &object)).await
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

/// A ledger for a caller that has none: its unfinished work, each held from `now`.
fn seed(unfinished: Vec<String>, now: i64) -> Ledger {
    let reserved = unfinished.into_iter().map(|name| (name, now)).collect();
    Ledger { starts: Vec::new(), reserved, tools: BTreeMap::new() }
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
pub enum CallError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer within {API_TIMEOUT:?}")]
    Timeout,
}

pub(crate) async fn timed<T>(future: impl Future<Output = Result<T, kube::Error>>) -> Result<T, CallError> {
    match tokio::time::timeout(API_TIMEOUT, future).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(CallError::Timeout),
    }
}

#[cfg(test)]
mod tests;
