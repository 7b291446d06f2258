//! The kinds of work this project runs, each registered with the generic
//! layer ([`Work`]) in one place: what a proof binds, where each phase sits
//! in the one lifecycle, and the few fields every kind has.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use serde::Serialize;

use crate::admitted::Reads;
use crate::annotations;
use crate::tool::{ToolRun, ToolRunPhase, ToolRunSpec};
use crate::work::{Lifecycle, ProofVersion, Work};
use crate::workflow::{MiningWorkflow, MiningWorkflowSpec, WorkflowPhase};

impl WorkflowPhase {
    pub fn lifecycle(self) -> Lifecycle {
        match self {
            Self::Pending => Lifecycle::Waiting,
            Self::Mining => Lifecycle::Active,
            Self::Succeeded => Lifecycle::Succeeded,
            Self::Failed => Lifecycle::Failed,
            Self::Cancelled => Lifecycle::Cancelled,
        }
    }
}

impl ToolRunPhase {
    pub fn lifecycle(self) -> Lifecycle {
        match self {
            Self::Pending => Lifecycle::Waiting,
            Self::Running => Lifecycle::Active,
            Self::InputRequired => Lifecycle::AwaitingInput,
            Self::Succeeded => Lifecycle::Succeeded,
            Self::Failed => Lifecycle::Failed,
            Self::Cancelled => Lifecycle::Cancelled,
        }
    }
}

/// The fields every kind spells the same way (`status.phase`, `spec.cancel`,
/// `spec.ttlSecondsAfterFinished`, `status.startedAt`, `status.admittedAt`,
/// `status.preemptions`), read the same way.
macro_rules! common_fields {
    () => {
        fn lifecycle(&self) -> Lifecycle {
            self.phase().lifecycle()
        }

        fn cancel_requested(&self) -> bool {
            self.spec.cancel
        }

        fn ttl_seconds_after_finished(&self) -> Option<i64> {
            self.spec.ttl_seconds_after_finished
        }

        fn started_at(&self) -> Option<k8s_openapi::jiff::Timestamp> {
            self.status.as_ref()?.started_at.as_ref().map(|t| t.0)
        }

        fn admitted_at(&self) -> Option<k8s_openapi::jiff::Timestamp> {
            let status = self.status.as_ref()?;
            status.admitted_at.as_ref().or(status.started_at.as_ref()).map(|t| t.0)
        }

        fn preemptions(&self) -> u32 {
            self.status.as_ref().and_then(|status| status.preemptions).unwrap_or(0)
        }
    };
}
/// For a kind defined in its own file, as the next one would be.
#[allow(unused_imports)]
pub(crate) use common_fields;

/// The spec fields a workflow's proof binds, in declaration order.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ProvenSpec {
    pub difficulty: u32,
    pub blocks: u32,
    pub parallelism: u32,
    pub ttl_seconds_after_finished: Option<i64>,
    pub active_deadline_seconds: Option<i64>,
}

impl MiningWorkflowSpec {
    /// The fields a proof binds: all but `cancel` (the frontend's own later
    /// write). Taken apart without `..`: a new field is a compile error here
    /// until someone decided whether a proof binds it.
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

impl Work for MiningWorkflow {
    const NOUN: &'static str = "workflow";
    const READS: Reads = Reads::Nothing;
    type Request<'a> = ProvenSpec;

    fn preemptible(&self) -> bool {
        true
    }

    fn request(&self) -> ProvenSpec {
        self.spec.proven()
    }

    fn proof_domain(version: ProofVersion) -> &'static str {
        match version {
            ProofVersion::V1 => "workflow",
            ProofVersion::V2 => "workflow-proof/v2",
        }
    }

    /// Name, namespace, caller label, difficulty, blocks, parallelism, TTL,
    /// deadline and progress token as length-prefixed strings.
    fn v1_parts(&self) -> Vec<Vec<u8>> {
        let spec = &self.spec;
        let number = |value: Option<i64>| value.map_or_else(|| b"-".to_vec(), |v| v.to_string().into_bytes());
        vec![
            self.metadata.name.clone().unwrap_or_default().into_bytes(),
            self.metadata.namespace.clone().unwrap_or_default().into_bytes(),
            self.caller_label().unwrap_or_default().as_bytes().to_vec(),
            spec.difficulty.to_string().into_bytes(),
            spec.blocks.to_string().into_bytes(),
            spec.parallelism.to_string().into_bytes(),
            number(spec.ttl_seconds_after_finished),
            number(spec.active_deadline_seconds),
            self.annotation(annotations::PROGRESS_TOKEN).unwrap_or_default().as_bytes().to_vec(),
        ]
    }

    common_fields!();
}

/// The request a tool run's proof binds: the tool, the arguments and the
/// snapshot of the tool's definition (so whoever may patch the object
/// cannot change the image, the arguments or the schema under its owner).
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProvenToolRequest<'a> {
    pub tool: &'a str,
    pub arguments: &'a str,
    pub output_schema: Option<&'a str>,
    pub job_template: &'a JobTemplateSpec,
    pub ttl_seconds_after_finished: Option<i64>,
    /// Appended after version 2 was made: absent (every earlier proof still
    /// verifies) unless the tool set a deadline for answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_deadline_seconds: Option<i64>,
    /// Appended likewise: absent unless the tool asked who called.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<&'a crate::tool_caller::ToolCaller>,
    /// Appended likewise: absent unless the tool's steps may be stopped
    /// and run again (no one but the frontend may make a run preemptible).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// Appended likewise: absent unless the tool bounds its Pods' start
    /// (no one but the frontend may shorten a run's wait).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_start_timeout_seconds: Option<u32>,
}

/// What version 1 of a tool run's proof bound, as one JSON document. Frozen:
/// it did not bind the progress token (version 2 does).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolRunV1<'a> {
    name: &'a str,
    namespace: &'a str,
    caller: &'a str,
    tool: &'a str,
    arguments: &'a str,
    output_schema: Option<&'a str>,
    job_template: &'a JobTemplateSpec,
    ttl_seconds_after_finished: Option<i64>,
}

impl Work for ToolRun {
    const NOUN: &'static str = "tool run";
    const READS: Reads = Reads::Network;
    type Request<'a> = ProvenToolRequest<'a>;

    fn preemptible(&self) -> bool {
        self.spec.preemptible
    }

    /// All but `cancel` and the answers (later writes, each answer with its own proof).
    fn request(&self) -> ProvenToolRequest<'_> {
        let ToolRunSpec {
            tool,
            arguments,
            output_schema,
            job_template,
            ttl_seconds_after_finished,
            cancel: _,
            input_deadline_seconds,
            input_responses: _,
            caller,
            preemptible,
            pod_start_timeout_seconds,
        } = &self.spec;
        ProvenToolRequest {
            tool,
            arguments,
            output_schema: output_schema.as_deref(),
            job_template,
            ttl_seconds_after_finished: *ttl_seconds_after_finished,
            input_deadline_seconds: *input_deadline_seconds,
            caller: caller.as_ref(),
            preemptible: *preemptible,
            pod_start_timeout_seconds: *pod_start_timeout_seconds,
        }
    }

    fn proof_domain(version: ProofVersion) -> &'static str {
        match version {
            ProofVersion::V1 => "tool-run-proof/v1",
            ProofVersion::V2 => "tool-run-proof/v2",
        }
    }

    fn v1_parts(&self) -> Vec<Vec<u8>> {
        let request = self.request();
        let document = ToolRunV1 {
            name: self.metadata.name.as_deref().unwrap_or_default(),
            namespace: self.metadata.namespace.as_deref().unwrap_or_default(),
            caller: self.caller_label().unwrap_or_default(),
            tool: request.tool,
            arguments: request.arguments,
            output_schema: request.output_schema,
            job_template: request.job_template,
            ttl_seconds_after_finished: request.ttl_seconds_after_finished,
        };
        vec![serde_json::to_vec(&document).unwrap_or_default()]
    }

    common_fields!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::Proven;

    fn spec() -> MiningWorkflowSpec {
        MiningWorkflowSpec { blocks: 3, parallelism: 2, ..MiningWorkflowSpec::new(10) }
    }

    fn workflow(spec: MiningWorkflowSpec) -> MiningWorkflow {
        MiningWorkflow::new("w", spec)
    }

    #[test]
    fn the_same_request_is_the_same_work_whatever_was_cancelled_since() {
        let mut later = spec();
        later.cancel = true;
        assert!(workflow(spec()).same_work(&workflow(later)));
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
            assert!(!workflow(spec()).same_work(&workflow(other.clone())), "{field}");
            assert_ne!(workflow(spec()).request(), workflow(other).request(), "a proof binds {field}");
        }
    }

    #[test]
    fn the_canonical_workflow_document_is_stable() {
        let mut workflow = MiningWorkflow::new("mw-x", spec());
        workflow.metadata.namespace = Some("ns".into());
        let text = String::from_utf8(Proven::of(&workflow).canonical()).unwrap();
        // Pinned: a change here is a new proof version, not an edit.
        assert_eq!(
            text,
            r#"{"name":"mw-x","namespace":"ns","caller":"","spec":{"difficulty":10,"blocks":3,"parallelism":2,"ttlSecondsAfterFinished":null,"activeDeadlineSeconds":null},"progressToken":null}"#
        );
    }

    #[test]
    fn a_run_proof_covers_the_whole_request_and_its_task_but_not_a_cancel() {
        let mut run = crate::testing::tool_run("tr-1", "sum");
        let before = Proven::of(&run).canonical();
        run.spec.cancel = true;
        assert_eq!(Proven::of(&run).canonical(), before, "cancel is a later write");
        let mut tokened = run.clone();
        tokened
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(annotations::PROGRESS_TOKEN.into(), "7".into());
        assert_ne!(Proven::of(&tokened).canonical(), before, "v2 binds the task's progress token");
        assert_eq!(tokened.v1_parts(), run.v1_parts(), "v1 did not: frozen as it was");
        run.spec.job_template.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image =
            Some("attacker/image".into());
        assert_ne!(Proven::of(&run).canonical(), before, "the image is bound");
    }

    #[test]
    fn one_lifecycle_whatever_the_wire_names() {
        assert_eq!(WorkflowPhase::Mining.lifecycle(), Lifecycle::Active);
        assert_eq!(ToolRunPhase::Running.lifecycle(), Lifecycle::Active);
        for phase in WorkflowPhase::ALL {
            assert_eq!(phase.lifecycle().is_finished(), phase.is_finished(), "{phase}");
        }
    }
}
