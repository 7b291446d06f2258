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

/// A tool run as the API server would hold it: namespace `ns`, a uid, a
/// call of `tool` with arguments `{}` whose template runs one container
/// `tool` of image `example/{tool}` once.
/// A run `r` of the tool `report` in `phase` whose status records one small
/// CSV file per name.
pub fn tool_run_with_files(phase: Option<crate::ToolRunPhase>, names: &[&str]) -> crate::ToolRun {
    let mut run = tool_run("r", "report");
    let file = |name: &&str| crate::tool_outputs::ToolOutput {
        name: (*name).into(),
        media_type: "text/csv".into(),
        size: 1,
        sha256: "0".repeat(64),
    };
    run.status =
        Some(crate::ToolRunStatus { phase, outputs: names.iter().map(file).collect(), ..Default::default() });
    run
}

pub fn tool_run(name: &str, tool: &str) -> crate::ToolRun {
    let template =
        serde_json::from_value(serde_json::json!({"spec": {"backoffLimit": 0, "template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "tool", "image": format!("example/{tool}")}]}}}}))
        .expect("a Job template");
    let spec = crate::ToolRunSpec {
        tool: tool.into(),
        arguments: "{}".into(),
        output_schema: None,
        job_template: template,
        ttl_seconds_after_finished: None,
        cancel: false,
        input_deadline_seconds: None,
        input_responses: Default::default(),
        caller: None,
        preemptible: false,
        pod_start_timeout_seconds: None,
    };
    let mut run = crate::ToolRun::new(name, spec);
    run.metadata.namespace = Some("ns".into());
    run.metadata.uid = Some(format!("uid-{name}"));
    run
}

/// Builder-style edits of a test tool run.
pub trait ToolRunExt: Sized {
    fn with_caller(self, caller_label: &str) -> Self;
    fn with_arguments(self, arguments: &str) -> Self;
    fn with_parts(self, parts: i32) -> Self;
    fn with_phase(self, phase: crate::ToolRunPhase) -> Self;
    fn created_at(self, at: Timestamp) -> Self;
}

impl ToolRunExt for crate::ToolRun {
    fn with_caller(mut self, caller_label: &str) -> Self {
        self.metadata.labels.get_or_insert_default().insert(labels::CALLER.into(), caller_label.into());
        self
    }

    fn with_arguments(mut self, arguments: &str) -> Self {
        self.spec.arguments = arguments.into();
        self
    }

    fn with_parts(mut self, parts: i32) -> Self {
        if let Some(job) = self.spec.job_template.spec.as_mut() {
            job.completions = Some(parts);
        }
        self
    }

    fn with_phase(mut self, phase: crate::ToolRunPhase) -> Self {
        self.status.get_or_insert_default().phase = Some(phase);
        self
    }

    fn created_at(mut self, at: Timestamp) -> Self {
        self.metadata.creation_timestamp = Some(Time(at));
        self
    }
}

/// What an Istio-like injector adds to a Pod (without its CNI): an init
/// container with NET_ADMIN and NET_RAW that sets up the network, a proxy,
/// and Pod-local volumes.
pub fn inject_mesh(spec: &mut k8s_openapi::api::core::v1::PodSpec) {
    use k8s_openapi::api::core::v1::{Container, Volume};
    use serde_json::json;
    let init: Container = serde_json::from_value(json!({
        "name": "istio-init", "image": "istio/proxyv2", "args": ["istio-iptables"],
        "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"], "drop": ["ALL"]}}}))
    .expect("a valid container");
    let proxy: Container = serde_json::from_value(json!({
        "name": "istio-proxy", "image": "istio/proxyv2", "args": ["proxy", "sidecar"],
        "resources": {"requests": {"cpu": "10m"}},
        "volumeMounts": [{"name": "istio-envoy", "mountPath": "/etc/istio/proxy"},
                         {"name": "istio-podinfo", "mountPath": "/etc/istio/pod"}]}))
    .expect("a valid container");
    spec.init_containers.get_or_insert_with(Vec::new).push(init);
    spec.containers.push(proxy);
    let volumes: Vec<Volume> = serde_json::from_value(json!([
        {"name": "istio-envoy", "emptyDir": {"medium": "Memory"}},
        {"name": "istio-podinfo", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]))
    .expect("valid volumes");
    spec.volumes.get_or_insert_with(Vec::new).extend(volumes);
}
