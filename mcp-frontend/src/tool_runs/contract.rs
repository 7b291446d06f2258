//! What a tool run means to a model (pure): the same result contract as
//! mining — `status`, `workflow_id`, `poll_after_seconds`, `result`,
//! `error` — with `result` the tool's own output.

use k8s_openapi::jiff::Timestamp;
use mining_api::{ToolRun, ToolRunPhase};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::contract::{Details, MAX_POLL_AFTER_SECONDS, Outcome, OutcomeStatus, Progress};
use crate::tools::{input_schema, output_schema};

pub const GET_TOOL_RESULT: &str = "get_tool_result";
pub const CANCEL_TOOL_RUN: &str = "cancel_tool_run";
pub const LIST_TOOL_RUNS: &str = "list_tool_runs";
pub const RESPOND_TOOL_RUN: &str = "respond_tool_run";
/// The companion tools every defined tool shares.
pub const COMPANIONS: [&str; 4] = [GET_TOOL_RESULT, CANCEL_TOOL_RUN, LIST_TOOL_RUNS, RESPOND_TOOL_RUN];

/// What a tool run adds to its [`Outcome`]: the tool, its parts, its output.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct ToolDetails {
    /// The tool called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Completed parts over all, e.g. "1/4".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Present when `status` is `completed`: the tool's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// When the tool's container failed: its exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Present when `status` is `input_required`: what the tool asks, key →
    /// an MCP request (`elicitation/create`: ask the user the `message` and
    /// answer `{"action": "accept", "content": {…}}` matching
    /// `requestedSchema`, or `decline`/`cancel`; `sampling/createMessage`:
    /// answer as the model `{"role": "assistant", "content": {…}, "model": …}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<serde_json::Map<String, Value>>,
    /// Present when `status` is `completed` and the tool handed over files:
    /// each is an MCP resource (read it with `resources/read` on its `uri`;
    /// only you can, until the run expires).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileLink>,
    /// The tool answered in MCP content blocks: `result` is their array,
    /// and they lead the call's content.
    #[serde(skip)]
    pub content: bool,
}

/// One file a run handed over.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileLink {
    pub uri: String,
    pub name: String,
    pub mime_type: String,
    /// Bytes.
    pub size: u64,
}

impl FileLink {
    /// The links of a succeeded run's recorded files (none when what is
    /// recorded is not what an upload could record).
    pub fn of(run: &ToolRun) -> Vec<Self> {
        let id = run.metadata.name.as_deref().unwrap_or_default();
        let outputs = run.status.as_ref().map(|s| s.outputs.as_slice()).unwrap_or_default();
        if mining_api::tool_outputs::check_recorded(outputs).is_err() {
            return Vec::new();
        }
        outputs
            .iter()
            .map(|o| FileLink {
                uri: mining_api::tool_outputs::resource_uri(id, &o.name),
                name: o.name.clone(),
                mime_type: o.media_type.clone(),
                size: o.size,
            })
            .collect()
    }
}

impl Details for ToolDetails {
    const NOUN: &'static str = "tool run";
    const NOT_FOUND_NEXT: &'static str = "Call the tool again, or find the id with list_tool_runs.";

    fn progress(&self) -> Option<Progress> {
        let (done, total) = self.progress.as_deref()?.split_once('/')?;
        Some(Progress { blocks_done: done.parse().ok()?, blocks_total: total.parse().ok()? })
    }

    fn input_requests(&self) -> Option<&serde_json::Map<String, Value>> {
        self.input_requests.as_ref()
    }

    fn resource_links(&self) -> Vec<rmcp::model::Resource> {
        self.files
            .iter()
            .map(|file| {
                let mut link = rmcp::model::Resource::new(file.uri.clone(), file.name.clone());
                link.mime_type = Some(file.mime_type.clone());
                link.size = Some(file.size);
                link
            })
            .collect()
    }

    fn content_blocks(&self) -> Vec<rmcp::model::ContentBlock> {
        let Some(Value::Array(blocks)) = self.result.as_ref().filter(|_| self.content) else {
            return Vec::new();
        };
        blocks.iter().filter_map(|block| serde_json::from_value(block.clone()).ok()).collect()
    }

    fn result_text(&self) -> Option<String> {
        let mut text = self.result.as_ref().map(|result| match result {
            _ if self.content => "result: the content blocks above".to_string(),
            Value::String(text) => format!("result: {text}"),
            other => format!("result: {other}"),
        })?;
        for file in &self.files {
            text.push_str(&format!(
                "\nfile: {} ({}, {} bytes; resources/read)",
                file.uri, file.mime_type, file.size
            ));
        }
        Some(text)
    }
}

/// The answer of a defined tool, `get_tool_result` and `cancel_tool_run`.
pub type ToolOutcome = Outcome<ToolDetails>;

/// What `run` means to the model that called it, at `now`.
pub fn run_outcome(run: &ToolRun, now: Timestamp) -> ToolOutcome {
    let id = run.metadata.name.clone().unwrap_or_default();
    let status = run.status.clone().unwrap_or_default();
    let details = ToolDetails {
        tool: Some(run.spec.tool.clone()),
        progress: status.progress.clone(),
        ..ToolDetails::default()
    };
    let base = ToolOutcome { details, next: None, ..ToolOutcome::not_found(&id) };
    match run.phase() {
        ToolRunPhase::Pending | ToolRunPhase::Running => {
            let started = run.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
            let age = now.duration_since(started).as_secs().max(0) as u64;
            let poll = (age / 4).clamp(1, u64::from(MAX_POLL_AFTER_SECONDS)) as u32;
            ToolOutcome {
                status: OutcomeStatus::Running,
                status_message: {
                    // The operator's "running: LINE": the tool's latest status line.
                    let line = status
                        .message
                        .as_deref()
                        .and_then(|m| m.strip_prefix(mining_api::tool::RUNNING_PREFIX));
                    // The operator's "queued: …" names the limit that holds
                    // the run (never another caller), or that it gave its
                    // slot back and runs its step again.
                    let queued = status
                        .message
                        .as_deref()
                        .filter(|m| run.phase() == ToolRunPhase::Pending && m.starts_with("queued"));
                    // A run of one part has no parts to count (its progress is 0/1, then done).
                    let progress = status.progress.as_ref().filter(|_| run.parts() > 1);
                    match (line, progress) {
                        _ if let Some(queued) = queued => format!("Waiting for a slot ({queued})"),
                        (Some(line), Some(progress)) => format!("Running ({progress} parts done): {line}"),
                        (Some(line), None) => format!("Running: {line}"),
                        (None, Some(progress)) => format!("Running ({progress} parts done)"),
                        (None, None) => "Waiting for the tool's Job to start".into(),
                    }
                },
                poll_after_seconds: Some(poll),
                next: Some(format!("Call get_tool_result with workflow_id {id} after {poll} seconds.")),
                ..base
            }
        }
        ToolRunPhase::InputRequired => {
            let requests = status.input_requests.clone().unwrap_or_default();
            let questions: Vec<String> = requests
                .iter()
                .map(|(key, request)| {
                    let said = request
                        .pointer("/params/message")
                        .and_then(Value::as_str)
                        .map(|message| format!("{key}: {message}"));
                    said.unwrap_or_else(|| {
                        format!("{key}: asks the model ({})", request["method"].as_str().unwrap_or("?"))
                    })
                })
                .collect();
            let mut asking = ToolOutcome {
                status: OutcomeStatus::InputRequired,
                status_message: format!("The tool asks and waits: {}", questions.join("; ")),
                next: Some(format!(
                    "Answer each of input_requests (ask the user an elicitation's message; answer a sampling \
                     request yourself), then call {RESPOND_TOOL_RUN} with workflow_id {id} and responses \
                     {{key: answer}}; then get_tool_result."
                )),
                ..base
            };
            asking.details.input_requests = Some(requests);
            asking
        }
        ToolRunPhase::Succeeded => {
            let mut done = ToolOutcome {
                status: OutcomeStatus::Completed,
                status_message: "The tool finished".into(),
                ..base
            };
            let (result, content) = parse_result(run);
            done.details.result = Some(result);
            done.details.content = content;
            done.details.files = FileLink::of(run);
            done
        }
        ToolRunPhase::Failed => {
            let mut failed = ToolOutcome {
                status: OutcomeStatus::Failed,
                status_message: "The tool failed".into(),
                error: Some(status.message.clone().unwrap_or_else(|| "the run failed".into())),
                ..base
            };
            failed.details.exit_code = status.exit_code;
            failed
        }
        ToolRunPhase::Cancelled => {
            ToolOutcome { status: OutcomeStatus::Cancelled, status_message: "Cancelled".into(), ..base }
        }
    }
}

/// The stored result as the model reads it: JSON when the tool declares an
/// output schema (the operator checked it), content blocks when it answered
/// in them (checked again: a status is anyone's with status rights), else
/// text; and whether it is content.
fn parse_result(run: &ToolRun) -> (Value, bool) {
    let text = run.status.as_ref().and_then(|s| s.result.clone()).unwrap_or_default();
    let parts = run.parts() > 1;
    if run.spec.output_schema.is_some() || parts {
        (serde_json::from_str(&text).unwrap_or(Value::String(text)), false)
    } else if let Some(Ok(blocks)) = mining_api::tool_content::parse(&text) {
        (Value::Array(blocks), true)
    } else {
        (Value::String(text), false)
    }
}

/// `ToolOutcome`'s JSON Schema with `result` typed by the tool's
/// `outputSchema` (text when it has none).
pub fn outcome_schema(result: Option<&JsonObject>) -> JsonObject {
    let mut schema = crate::tools::output_schema::<ToolOutcome>().as_ref().clone();
    let typed = match result {
        Some(result) => Value::Object(result.clone()),
        None => json!({"type": "string"}),
    };
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert(
            "result".into(),
            json!({"description": "Present when `status` is `completed`: the tool's output.",
                   "anyOf": [typed, {"type": "array"}]}),
        );
    }
    schema
}

/// `get_tool_result`'s arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetToolResultArgs {
    /// The workflow_id a tool call answered with.
    pub workflow_id: String,
    /// Seconds to wait for the run to finish before answering.
    #[serde(default)]
    pub wait_seconds: Option<u32>,
}

/// `cancel_tool_run`'s arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelToolRunArgs {
    /// The workflow_id a tool call answered with.
    pub workflow_id: String,
}

/// `respond_tool_run`'s arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RespondToolRunArgs {
    /// The workflow_id of the run whose status is `input_required`.
    pub workflow_id: String,
    /// One answer per key of the run's `input_requests`: for an elicitation
    /// `{"action": "accept", "content": {…}}` (content matching its
    /// requestedSchema) or `{"action": "decline"}`; for a sampling request
    /// `{"role": "assistant", "content": {"type": "text", "text": …}, "model": …}`.
    pub responses: serde_json::Map<String, Value>,
}

/// `respond_tool_run`'s answer: the run once `recorded` answers are in
/// (pure). Requests answered now or before are no longer shown; when none
/// is left the next step is queued, and the caller polls as for any run.
pub fn responded_outcome(
    run: &ToolRun,
    recorded: &[String],
    ignored: &[String],
    now: Timestamp,
) -> ToolOutcome {
    let mut outcome = run_outcome(run, now);
    if outcome.status != OutcomeStatus::InputRequired {
        return outcome;
    }
    let id = outcome.workflow_id.clone();
    let outstanding: serde_json::Map<String, Value> = outcome
        .details
        .input_requests
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|(key, _)| !run.spec.input_responses.contains_key(key) && !recorded.contains(key))
        .collect();
    let ignored = match ignored {
        [] => String::new(),
        keys => format!(" (not asked or already answered, so ignored: {})", keys.join(", ")),
    };
    if outstanding.is_empty() {
        return ToolOutcome {
            status: OutcomeStatus::Running,
            status_message: format!("Answers recorded{ignored}; the tool's next step is queued"),
            poll_after_seconds: Some(2),
            next: Some(format!("Call {GET_TOOL_RESULT} with workflow_id {id} after 2 seconds.")),
            ..outcome
        };
    }
    let keys: Vec<&str> = outstanding.keys().map(String::as_str).collect();
    outcome.status_message =
        format!("Recorded {}{ignored}; the tool still waits for {}", recorded.join(", "), keys.join(", "));
    outcome.details.input_requests = Some(outstanding);
    outcome
}

/// `list_tool_runs`'s arguments.
#[derive(Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ListToolRunsArgs {
    /// Only runs of this tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// Most runs listed, newest first (default 20).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One row of `list_tool_runs`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ListedRun {
    pub workflow_id: String,
    pub tool: String,
    pub status: OutcomeStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// RFC 3339 creation time.
    pub created: String,
    pub status_message: String,
}

/// `list_tool_runs`' answer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct RunList {
    pub runs: Vec<ListedRun>,
    /// How many runs matched (more than listed when over the limit).
    pub total: u32,
}

/// The companion tools' listings.
pub fn companion_tools() -> Vec<Tool> {
    let outcome = output_schema::<ToolOutcome>();
    vec![
        Tool::new(
            GET_TOOL_RESULT,
            "Get the state or result of a tool run by the workflow_id a tool call answered with. \"completed\" \
             carries the result; \"running\" means call again after poll_after_seconds; \"failed\" and \
             \"cancelled\" are final; \"not_found\" means the id is unknown to you.",
            input_schema::<GetToolResultArgs>(),
        )
        .with_title("Get tool result")
        .with_raw_output_schema(outcome.clone())
        .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
        Tool::new(
            CANCEL_TOOL_RUN,
            "Cancel a tool run by its workflow_id. A finished run is left as it is.",
            input_schema::<CancelToolRunArgs>(),
        )
        .with_title("Cancel tool run")
        .with_raw_output_schema(outcome.clone())
        .with_annotations(ToolAnnotations::new().read_only(false).destructive(true).idempotent(true).open_world(false)),
        Tool::new(
            RESPOND_TOOL_RUN,
            "Answer what a tool run asks. When a tool's status is \"input_required\", its input_requests \
             map keys to questions: for an elicitation, ask the user its message and pass their answer as \
             {\"action\": \"accept\", \"content\": {...}} matching its requestedSchema (or \"decline\"); \
             for a sampling request, answer it yourself. The tool continues once every key is answered.",
            input_schema::<RespondToolRunArgs>(),
        )
        .with_title("Respond to a tool run")
        .with_raw_output_schema(outcome.clone())
        .with_annotations(ToolAnnotations::new().read_only(false).destructive(false).idempotent(true).open_world(false)),
        Tool::new(
            LIST_TOOL_RUNS,
            "List your tool runs, newest first, with their workflow_id, tool and status.",
            input_schema::<ListToolRunsArgs>(),
        )
        .with_title("List tool runs")
        .with_raw_output_schema(output_schema::<RunList>())
        .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
    ]
}

#[cfg(test)]
mod tests;
