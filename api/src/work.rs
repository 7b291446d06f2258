//! One kind of durable work, as every component's generic layer sees it.
//!
//! A `MiningWorkflow` and a `ToolRun` are two kinds of one thing: a request
//! an MCP caller made (proven by the frontend's key), waiting for a slot,
//! then running as Jobs, then finished and kept for a while. [`Work`] is
//! that shared shape — lifecycle, cancel, retention, the caller, the
//! document an ownership proof binds — so admission, proofs, status writes
//! and the protocol faces are written once. A kind is registered by
//! implementing it (see `kinds.rs`, about 30 lines per kind).
//!
//! Proofs are versioned the same way for every kind ([`ProofVersion`]): what
//! a proof binds outlives a release, so each version is kept as it was; a
//! proof made by the previous release still verifies and is re-proved in
//! the current version by the frontend.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{annotations, labels};

/// Where any work is in its life, whatever its kind calls the phases on
/// the wire (a workflow's `Mining` and a run's `Running` are both
/// [`Lifecycle::Active`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lifecycle {
    /// Accepted, waiting for a slot.
    Waiting,
    /// Holding a slot: its Jobs run.
    Active,
    /// Holding no slot and not queued: waiting for its caller's answers.
    AwaitingInput,
    Succeeded,
    Failed,
    Cancelled,
}

impl Lifecycle {
    /// Succeeded, Failed and Cancelled never change again.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

/// One kind of durable work (see the module's doc).
pub trait Work:
    kube::Resource<DynamicType = ()>
    + Clone
    + Serialize
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// What users call one, in messages ("workflow", "tool run").
    const NOUN: &'static str;

    /// What its Pods' containers depend on besides their own files, so what
    /// admission may add beside them ([`crate::provenance::pod_mismatch`]).
    const READS: crate::admitted::Reads;

    /// The request an ownership proof binds (version 2's `spec`): every
    /// field of the caller's request, none the operator or a cancel writes.
    type Request<'a>: Serialize + PartialEq
    where
        Self: 'a;

    /// The request, taken apart without `..` by each kind: a new field is a
    /// compile error there until someone decided whether a proof binds it.
    fn request(&self) -> Self::Request<'_>;

    /// The proof's MAC domain in `version`: no two kinds' or versions'
    /// inputs can be confused.
    fn proof_domain(version: ProofVersion) -> &'static str;

    /// What version 1 bound, exactly as the release that made it did. Frozen.
    fn v1_parts(&self) -> Vec<Vec<u8>>;

    /// Where it is in its life (`Waiting` until the operator has said).
    fn lifecycle(&self) -> Lifecycle;

    /// Whether its caller (or anyone who may edit it) asked it to stop.
    fn cancel_requested(&self) -> bool;

    /// Whether the slot it holds may be taken back while it runs, the part
    /// running then done again from its start: a workflow's block always
    /// (blocks already mined are kept); a tool run's step only when its
    /// tool said its steps may run twice (`McpToolSpec::preemptible`).
    fn preemptible(&self) -> bool;

    /// How many times the slot it held was taken back while it ran (a kind
    /// never preempted keeps none).
    fn preemptions(&self) -> u32 {
        0
    }

    /// Seconds it is kept after it finished (the operator's default when `None`).
    fn ttl_seconds_after_finished(&self) -> Option<i64>;

    /// When the operator admitted it (took a slot for it), if it did.
    fn started_at(&self) -> Option<k8s_openapi::jiff::Timestamp>;

    /// When it last took a slot (`startedAt` for work admitted before the
    /// field was written), if it did.
    fn admitted_at(&self) -> Option<k8s_openapi::jiff::Timestamp>;

    fn label(&self, key: &str) -> Option<&str> {
        self.meta().labels.as_ref()?.get(key).map(String::as_str)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.meta().annotations.as_ref()?.get(key).map(String::as_str)
    }

    /// The caller label of work made through MCP (a claim until a proof says so).
    fn caller_label(&self) -> Option<&str> {
        self.label(labels::CALLER)
    }

    fn is_finished(&self) -> bool {
        self.lifecycle().is_finished()
    }

    /// Whether it holds a place in its caller's quota: unfinished and not
    /// being deleted. Deleted work holds nothing, whatever finalizer keeps
    /// it stored (anyone who may edit it can add one).
    fn holds_place(&self) -> bool {
        !self.is_finished() && self.meta().deletion_timestamp.is_none()
    }

    /// Whether `other` asks for the same work: every field a proof binds is
    /// equal. A retry with the same idempotency key must ask for all of it,
    /// or it would silently get other work.
    fn same_work(&self, other: &Self) -> bool {
        self.request() == other.request()
    }

    /// The bytes a proof of `version` covers.
    fn bound_parts(&self, version: ProofVersion) -> Vec<Vec<u8>> {
        match version {
            ProofVersion::V1 => self.v1_parts(),
            ProofVersion::V2 => vec![Proven::of(self).canonical()],
        }
    }
}

/// A version of the ownership proof's format, the same for every kind (each
/// kind names its own domain per version: [`Work::proof_domain`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProofVersion {
    /// The first format of each kind (its [`Work::v1_parts`]); the
    /// annotation holds bare hex.
    V1,
    /// The proven document ([`Proven`]) as canonical JSON, under a domain
    /// that names the version; the annotation is `v2.` and hex.
    V2,
}

impl ProofVersion {
    /// The version new proofs are made in.
    pub const CURRENT: Self = Self::V2;
    /// The versions that verify: the current one and the one before it, so an
    /// upgrade loses no proof and a downgrade to the previous release neither.
    pub const ACCEPTED: [Self; 2] = [Self::V2, Self::V1];

    /// What precedes the hex of a proof in the annotation.
    fn prefix(self) -> &'static str {
        match self {
            Self::V1 => "",
            Self::V2 => "v2.",
        }
    }

    /// The annotation's text for a MAC.
    pub fn encode(self, mac_hex: &str) -> String {
        format!("{}{mac_hex}", self.prefix())
    }

    /// The version an annotation names and its hex; `None` for an unknown
    /// version (a later release's proof is not one this release can check).
    pub fn decode(annotation: &str) -> Option<(Self, &str)> {
        match annotation.split_once('.') {
            Some(("v2", hex)) => Some((Self::V2, hex)),
            Some(_) => None,
            None => Some((Self::V1, annotation)),
        }
    }
}

/// Everything a version-2 proof binds about any work, serialised in
/// declaration order.
///
/// A request field added later is appended with
/// `#[serde(skip_serializing_if = …)]` at its default: every proof made
/// before it then still verifies, and anyone who sets the field on old work
/// changes the document, so the proof no longer verifies. Only a change to
/// what is already here needs a new [`ProofVersion`].
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Proven<'a, R> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub caller: &'a str,
    pub spec: R,
    /// The 2025-11-25 task's progress token, as stored.
    pub progress_token: Option<&'a str>,
}

impl<'a, R: Serialize> Proven<'a, R> {
    pub fn of<W: Work<Request<'a> = R>>(work: &'a W) -> Self {
        let meta = work.meta();
        Self {
            name: meta.name.as_deref().unwrap_or_default(),
            namespace: meta.namespace.as_deref().unwrap_or_default(),
            caller: work.caller_label().unwrap_or_default(),
            spec: work.request(),
            progress_token: work.annotation(annotations::PROGRESS_TOKEN),
        }
    }

    /// Compact JSON, fields in declaration order (k8s-openapi serialises
    /// its structs field by field, maps sorted): one encoding per document.
    pub fn canonical(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// How two requests differ (pure): each top-level field whose value is not
/// the same, by its name on the wire, with the stored value and the one
/// asked for (each clipped). What an idempotent retry that asks for other
/// work is told, so the caller sees every field at once, not one per try.
pub fn differing_fields(stored: &impl Serialize, asked: &impl Serialize) -> Vec<String> {
    const MAX_VALUE_CHARS: usize = 64;
    let fields = |value: serde_json::Result<serde_json::Value>| match value {
        Ok(serde_json::Value::Object(fields)) => fields,
        _ => serde_json::Map::new(),
    };
    let (stored, asked) = (fields(serde_json::to_value(stored)), fields(serde_json::to_value(asked)));
    let set = |fields: &serde_json::Map<String, serde_json::Value>, name: &str| {
        fields.get(name).filter(|value| !value.is_null()).cloned()
    };
    let shown = |value: Option<serde_json::Value>| match value {
        None => "none".to_string(),
        Some(value) => crate::pow::clip(&value.to_string(), MAX_VALUE_CHARS).to_string(),
    };
    let mut names: Vec<&String> = stored.keys().chain(asked.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|name| set(&stored, name) != set(&asked, name))
        .map(|name| format!("{name} {} (asked {})", shown(set(&stored, name)), shown(set(&asked, name))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_name_their_version() {
        assert_eq!(ProofVersion::decode("abcd"), Some((ProofVersion::V1, "abcd")));
        assert_eq!(ProofVersion::decode("v2.abcd"), Some((ProofVersion::V2, "abcd")));
        assert_eq!(ProofVersion::decode("v9.abcd"), None, "a later release's proof");
        for version in ProofVersion::ACCEPTED {
            assert_eq!(ProofVersion::decode(&version.encode("00ff")), Some((version, "00ff")));
        }
        assert_eq!(ProofVersion::ACCEPTED[0], ProofVersion::CURRENT);
    }

    #[test]
    fn only_the_three_ends_are_finished() {
        use Lifecycle::*;
        let finished: Vec<Lifecycle> = [Waiting, Active, AwaitingInput, Succeeded, Failed, Cancelled]
            .into_iter()
            .filter(|l| l.is_finished())
            .collect();
        assert_eq!(finished, [Succeeded, Failed, Cancelled]);
    }

    #[test]
    fn every_differing_field_is_named_with_both_values() {
        let stored =
            serde_json::json!({"difficulty": 8, "blocks": 2, "ttlSecondsAfterFinished": 60, "note": null});
        let asked = serde_json::json!({"difficulty": 9, "blocks": 2, "activeDeadlineSeconds": 30});
        assert_eq!(
            super::differing_fields(&stored, &asked),
            [
                "activeDeadlineSeconds none (asked 30)",
                "difficulty 8 (asked 9)",
                "ttlSecondsAfterFinished 60 (asked none)"
            ]
        );
        assert!(super::differing_fields(&stored, &stored).is_empty());
        let long = serde_json::json!({"arguments": "x".repeat(500)});
        let shown = &super::differing_fields(&long, &serde_json::json!({}))[0];
        assert!(shown.len() < 100, "{shown}");
    }
}
