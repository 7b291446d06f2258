//! The result contract: what a workflow's status means to a model (pure).
//!
//! Every tool that names a workflow answers with a [`MiningOutcome`]; its
//! `status` is a behavioural signal — use the result, poll again, stop and
//! report, stop, or start anew.

use k8s_openapi::jiff::Timestamp;
use mining_api::{MiningWorkflow, WorkflowPhase, condition_types, reasons};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use rmcp::model::{CallToolResult, ContentBlock};

use crate::operator_presence::Presence;

/// Longest wait a `poll_after_seconds` may suggest.
pub const MAX_POLL_AFTER_SECONDS: u32 = 60;

/// What to do next, in one word.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeStatus {
    /// The chain is mined and verified: use `result`.
    Completed,
    /// Still pending or mining: call `get_mining_result` again after `poll_after_seconds`.
    Running,
    /// Mining failed for good: report `reason` and `error`; do not poll again.
    Failed,
    /// Stopped by a cancel: do not poll again.
    Cancelled,
    /// The tool asks its caller something and waits, holding nothing:
    /// answer each of `input_requests` with `respond_tool_run`.
    InputRequired,
    /// No such workflow for this caller (unknown, malformed, expired or
    /// another caller's id): start anew, or find the id with `list_mining_workflows`.
    NotFound,
}

impl OutcomeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Running => "running",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::InputRequired => "input_required",
            Self::NotFound => "not_found",
        }
    }
}

/// Blocks mined so far over the chain's length.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub struct Progress {
    pub blocks_done: u32,
    pub blocks_total: u32,
}

/// One mined block.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ChainBlock {
    /// 1-based position in the chain.
    pub index: u32,
    /// The previous block's hash, or `GENESIS` for block 1.
    pub prev: String,
    /// The smallest nonce whose hash has `difficulty` leading zero bits.
    pub nonce: u64,
    /// SHA-256 of `"{index}:{prev}:{nonce}"`, 64 uppercase hex digits.
    pub hash: String,
    /// Candidates tried: `nonce + 1`.
    pub attempts: u64,
}

/// The mined chain of a completed workflow.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct MinedChain {
    /// Leading zero bits every block's hash has.
    pub difficulty: u32,
    pub blocks: Vec<ChainBlock>,
    pub total_attempts: u64,
    /// From the start of mining to the last block verified.
    pub elapsed_seconds: f64,
}

/// Where one piece of work stands, for the model that started it: one
/// contract for every kind of work — `status` says what to do next (use the
/// result, poll again, stop and report, stop, or start anew) — and the
/// kind's own `details` (a mined chain, a tool's output) beside it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct Outcome<D> {
    pub status: OutcomeStatus,
    /// The id to pass back to get, cancel or list this work.
    pub workflow_id: String,
    /// One sentence on where the work is, e.g. "Mined 2 of 4 blocks; mining block 3".
    pub status_message: String,
    #[serde(flatten)]
    pub details: D,
    /// When `status` is `failed`: a CamelCase reason such as `JobFailed`,
    /// `InvalidResult`, `DeadlineExceeded` or `OverLimit`. When `running`:
    /// `NoOperator` while no operator is running to do the work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When `status` is `failed`: what went wrong, for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When `status` is `running`: seconds to wait before polling again (1 to 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_after_seconds: Option<u32>,
    /// When `status` is `running` or `not_found`: exactly what to do next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// What one kind of work adds to its [`Outcome`].
pub trait Details: Default + Serialize {
    /// The work, in the words of an answer ("mining workflow", "tool run").
    const NOUN: &'static str;
    /// What to do when an id names nothing of this caller's.
    const NOT_FOUND_NEXT: &'static str;
    /// Parts done of all, for progress notifications.
    fn progress(&self) -> Option<Progress>;
    /// The result as text, for clients that show text only.
    fn result_text(&self) -> Option<String>;
    /// What the work asks its caller, key → request (a kind that never asks: none).
    fn input_requests(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        None
    }
    /// Files the work handed over, as MCP resource links (a kind without files: none).
    fn resource_links(&self) -> Vec<rmcp::model::Resource> {
        Vec::new()
    }
    /// The result as the work's own MCP content blocks, when it answered so
    /// (they come first in the answer).
    fn content_blocks(&self) -> Vec<ContentBlock> {
        Vec::new()
    }
}

/// The details of a mining workflow: blocks mined, and the verified chain.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct MiningDetails {
    /// Blocks mined so far over the chain's length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// Present when `status` is `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<MinedChain>,
}

impl Details for MiningDetails {
    const NOUN: &'static str = "mining workflow";
    const NOT_FOUND_NEXT: &'static str =
        "Call list_mining_workflows to find your workflows, or start_mining to start a new one.";

    fn progress(&self) -> Option<Progress> {
        self.progress
    }

    fn result_text(&self) -> Option<String> {
        let chain = self.result.as_ref()?;
        let lines: Vec<String> = chain
            .blocks
            .iter()
            .map(|block| format!("block {}: nonce {} hash {}", block.index, block.nonce, block.hash))
            .collect();
        Some(lines.join("\n"))
    }
}

/// The answer of `start_mining`, `get_mining_result` and `cancel_mining`.
pub type MiningOutcome = Outcome<MiningDetails>;

impl<D: Details> Outcome<D> {
    /// The same answer for an unknown, malformed, expired or foreign id.
    pub fn not_found(workflow_id: &str) -> Self {
        Self {
            status: OutcomeStatus::NotFound,
            workflow_id: workflow_id.to_string(),
            status_message: format!("No {} with this id exists for you (it may have expired).", D::NOUN),
            details: D::default(),
            reason: None,
            error: None,
            poll_after_seconds: None,
            next: Some(D::NOT_FOUND_NEXT.into()),
        }
    }

    /// The caller's work whose stored state cannot be read; `problem` says why.
    pub fn unreadable(workflow_id: &str, problem: String) -> Self {
        Self {
            status: OutcomeStatus::Failed,
            reason: Some("Unreadable".into()),
            status_message: format!("The {}'s stored state cannot be read", D::NOUN),
            error: Some(problem),
            next: None,
            ..Self::not_found(workflow_id)
        }
    }

    /// The answer as seen with the operator `presence`: unfinished work says
    /// that nobody is working on it when no operator leads, so an agent can
    /// tell "slow" from "nobody is working". Finished answers stay as they are.
    pub fn with_operator(mut self, presence: Presence) -> Self {
        if self.status == OutcomeStatus::Running
            && let Some(message) = without_operator(&self.status_message, presence)
        {
            self.status_message = message;
            self.reason.get_or_insert_with(|| NO_OPERATOR.to_string());
        }
        self
    }

    /// A short text rendering for clients that show text only.
    pub fn to_text(&self) -> String {
        let mut text = format!("[{}] {}: {}", self.status.as_str(), self.workflow_id, self.status_message);
        if let Some(result) = self.details.result_text() {
            text.push('\n');
            text.push_str(&result);
        }
        match (&self.error, &self.reason) {
            (Some(error), Some(reason)) => text.push_str(&format!("\nerror ({reason}): {error}")),
            (Some(error), None) => text.push_str(&format!("\nerror: {error}")),
            (None, _) => {}
        }
        if let Some(next) = &self.next {
            text.push_str(&format!("\nnext: {next}"));
        }
        text
    }

    /// The answer as a tool result: the text, the outcome as structured
    /// content and as JSON text (for clients that read text only), and a
    /// tool error when the work failed.
    pub fn into_result(self) -> CallToolResult {
        let failed = self.status == OutcomeStatus::Failed;
        let links = self.details.resource_links();
        let blocks = self.details.content_blocks();
        let mut result = structured(self.to_text(), &self, failed);
        result.content.splice(0..0, blocks);
        result.content.extend(links.into_iter().map(ContentBlock::resource_link));
        result
    }
}

/// A result with `structuredContent`, a short rendering and the JSON as text
/// (for clients that read text only).
pub fn structured(text: String, value: &impl Serialize, is_error: bool) -> CallToolResult {
    let value = serde_json::to_value(value).unwrap_or_default();
    let content = vec![ContentBlock::text(text), ContentBlock::text(value.to_string())];
    let mut result = if is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
    result.structured_content = Some(value);
    result
}

/// Where a workflow stands, read from its status (pure; `now` injected).
pub fn outcome(workflow: &MiningWorkflow, now: Timestamp) -> MiningOutcome {
    let id = workflow.metadata.name.clone().unwrap_or_default();
    // What the caller asked for: the spec, which only the caller's own
    // start wrote. A status (anyone with status rights can write one) is
    // checked against it, never trusted to say what was asked.
    let total = workflow.spec.blocks;
    let difficulty = workflow.spec.difficulty;
    let done = u32::try_from(workflow.mined_blocks().len()).unwrap_or(u32::MAX).min(total);
    let progress = Some(Progress { blocks_done: done, blocks_total: total });
    let mut answer = MiningOutcome {
        status: OutcomeStatus::Running,
        workflow_id: id.clone(),
        status_message: String::new(),
        details: MiningDetails { progress, result: None },
        reason: None,
        error: None,
        poll_after_seconds: None,
        next: None,
    };
    match workflow.phase() {
        WorkflowPhase::Succeeded => match status_agrees_with_spec(workflow)
            .and_then(|()| verified_chain(workflow, difficulty, total))
        {
            Ok(chain) => {
                answer.status = OutcomeStatus::Completed;
                answer.status_message =
                    format!("Mined all {total} {} at difficulty {difficulty}", plural(total));
                answer.details.result = Some(chain);
            }
            Err(problem) => {
                answer.status = OutcomeStatus::Failed;
                answer.status_message = "The recorded chain does not verify".into();
                answer.reason = Some(reasons::INVALID_RESULT.into());
                answer.error = Some(problem);
            }
        },
        WorkflowPhase::Failed => {
            answer.status = OutcomeStatus::Failed;
            let reason = ready_reason(workflow).unwrap_or("Failed").to_string();
            // The Ready condition has the whole text; `status.message` is a short column.
            let error = ready_message(workflow)
                .or(workflow.status.as_ref().and_then(|s| s.message.as_deref()))
                .filter(|m| !m.is_empty())
                .unwrap_or("mining failed")
                .to_string();
            answer.status_message =
                format!("Failed after mining {done} of {total} {}: {error}", plural(total));
            answer.reason = Some(reason);
            answer.error = Some(error);
        }
        WorkflowPhase::Cancelled => {
            answer.status = OutcomeStatus::Cancelled;
            answer.status_message = format!("Cancelled after mining {done} of {total} {}", plural(total));
        }
        phase @ (WorkflowPhase::Pending | WorkflowPhase::Mining) => {
            answer.status_message = running_message(workflow, phase, done, total);
            let wait = poll_after_seconds(workflow, now);
            answer.poll_after_seconds = Some(wait);
            answer.next = Some(format!(
                "Call get_mining_result with workflow_id \"{id}\" in about {wait} seconds \
                 (or pass wait_seconds to let the server wait for you)."
            ));
        }
    }
    answer
}

/// The reason a running workflow's answer carries while no operator runs.
pub const NO_OPERATOR: &str = "NoOperator";

/// An unfinished answer's `status_message` (of any kind of work) when no
/// operator leads: it says so, and that the work goes on when one returns.
pub fn without_operator(status_message: &str, presence: Presence) -> Option<String> {
    let Presence::Absent { since } = presence else { return None };
    let since = since.map(|t| format!(" since {}", t.round(k8s_openapi::jiff::Unit::Second).unwrap_or(t)));
    Some(format!(
        "{status_message}. No operator is running{}: the work is recorded and goes on when one returns \
         (ask the cluster's operators to check the mining-operator Deployment)",
        since.unwrap_or_default()
    ))
}

fn plural(blocks: u32) -> &'static str {
    if blocks == 1 { "block" } else { "blocks" }
}

fn ready_reason(workflow: &MiningWorkflow) -> Option<&str> {
    workflow.condition(condition_types::READY).map(|c| c.reason.as_str())
}

fn ready_message(workflow: &MiningWorkflow) -> Option<&str> {
    workflow.condition(condition_types::READY).map(|c| c.message.as_str())
}

fn running_message(workflow: &MiningWorkflow, phase: WorkflowPhase, done: u32, total: u32) -> String {
    let mined = format!("Mined {done} of {total} {}", plural(total));
    if workflow.spec.cancel {
        return format!("Cancel requested; {mined}");
    }
    match phase {
        // Its Pods cannot start yet: the operator's words say what it waits for.
        WorkflowPhase::Mining => match workflow
            .condition(condition_types::MINING)
            .filter(|c| c.reason == mining_api::pod_start::reasons::WAITING_TO_START)
        {
            Some(waiting) => format!("{mined}; {}", waiting.message),
            None => format!("{mined}; mining block {}", done.saturating_add(1).min(total)),
        },
        _ => {
            let queued = workflow
                .condition(condition_types::ADMITTED)
                .filter(|c| c.reason == reasons::QUEUED || c.reason == reasons::YIELDED);
            match queued {
                // After a yield the operator's text says so ("queued:
                // yielded its slot after block ...") beside what was mined.
                Some(condition) if !condition.message.is_empty() && done > 0 => {
                    format!("{mined}; {}", condition.message)
                }
                Some(condition) if !condition.message.is_empty() => format!("Queued: {}", condition.message),
                Some(_) => "Queued: waiting for a free mining slot".into(),
                None => "Accepted; mining has not started yet".into(),
            }
        }
    }
}

/// Seconds to wait before polling again: the remaining work estimated from the
/// blocks mined so far, else a wait that grows with the workflow's age;
/// always within 1..=60.
pub fn poll_after_seconds(workflow: &MiningWorkflow, now: Timestamp) -> u32 {
    let total = workflow.total_blocks();
    let mined = workflow.mined_blocks();
    let durations: Vec<i64> = mined
        .iter()
        .filter_map(|b| {
            Some(b.finished_at.as_ref()?.0.as_second().saturating_sub(b.started_at.as_ref()?.0.as_second()))
        })
        .map(|seconds| seconds.max(0))
        .collect();
    let seconds = if durations.is_empty() {
        let created = workflow.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second());
        let age = created.map_or(0, |c| now.as_second().saturating_sub(c));
        age / 2
    } else {
        let count = i64::try_from(durations.len()).unwrap_or(i64::MAX);
        let mean = durations.iter().fold(0i64, |sum, d| sum.saturating_add(*d)) / count;
        let done = u32::try_from(mined.len()).unwrap_or(u32::MAX);
        let remaining = i64::from(total.saturating_sub(done));
        let since_last = mined
            .last()
            .and_then(|b| b.finished_at.as_ref())
            .map_or(0, |t| now.as_second().saturating_sub(t.0.as_second()).max(0));
        mean.saturating_mul(remaining).saturating_sub(since_last)
    };
    u32::try_from(seconds.clamp(1, i64::from(MAX_POLL_AFTER_SECONDS))).unwrap_or(MAX_POLL_AFTER_SECONDS)
}

/// The status's own record of what it mined must be what the spec asked for.
fn status_agrees_with_spec(workflow: &MiningWorkflow) -> Result<(), String> {
    let Some(status) = workflow.status.as_ref() else { return Ok(()) };
    let spec = &workflow.spec;
    if let Some(admitted) = status.admitted_difficulty.filter(|d| *d != spec.difficulty) {
        return Err(format!(
            "the status says difficulty {admitted}, the workflow asked for {}",
            spec.difficulty
        ));
    }
    if let Some(admitted) = status.admitted_blocks.filter(|b| *b != spec.blocks) {
        return Err(format!("the status says {admitted} blocks, the workflow asked for {}", spec.blocks));
    }
    Ok(())
}

/// The chain as recorded, re-verified against the spec: a status anyone with
/// write access could have forged is checked (one SHA-256 a block, linked
/// from GENESIS, `attempts` = nonce + 1) before it is called mined.
fn verified_chain(workflow: &MiningWorkflow, difficulty: u32, total: u32) -> Result<MinedChain, String> {
    let status = workflow.status.clone().unwrap_or_default();
    if status.blocks.len() != total as usize {
        return Err(format!("the status holds {} blocks, the chain has {total}", status.blocks.len()));
    }
    let prevs = mining_api::verify_chain(&status.blocks, difficulty)?;
    let total_attempts = status.blocks.iter().fold(0u64, |sum, block| sum.saturating_add(block.attempts));
    let blocks = (status.blocks.iter().zip(prevs))
        .map(|(block, prev)| ChainBlock {
            index: block.index,
            prev,
            nonce: block.nonce,
            hash: block.hash.clone(),
            attempts: block.attempts,
        })
        .collect();
    let elapsed_seconds = match (&status.started_at, &status.finished_at) {
        (Some(start), Some(end)) => end.0.duration_since(start.0).as_secs_f64().max(0.0),
        _ => 0.0,
    };
    Ok(MinedChain { difficulty, blocks, total_attempts, elapsed_seconds })
}

/// The newest moment the workflow's status records a change; once it has
/// finished, the moment it finished (later edits change no task).
pub fn last_updated(workflow: &MiningWorkflow) -> Option<Timestamp> {
    let status = workflow.status.as_ref()?;
    if let Some(finished) = &status.finished_at
        && status.phase.is_some_and(|phase| phase.is_finished())
    {
        return Some(finished.0);
    }
    let times = [status.started_at.as_ref(), status.finished_at.as_ref()]
        .into_iter()
        .flatten()
        .chain(status.blocks.iter().filter_map(|b| b.finished_at.as_ref()))
        .chain(status.conditions.iter().map(|c| &c.last_transition_time));
    times.map(|time| time.0).max()
}

#[cfg(test)]
mod tests;
