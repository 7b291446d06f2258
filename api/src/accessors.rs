//! Reading a MiningWorkflow the one way every component reads it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::bounds::{DEFAULT_BLOCKS, DEFAULT_PARALLELISM};
use crate::labels;
use crate::workflow::{Condition, MinedBlock, MiningWorkflow, MiningWorkflowSpec, WorkflowPhase};

impl MiningWorkflowSpec {
    /// A spec mining `difficulty` with every other field at its default.
    pub fn new(difficulty: u32) -> Self {
        Self {
            difficulty,
            blocks: DEFAULT_BLOCKS,
            ttl_seconds_after_finished: None,
            active_deadline_seconds: None,
            cancel: false,
            parallelism: DEFAULT_PARALLELISM,
        }
    }
}

impl MiningWorkflow {
    /// Where the workflow is; `Pending` until the operator has said.
    pub fn phase(&self) -> WorkflowPhase {
        self.status.as_ref().and_then(|s| s.phase).unwrap_or_default()
    }

    /// The chain's length mining started with (the spec's until admitted).
    pub fn total_blocks(&self) -> u32 {
        self.status.as_ref().and_then(|s| s.admitted_blocks).unwrap_or(self.spec.blocks)
    }

    /// The difficulty mining started with (the spec's until admitted).
    pub fn mined_difficulty(&self) -> u32 {
        self.status.as_ref().and_then(|s| s.admitted_difficulty).unwrap_or(self.spec.difficulty)
    }

    /// The verified blocks recorded so far, in chain order.
    pub fn mined_blocks(&self) -> &[MinedBlock] {
        self.status.as_ref().map_or(&[], |s| s.blocks.as_slice())
    }

    /// The condition of `type_`, if the status has one.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// Whether a label or annotation key is one of this project's
/// (`mining-operator.dev/…`): the only ones any component reads.
pub fn is_our_key(key: &str) -> bool {
    key.strip_prefix(crate::GROUP).is_some_and(|rest| rest.starts_with('/'))
}

/// Trims what a watch cache keeps of an object's metadata to what our
/// readers need, each part bounded whatever was written: no managedFields
/// or finalizers, only the labels we read (and `also_labels`), only our
/// annotations within their lengths, and only the controller reference.
/// Anyone who may edit an object can otherwise write up to the API server's
/// 256 KiB of annotations, or 1.5 MiB in all, into every replica's memory.
pub fn trim_for_cache(metadata: &mut ObjectMeta) {
    trim_for_cache_keeping(metadata, &[]);
}

/// [`trim_for_cache`], keeping the labels `also_labels` too (bounded by the
/// API server at 63 bytes a value).
pub fn trim_for_cache_keeping(metadata: &mut ObjectMeta, also_labels: &[&str]) {
    metadata.managed_fields = None;
    metadata.finalizers = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations
            .retain(|key, value| crate::annotations::max_bytes(key).is_some_and(|max| value.len() <= max));
    }
    if let Some(kept) = metadata.labels.as_mut() {
        kept.retain(|key, _| labels::ALL.contains(&key.as_str()) || also_labels.contains(&key.as_str()));
    }
    if let Some(owners) = metadata.owner_references.as_mut() {
        owners.retain(|owner| owner.controller == Some(true));
        owners.truncate(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::Work as _;
    use crate::workflow::MiningWorkflowStatus;

    #[test]
    fn a_cached_copy_keeps_only_our_keys() {
        let mut metadata = ObjectMeta {
            labels: Some(
                [
                    (labels::CALLER, "c"),
                    (labels::MANAGED_BY, "m"),
                    ("team", "x"),
                    ("mining-operator.dev.evil/a", "y"),
                    ("mining-operator.dev/padding-1", "z"),
                ]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
            ),
            annotations: Some(
                [
                    (crate::annotations::OWNER_PROOF, "p".to_string()),
                    ("kubectl.kubernetes.io/last-applied-configuration", "{}".into()),
                    ("mining-operator.dev/padding", "x".repeat(200_000)),
                    (crate::annotations::PROGRESS_TOKEN, "1".repeat(200_000)),
                ]
                .map(|(k, v)| (k.to_string(), v))
                .into(),
            ),
            managed_fields: Some(vec![Default::default()]),
            finalizers: Some(vec!["f".repeat(300); 100]),
            owner_references: Some(vec![
                Default::default(),
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    controller: Some(true),
                    uid: "u".into(),
                    ..Default::default()
                },
                Default::default(),
            ]),
            ..Default::default()
        };
        trim_for_cache(&mut metadata);
        assert_eq!(metadata.managed_fields, None);
        assert_eq!(metadata.finalizers, None);
        assert_eq!(
            metadata.owner_references.unwrap().iter().map(|o| o.uid.as_str()).collect::<Vec<_>>(),
            ["u"]
        );
        let kept: Vec<_> = metadata.labels.unwrap().into_keys().collect();
        assert_eq!(kept, [labels::MANAGED_BY, labels::CALLER]);
        let annotations: Vec<_> = metadata.annotations.unwrap().into_keys().collect();
        assert_eq!(annotations, [crate::annotations::OWNER_PROOF], "oversized and unknown ones go");
    }

    #[test]
    fn admitted_values_win_over_the_spec_once_recorded() {
        let mut workflow =
            MiningWorkflow::new("w", MiningWorkflowSpec { blocks: 3, ..MiningWorkflowSpec::new(9) });
        assert_eq!((workflow.mined_difficulty(), workflow.total_blocks()), (9, 3));
        assert_eq!(workflow.phase(), WorkflowPhase::Pending);
        workflow.status = Some(MiningWorkflowStatus {
            phase: Some(WorkflowPhase::Cancelled),
            admitted_difficulty: Some(7),
            admitted_blocks: Some(2),
            ..Default::default()
        });
        assert_eq!((workflow.mined_difficulty(), workflow.total_blocks()), (7, 2));
        assert!(workflow.is_finished());
        assert!(workflow.mined_blocks().is_empty());
        assert_eq!(workflow.caller_label(), None);
    }
}
