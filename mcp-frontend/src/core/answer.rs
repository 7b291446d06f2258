//! What a tool answers, before a face puts it on the wire.

use k8s_openapi::jiff::Timestamp;
use rmcp::model::{CallToolResult, ContentBlock};

use super::View;
use crate::contract::{MiningOutcome, outcome, structured};
use crate::operator_presence::Presence;
use crate::tools::WorkflowList;

/// A tool's answer in protocol-neutral form.
pub enum Answer {
    Outcome(MiningOutcome),
    List(WorkflowList),
    /// Arguments the model can fix: a tool error naming what is allowed.
    InvalidArguments(String),
    /// A valid request that cannot be served now (limit, API down): a tool error.
    Refused(String),
}

impl Answer {
    /// The answer about one workflow as the caller sees it, with what is
    /// known of the operator; `id_text` is echoed when there is nothing to see.
    pub fn of(id_text: &str, view: View, operator: Presence) -> Self {
        match view {
            View::Missing => Self::Outcome(MiningOutcome::not_found(id_text)),
            View::Found(workflow) => {
                Self::Outcome(outcome(&workflow, Timestamp::now()).with_operator(operator))
            }
            View::Unreadable(problem) => Self::Outcome(MiningOutcome::unreadable(id_text, problem)),
        }
    }

    /// The `outcome` label of the call metrics.
    pub fn metric_outcome(&self) -> &'static str {
        match self {
            Self::Outcome(outcome) => outcome.status.as_str(),
            Self::List(_) => "listed",
            Self::InvalidArguments(_) => "invalid_arguments",
            Self::Refused(_) => "refused",
        }
    }

    /// The text of an error answer (for faces that answer errors as JSON-RPC errors).
    pub fn error_text(&self) -> Option<&str> {
        match self {
            Self::InvalidArguments(text) | Self::Refused(text) => Some(text),
            Self::Outcome(_) | Self::List(_) => None,
        }
    }

    pub fn into_result(self) -> CallToolResult {
        match self {
            Self::Outcome(outcome) => outcome.into_result(),
            Self::List(list) => {
                let mut text = format!("{} of your mining workflows (newest first):", list.workflows.len());
                for row in &list.workflows {
                    text.push_str(&format!(
                        "\n{} [{}] {}",
                        row.workflow_id,
                        row.status.as_str(),
                        row.status_message
                    ));
                }
                structured(text, &list, false)
            }
            Self::InvalidArguments(text) | Self::Refused(text) => {
                CallToolResult::error(vec![ContentBlock::text(text)])
            }
        }
    }
}
