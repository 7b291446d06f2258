//! What a workflow's spec means to the components that compare and prove it,
//! declared once next to the type.
//!
//! [`MiningWorkflowSpec::proven`] takes the spec apart without `..`: a new
//! field is a compile error here until someone decided whether an ownership
//! proof binds it (else whoever may patch the object may change it under
//! its owner) — and with that, whether a retry with the same idempotency
//! key must ask for it too ([`MiningWorkflowSpec::same_work`]).

use serde::Serialize;

use crate::annotations;
use crate::workflow::{MiningWorkflow, MiningWorkflowSpec};

impl MiningWorkflowSpec {
    /// Whether `other` asks for the same work: every field a proof binds is
    /// equal, which is every field of the request (`cancel` is a later write,
    /// no part of any request). A retry with the same idempotency key must
    /// ask for all of it, or it would silently get other work.
    pub fn same_work(&self, other: &Self) -> bool {
        self.proven() == other.proven()
    }

    /// The fields an ownership proof binds, in their canonical form: all but
    /// `cancel` (the frontend's own later write).
    pub fn proven(&self) -> ProvenSpec {
        let Self {
            difficulty,
            blocks,
            ttl_seconds_after_finished,
            active_deadline_seconds,
            cancel: _,
            parallelism,
        } = self;
        ProvenSpec {
            difficulty: *difficulty,
            blocks: *blocks,
            parallelism: *parallelism,
            ttl_seconds_after_finished: *ttl_seconds_after_finished,
            active_deadline_seconds: *active_deadline_seconds,
        }
    }
}

/// A version of the ownership proof's format. What a proof binds and how it
/// is encoded outlive a release, so each version is kept as it was: a proof
/// made by the previous release still verifies under the version it names,
/// and new proofs use [`ProofVersion::CURRENT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProofVersion {
    /// The first format: name, namespace, caller label, difficulty, blocks,
    /// parallelism, TTL, deadline and progress token as length-prefixed
    /// strings; the annotation holds bare hex.
    V1,
    /// The proven document ([`ProvenWorkflow`]) as canonical JSON, under a
    /// domain that names the version; the annotation is `v2.` and hex.
    V2,
}

impl ProofVersion {
    /// The version new proofs are made in.
    pub const CURRENT: Self = Self::V2;
    /// The versions that verify: the current one and the one before it, so an
    /// upgrade loses no proof and a downgrade to the previous release neither.
    pub const ACCEPTED: [Self; 2] = [Self::V2, Self::V1];

    /// The MAC's domain: no two versions' inputs can be confused.
    pub fn domain(self) -> &'static str {
        match self {
            Self::V1 => "workflow",
            Self::V2 => "workflow-proof/v2",
        }
    }

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

    /// The bytes the MAC covers for `workflow` in this version.
    pub fn bound_parts(self, workflow: &MiningWorkflow) -> Vec<Vec<u8>> {
        match self {
            Self::V1 => v1_parts(workflow),
            Self::V2 => vec![ProvenWorkflow::of(workflow).canonical()],
        }
    }
}

/// The spec fields a proof binds (see [`MiningWorkflowSpec::proven`]),
/// serialised in declaration order.
///
/// A field added later is appended with `#[serde(skip_serializing_if = …)]`
/// at its default (e.g. `Option::is_none`): every proof made before it then
/// still verifies (its document is unchanged while the field is at its
/// default), and anyone who sets the field on an old workflow changes the
/// document, so the proof no longer verifies. Only a change to what is
/// already here (a rename, another encoding, a field dropped) needs a new
/// [`ProofVersion`].
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ProvenSpec {
    pub difficulty: u32,
    pub blocks: u32,
    pub parallelism: u32,
    pub ttl_seconds_after_finished: Option<i64>,
    pub active_deadline_seconds: Option<i64>,
}

/// Everything a version-2 proof binds about a workflow.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ProvenWorkflow<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub caller: &'a str,
    pub spec: ProvenSpec,
    /// The 2025-11-25 task's progress token, as stored.
    pub progress_token: Option<&'a str>,
}

impl<'a> ProvenWorkflow<'a> {
    pub fn of(workflow: &'a MiningWorkflow) -> Self {
        Self {
            name: workflow.metadata.name.as_deref().unwrap_or_default(),
            namespace: workflow.metadata.namespace.as_deref().unwrap_or_default(),
            caller: workflow.caller_label().unwrap_or_default(),
            spec: workflow.spec.proven(),
            progress_token: workflow.annotation(annotations::PROGRESS_TOKEN),
        }
    }

    /// Compact JSON, fields in declaration order: one encoding per document.
    pub fn canonical(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a struct of strings and integers serialises")
    }
}

/// Version 1's fields, exactly as the first release bound them. Frozen.
fn v1_parts(workflow: &MiningWorkflow) -> Vec<Vec<u8>> {
    let spec = &workflow.spec;
    let number = |value: Option<i64>| value.map_or_else(|| b"-".to_vec(), |v| v.to_string().into_bytes());
    vec![
        workflow.metadata.name.clone().unwrap_or_default().into_bytes(),
        workflow.metadata.namespace.clone().unwrap_or_default().into_bytes(),
        workflow.caller_label().unwrap_or_default().as_bytes().to_vec(),
        spec.difficulty.to_string().into_bytes(),
        spec.blocks.to_string().into_bytes(),
        spec.parallelism.to_string().into_bytes(),
        number(spec.ttl_seconds_after_finished),
        number(spec.active_deadline_seconds),
        workflow.annotation(annotations::PROGRESS_TOKEN).unwrap_or_default().as_bytes().to_vec(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> MiningWorkflowSpec {
        MiningWorkflowSpec { blocks: 3, parallelism: 2, ..MiningWorkflowSpec::new(10) }
    }

    #[test]
    fn the_same_request_is_the_same_work_whatever_was_cancelled_since() {
        let mut later = spec();
        later.cancel = true;
        assert!(spec().same_work(&later));
    }

    #[test]
    fn every_other_field_makes_other_work() {
        type Edit = fn(&mut MiningWorkflowSpec);
        let edits: [(&str, Edit); 5] = [
            ("difficulty", |s| s.difficulty = 11),
            ("blocks", |s| s.blocks = 4),
            ("parallelism", |s| s.parallelism = 1),
            ("ttl", |s| s.ttl_seconds_after_finished = Some(5)),
            ("deadline", |s| s.active_deadline_seconds = Some(5)),
        ];
        for (field, edit) in edits {
            let mut other = spec();
            edit(&mut other);
            assert!(!spec().same_work(&other), "{field}");
            assert_ne!(spec().proven(), other.proven(), "a proof binds {field}");
        }
    }

    #[test]
    fn the_canonical_document_is_stable() {
        let mut workflow = MiningWorkflow::new("mw-x", spec());
        workflow.metadata.namespace = Some("ns".into());
        let text = String::from_utf8(ProvenWorkflow::of(&workflow).canonical()).unwrap();
        // Pinned: a change here is a new proof version, not an edit.
        assert_eq!(
            text,
            r#"{"name":"mw-x","namespace":"ns","caller":"","spec":{"difficulty":10,"blocks":3,"parallelism":2,"ttlSecondsAfterFinished":null,"activeDeadlineSeconds":null},"progressToken":null}"#
        );
    }

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
}
