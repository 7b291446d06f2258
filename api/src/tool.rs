//! Any container as a durable MCP tool: an `McpTool` defines one (what the
//! model reads, the schemas, the Job that does the work), and a `ToolRun`
//! records each call (made only by the MCP frontend, carrying its proof).
//!
//! A run keeps a snapshot of its tool's Job template and output schema, so
//! editing or deleting the `McpTool` never changes a run in flight. The
//! arguments are kept as the JSON text the frontend validated and reach the
//! container as one environment variable ([`ARGUMENTS_ENV`]), read from the
//! run's own Secret, never interpolated into a command.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::bounds::MAX_DURATION_SECONDS;
use crate::tool_caller::{CallerIdentity, ToolCaller};
use crate::tool_face::{ClientCapability, MAX_REQUIRED_CAPABILITIES, MAX_TOOL_NAME_BYTES, TaskSupport};
use crate::tool_input::{
    MAX_ANSWERS, MAX_INPUT_DEADLINE_SECONDS, MAX_KEY_BYTES, MAX_REQUESTS_PER_ROUND, MAX_RESPONSE_BYTES,
    MAX_ROUNDS, MAX_STATE_BYTES,
};

pub use crate::tool_template::ARGUMENTS_ENV;
/// The key of a run's arguments in its Secret (see [`arguments_secret_name`]).
pub const ARGUMENTS_KEY: &str = "arguments";

/// The Secret holding a run's arguments, which its Pods read as
/// [`ARGUMENTS_ENV`]: made by the operator, owned by the run, immutable.
/// Viewers of the namespace read Jobs and Pods, never Secrets.
pub fn arguments_secret_name(run_name: &str) -> String {
    format!("{run_name}-arguments")
}

/// A running run's status message carries the tool's latest status line
/// after this (the operator writes it, the frontend reads it).
/// Longest bound a tool may set on waiting for its Pods to start (a day).
pub const MAX_POD_START_TIMEOUT_SECONDS: u32 = 86_400;

pub const RUNNING_PREFIX: &str = "running: ";

/// The environment variable holding a run's name (its workflow id), so a
/// tool can tell its calls apart (e.g. in its own logs).
pub const RUN_ENV: &str = "MCP_TOOL_RUN";
/// Largest arguments document (JSON bytes) a call may pass.
pub const MAX_ARGUMENTS_BYTES: usize = 32 * 1024;
/// Largest `inputSchema` or `outputSchema` (JSON bytes) a tool may declare.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// Largest Job template (JSON bytes) a tool may declare.
pub const MAX_TEMPLATE_BYTES: usize = 32 * 1024;
/// Longest `description`.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Longest `title`.
pub const MAX_TITLE_BYTES: usize = 128;
/// Largest result kept: the kubelet keeps at most 4096 bytes of a
/// termination message per container.
pub const MAX_RESULT_BYTES: usize = 4096;
/// Most indexed parts (`completions`) one run may have.
pub const MAX_COMPLETIONS: i32 = 100;
/// Largest result a run's status stores (the CRD's bound on
/// `status.result`): room for [`MAX_COMPLETIONS`] parts of
/// [`MAX_RESULT_BYTES`] each as one JSON array.
pub const MAX_STORED_RESULT_BYTES: usize = 512 * 1024;

/// The most a run of `parts` parts can need to store when every part's
/// result is as large as allowed (each part a JSON value or string, with
/// its quotes and comma, inside the array's brackets).
pub const fn stored_result_bound(parts: usize) -> usize {
    if parts <= 1 { MAX_RESULT_BYTES } else { parts * (MAX_RESULT_BYTES + 3) + 2 }
}
/// Most running calls of one tool per caller a tool may allow.
pub const MAX_RUNNING_PER_CALLER: u32 = 100;
/// Longest wait budget a tool may ask for (the frontend caps it further).
pub const MAX_WAIT_BUDGET_SECONDS: u32 = 3600;

/// A container image as an MCP tool. The tool's name is `metadata.name`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mining-operator.dev",
    version = "v1alpha1",
    kind = "McpTool",
    doc = "A container image as a durable MCP tool: each call runs one Job from this template. The resource name is the tool's name.",
    plural = "mcptools",
    namespaced,
    status = "McpToolStatus",
    printcolumn = r#"{"name":"Accepted","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name":"Tool Name","type":"string","jsonPath":".spec.toolName"}"#,
    printcolumn = r#"{"name":"Wait","type":"integer","jsonPath":".spec.waitBudgetSeconds"}"#,
    printcolumn = r#"{"name":"Parts","type":"integer","jsonPath":".spec.jobTemplate.spec.completions"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Description","type":"string","jsonPath":".spec.description","priority":1}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].message","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct McpToolSpec {
    /// The tool's name in MCP (`tools/list`, `tools/call`): 1–128 of
    /// `A-Za-z0-9_.-`, e.g. `get_weather`. Unset: the object's name. Two
    /// tools of one name: the older is offered, the other is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_TOOL_NAME_BYTES), regex(pattern = r"^[A-Za-z0-9_.-]+$"))]
    pub tool_name: Option<String>,
    /// Whether a call may (`optional`, the default), must (`required`) or
    /// must not (`forbidden`) run as an MCP task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_support: Option<TaskSupport>,
    /// Client capabilities a call needs (`elicitation`, `sampling`,
    /// `roots`): a client that did not declare one is refused (`-32021`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_REQUIRED_CAPABILITIES))]
    pub required_client_capabilities: Vec<ClientCapability>,
    /// Documents the tool offers as MCP resources (a manual, a sample, a
    /// schema), read by every caller who may call it; see `tool_resources`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::tool_resources::MAX_RESOURCES))]
    pub resources: Vec<crate::tool_resources::ToolResource>,
    /// A short human-readable name for the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TITLE_BYTES))]
    pub title: Option<String>,
    /// What the tool does: the text the model reads to decide to call it.
    #[schemars(length(min = 1, max = MAX_DESCRIPTION_BYTES))]
    pub description: String,
    /// A JSON Schema (type object) the call's arguments must satisfy.
    #[schemars(schema_with = "any_object")]
    pub input_schema: serde_json::Map<String, serde_json::Value>,
    /// A JSON Schema the tool's result (its termination message, as JSON)
    /// must satisfy; without one the result is text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object_or_none")]
    pub output_schema: Option<serde_json::Map<String, serde_json::Value>>,
    /// How long a call waits for the result before answering `running`
    /// (capped by the frontend's own budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_WAIT_BUDGET_SECONDS))]
    pub wait_budget_seconds: Option<u32>,
    /// How long a call made as an MCP task waits for its run's first
    /// questions before the task is made (unset or 0: made at once). What
    /// the run asks within it is asked on the call itself (2026-07-28
    /// `input_required`, SEP-2663's composition); the client's answer makes
    /// the task. Capped by the frontend's wait budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_WAIT_BUDGET_SECONDS))]
    pub ask_before_task_seconds: Option<u32>,
    /// Delete each run this many seconds after it finished (the operator's
    /// default applies when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_DURATION_SECONDS))]
    pub ttl_seconds_after_finished: Option<i64>,
    /// Most unfinished calls of this tool one caller may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_RUNNING_PER_CALLER))]
    pub max_running_per_caller: Option<u32>,
    /// How long a run may wait for its caller's answers when the tool asks
    /// (see `tool_input`); it then fails with that reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_INPUT_DEADLINE_SECONDS))]
    pub input_deadline_seconds: Option<i64>,
    /// Offer and run the tool only for callers granted it by name (RBAC
    /// verb `call` on `mcptools/NAME`, or the frontend's tool grants); see
    /// `tool_caller`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restricted: bool,
    /// Tell each run who called it (`MCP_CALLER`, `MCP_CALLER_CLAIMS`); see
    /// `tool_caller`. Absent: the tool learns nothing of its caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_identity: Option<CallerIdentity>,
    /// What the tool says it does, for hosts (MCP tool annotations); see `tool_hints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<crate::tool_hints::ToolHints>,
    /// Each step of a run can be stopped and run again from its start
    /// (it is idempotent: it may run twice, and a file it hands over is
    /// replaced by the next run's). The operator then takes a running
    /// step's slot back for work that waited past the preemption delay
    /// (`--preempt-after-seconds`), as it does a workflow's block; a run of
    /// a tool that is not preemptible is never stopped for another's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// How long a run waits for Pods that cannot start for a cause that may
    /// clear (an image pull back-off, a used-up quota, no matching node)
    /// before it fails, within the operator's `--pod-start-timeout-seconds`
    /// (the shorter wins). Causes that cannot clear fail at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_POD_START_TIMEOUT_SECONDS))]
    pub pod_start_timeout_seconds: Option<u32>,
    /// The Job each call runs, as in a CronJob: metadata and a batch/v1
    /// JobSpec. `completions` makes a run of that many indexed parts.
    #[schemars(schema_with = "any_object")]
    #[serde(deserialize_with = "crate::tool_template::lenient_template")]
    pub job_template: JobTemplateSpec,
}

/// Whether the MCP frontend offers a definition, and why not: what a tool
/// author reads with `kubectl get mcptools` (a refused definition is
/// otherwise visible only in a frontend's log).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpToolStatus {
    /// `Accepted`: True when the tool is offered, False with reason
    /// `Invalid` and the cause in the message when it is not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub conditions: Vec<crate::Condition>,
}

/// The condition an McpTool's status reports, and its reasons.
pub mod tool_conditions {
    pub const ACCEPTED: &str = "Accepted";
    /// The frontend offers the tool.
    pub const REASON_ACCEPTED: &str = "Accepted";
    /// The definition is refused; the message says why.
    pub const REASON_INVALID: &str = "Invalid";
}

/// One call of an `McpTool`, made by the MCP frontend. The name is the
/// call's workflow id.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mining-operator.dev",
    version = "v1alpha1",
    kind = "ToolRun",
    doc = "One call of an McpTool: its arguments and a snapshot of the tool's Job template, run as one Job. The resource name is the call's id.",
    plural = "toolruns",
    namespaced,
    status = "ToolRunStatus",
    printcolumn = r#"{"name":"Tool","type":"string","jsonPath":".spec.tool"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.message","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ToolRunSpec {
    /// The `McpTool` called (its name when the call was made).
    #[schemars(length(min = 1, max = 63))]
    pub tool: String,
    /// The call's arguments: one JSON document, validated against the
    /// tool's `inputSchema` before the run was made.
    #[schemars(length(max = MAX_ARGUMENTS_BYTES))]
    pub arguments: String,
    /// The tool's `outputSchema` when the call was made, as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_SCHEMA_BYTES))]
    pub output_schema: Option<String>,
    /// The tool's Job template when the call was made.
    #[schemars(schema_with = "any_object")]
    #[serde(deserialize_with = "crate::tool_template::lenient_template")]
    pub job_template: JobTemplateSpec,
    /// Delete the run this many seconds after it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_DURATION_SECONDS))]
    pub ttl_seconds_after_finished: Option<i64>,
    /// Set to true to stop the run; it ends Cancelled.
    #[serde(default)]
    pub cancel: bool,
    /// How long the run may wait for answers (the tool's, when the call was made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_INPUT_DEADLINE_SECONDS))]
    pub input_deadline_seconds: Option<i64>,
    /// The caller's answers to what the tool asked, by request key, each
    /// written by the MCP frontend with its proof: the operator takes only
    /// answers whose proof verifies for this run and key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_ANSWERS))]
    pub input_responses: BTreeMap<String, ProvenResponse>,
    /// Who called, for a tool that asked to know (`callerIdentity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<ToolCaller>,
    /// The tool was preemptible when the call was made: its running step
    /// may be stopped and run again for work that waited (see `McpToolSpec`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// The tool's bound on waiting for Pods to start when the call was made
    /// (see `McpToolSpec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_POD_START_TIMEOUT_SECONDS))]
    pub pod_start_timeout_seconds: Option<u32>,
}

/// One answer to a tool's request, as the frontend wrote it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvenResponse {
    /// The client's result for the request, as JSON text.
    #[schemars(length(max = MAX_RESPONSE_BYTES))]
    pub response: String,
    /// The frontend's proof over the run, the key and the response.
    #[schemars(length(max = 80))]
    pub proof: String,
}

/// Where a run is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
pub enum ToolRunPhase {
    /// Made, its Job not created yet.
    #[default]
    Pending,
    Running,
    /// A step asked its caller and no Pod runs: waiting for the answers.
    InputRequired,
    Succeeded,
    Failed,
    Cancelled,
}

impl ToolRunPhase {
    /// Succeeded, Failed and Cancelled never change again.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::InputRequired => "InputRequired",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Cancelled => "Cancelled",
        }
    }
}

/// What the operator has observed of a run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolRunStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ToolRunPhase>,
    /// Completed parts over all, e.g. "2/4".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub progress: Option<String>,
    /// A human-readable summary of the latest state change (a failure's cause).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8192))]
    pub message: Option<String>,
    /// The tool's output: its termination message (JSON when the tool has an
    /// `outputSchema`; for N parts, a JSON array of each part's, in order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_STORED_RESULT_BYTES))]
    pub result: Option<String>,
    /// A failed container's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -2_147_483_648i64, max = 2_147_483_647))]
    pub exit_code: Option<i32>,
    /// The uid of the Job this run made: results come only from its Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub job_uid: Option<String>,
    /// The uid of the Secret of arguments this run made: a Secret replaced
    /// under its name (another uid) means the tool may have read other
    /// arguments, and fails the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub arguments_secret_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it last took a slot (its first start, or its rerun after it was
    /// preempted): work that was already waiting then never takes this slot
    /// back mid-step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// The step running or last run: 0 for the first Job, one more after
    /// each round of answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_ROUNDS))]
    pub step: Option<u32>,
    /// While `InputRequired`: what the tool asks, key → request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "requests_or_none")]
    pub input_requests: Option<serde_json::Map<String, serde_json::Value>>,
    /// While `InputRequired`: the state the step left for the next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_STATE_BYTES))]
    pub input_state: Option<String>,
    /// When the run began to wait for its answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since: Option<Time>,
    /// Every request key asked so far (each is used once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_ANSWERS), inner(length(max = MAX_KEY_BYTES)))]
    pub asked_keys: Vec<String>,
    /// The files the run handed over, as the operator stored them; set
    /// when the run succeeds (no run completes before its files are stored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::tool_outputs::MAX_OUTPUTS))]
    pub outputs: Vec<crate::tool_outputs::ToolOutput>,
    /// Since when the running step's Pods wait for room on the cluster's
    /// nodes, none of them running, once they waited 30 s (see
    /// `MiningWorkflowStatus`'s field of the same name). Absent while its
    /// Pods run or it holds no slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for_node_since: Option<Time>,
    /// How many times a running step was stopped to give its slot to work
    /// that waited (a preemptible tool's run only); each time the step ran
    /// again from its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub preemptions: Option<u32>,
    /// The uid of the Job last stopped that way: while it is still seen
    /// going, it is never taken for the step's new Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub preempted_job_uid: Option<String>,
    /// The uid of the Secret of the current step's answers and state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub input_secret_uid: Option<String>,
}

fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A round's requests: at most [`MAX_REQUESTS_PER_ROUND`] keys of any JSON.
fn requests_or_none(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "nullable": true, "maxProperties": MAX_REQUESTS_PER_ROUND,
        "x-kubernetes-preserve-unknown-fields": true})
}

fn any_object_or_none(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "nullable": true, "x-kubernetes-preserve-unknown-fields": true})
}

impl McpToolSpec {
    /// How many parts each call runs (`completions`; 1 when the template says none).
    pub fn parts(&self) -> i32 {
        self.job_template.spec.as_ref().and_then(|s| s.completions).unwrap_or(1).max(1)
    }

    /// Why this definition cannot be offered as a tool, if it cannot: every
    /// part the frontend copies into memory or into a run is bounded here,
    /// so whoever may write McpTools cannot grow the frontend without limit.
    pub fn problem(&self) -> Option<String> {
        if let Some(why) = self.tool_name.as_deref().and_then(crate::tool_face::name_problem) {
            return Some(why);
        }
        if let Some(why) = crate::tool_resources::problem(&self.resources) {
            return Some(why);
        }
        if self.required_client_capabilities.len() > MAX_REQUIRED_CAPABILITIES {
            return Some(format!("requiredClientCapabilities names more than {MAX_REQUIRED_CAPABILITIES}"));
        }
        if self.description.len() > MAX_DESCRIPTION_BYTES {
            return Some(format!("description is longer than {MAX_DESCRIPTION_BYTES} bytes"));
        }
        if self.title.as_ref().is_some_and(|t| t.len() > MAX_TITLE_BYTES) {
            return Some(format!("title is longer than {MAX_TITLE_BYTES} bytes"));
        }
        if json_len(&self.input_schema) > MAX_SCHEMA_BYTES {
            return Some(format!("inputSchema is larger than {MAX_SCHEMA_BYTES} bytes"));
        }
        if self.input_schema.get("type").and_then(|t| t.as_str()) != Some("object") {
            return Some("inputSchema must have \"type\": \"object\"".into());
        }
        if self.output_schema.as_ref().is_some_and(|s| json_len(s) > MAX_SCHEMA_BYTES) {
            return Some(format!("outputSchema is larger than {MAX_SCHEMA_BYTES} bytes"));
        }
        if let Some(why) = self.caller_identity.as_ref().and_then(CallerIdentity::problem) {
            return Some(why);
        }
        if let Some(why) = crate::tool_template::template_problem(&self.job_template)
            .filter(|_| self.job_template.spec.is_none())
        {
            return Some(why);
        }
        if json_len(&self.job_template) > MAX_TEMPLATE_BYTES {
            return Some(format!("jobTemplate is larger than {MAX_TEMPLATE_BYTES} bytes"));
        }
        let Some(job) = self.job_template.spec.as_ref() else {
            return Some("jobTemplate.spec is required".into());
        };
        if job.template.spec.as_ref().is_none_or(|pod| pod.containers.is_empty()) {
            return Some("jobTemplate.spec.template.spec.containers is required".into());
        }
        if job.completions.is_some_and(|n| !(1..=MAX_COMPLETIONS).contains(&n)) {
            return Some(format!("jobTemplate.spec.completions must be from 1 to {MAX_COMPLETIONS}"));
        }
        let parts = job.completions.unwrap_or(1).max(1) as usize;
        if stored_result_bound(parts) > MAX_STORED_RESULT_BYTES {
            return Some(format!(
                "{parts} parts of up to {MAX_RESULT_BYTES} bytes each cannot be stored in one run's status \
                 ({MAX_STORED_RESULT_BYTES} bytes)"
            ));
        }
        crate::tool_template::template_problem(&self.job_template)
    }
}

/// The size of `value` as JSON.
fn json_len<T: Serialize>(value: &T) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |json| json.len())
}

mod run;
#[cfg(test)]
mod tests;
