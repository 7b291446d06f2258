//! Builders for the workflows and statuses unit tests start from (feature
//! `testing`), so no crate writes fixture literals of its own.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::labels;
use crate::workflow::{
    Condition, ConditionStatus, MinedBlock, MiningWorkflow, MiningWorkflowSpec, MiningWorkflowStatus,
    WorkflowPhase,
};

/// A workflow as the API server would hold it: namespace `ns`, a uid and
/// generation 1, mining `blocks` blocks at `difficulty`.
pub fn workflow(name: &str, difficulty: u32, blocks: u32) -> MiningWorkflow {
    let mut workflow =
        MiningWorkflow::new(name, MiningWorkflowSpec { blocks, ..MiningWorkflowSpec::new(difficulty) });
    workflow.metadata.namespace = Some("ns".into());
    workflow.metadata.uid = Some(format!("uid-{name}"));
    workflow.metadata.generation = Some(1);
    workflow
}

/// Builder-style edits of a test workflow.
pub trait WorkflowExt: Sized {
    fn created_at(self, at: Timestamp) -> Self;
    fn with_caller(self, caller_label: &str) -> Self;
    fn with_parallelism(self, parallelism: u32) -> Self;
    fn cancelled(self, cancel: bool) -> Self;
    fn with_status(self, status: MiningWorkflowStatus) -> Self;
}

impl WorkflowExt for MiningWorkflow {
    fn created_at(mut self, at: Timestamp) -> Self {
        self.metadata.creation_timestamp = Some(Time(at));
        self
    }

    fn with_caller(mut self, caller_label: &str) -> Self {
        self.metadata.labels.get_or_insert_default().insert(labels::CALLER.into(), caller_label.into());
        self
    }

    fn with_parallelism(mut self, parallelism: u32) -> Self {
        self.spec.parallelism = parallelism;
        self
    }

    fn cancelled(mut self, cancel: bool) -> Self {
        self.spec.cancel = cancel;
        self
    }

    fn with_status(mut self, status: MiningWorkflowStatus) -> Self {
        self.status = Some(status);
        self
    }
}

/// A status in `phase` with nothing else recorded.
pub fn status(phase: WorkflowPhase) -> MiningWorkflowStatus {
    MiningWorkflowStatus { phase: Some(phase), ..Default::default() }
}

/// A condition as the operator writes it.
pub fn condition(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    at: Timestamp,
) -> Condition {
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(at),
        observed_generation: None,
    }
}

/// A recorded block (its hash and nonce as given: tests that need a real
/// chain mine one with the miner crate).
pub fn mined_block(
    index: u32,
    nonce: u64,
    hash: &str,
    started: Timestamp,
    finished: Timestamp,
) -> MinedBlock {
    MinedBlock {
        index,
        nonce,
        hash: hash.into(),
        attempts: nonce.saturating_add(1),
        minimality_checked: true,
        job_name: format!("job-{index}"),
        started_at: Some(Time(started)),
        finished_at: Some(Time(finished)),
    }
}
