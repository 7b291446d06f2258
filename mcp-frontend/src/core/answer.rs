//! What a tool answers, before a face puts it on the wire, and the two
//! calls every kind of work answers alike: get (with a wait) and cancel.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use rmcp::model::{CallToolResult, ContentBlock};
use tokio::time::Instant;

use super::{CancelOutcome, Core, Served, View, WaitListener};
use crate::contract::{Details, Outcome, OutcomeStatus, structured};
use crate::ids::Caller;
use crate::operator_presence::Presence;

/// A tool's answer in protocol-neutral form.
pub enum Answer {
    /// Where one piece of work (of any kind) stands, rendered.
    Outcome { status: OutcomeStatus, result: CallToolResult },
    /// A listing of the caller's work, rendered.
    List(CallToolResult),
    /// Arguments the model can fix: a tool error naming what is allowed.
    InvalidArguments(String),
    /// A valid request that cannot be served now (limit, API down): a tool error.
    Refused(String),
    /// A restricted tool (or a run of one) the caller is not granted: for
    /// this caller the tool is not there, so faces that answer in JSON-RPC
    /// errors answer as for an unknown tool (`-32602`), not as for a fault.
    NotGranted(String),
}

impl Answer {
    /// The answer about one piece of work as the caller sees it, with what
    /// is known of the operator; `id_text` is echoed when there is nothing to see.
    pub fn of<K: Served>(id_text: &str, view: View<K>, operator: Presence) -> Self {
        Self::outcome(match view {
            View::Missing => Outcome::<K::Details>::not_found(id_text),
            View::Found(work) => work.outcome(Timestamp::now()).with_operator(operator),
            View::Unreadable(problem) => Outcome::unreadable(id_text, problem),
            View::NotGranted(why) => return Self::NotGranted(why),
        })
    }

    pub fn outcome<D: Details>(outcome: Outcome<D>) -> Self {
        Self::Outcome { status: outcome.status, result: outcome.into_result() }
    }

    /// A listing: `text` for people, `value` as structured content.
    pub fn list(text: String, value: &impl serde::Serialize) -> Self {
        Self::List(structured(text, value, false))
    }

    /// The `outcome` label of the call metrics.
    pub fn metric_outcome(&self) -> &'static str {
        match self {
            Self::Outcome { status, .. } => status.as_str(),
            Self::List(_) => "listed",
            Self::InvalidArguments(_) => "invalid_arguments",
            Self::Refused(_) | Self::NotGranted(_) => "refused",
        }
    }

    /// The text of an error answer (for faces that answer errors as JSON-RPC errors).
    pub fn error_text(&self) -> Option<&str> {
        match self {
            Self::InvalidArguments(text) | Self::Refused(text) | Self::NotGranted(text) => Some(text),
            Self::Outcome { .. } | Self::List(_) => None,
        }
    }

    pub fn into_result(self) -> CallToolResult {
        match self {
            Self::Outcome { result, .. } | Self::List(result) => result,
            Self::InvalidArguments(text) | Self::Refused(text) | Self::NotGranted(text) => {
                CallToolResult::error(vec![ContentBlock::text(text)])
            }
        }
    }
}

impl Core {
    /// `get_mining_result`, `get_tool_result`: the caller's work `id_text`
    /// of kind `K`, waited for until `deadline`.
    pub async fn get_result<K: Served>(
        &self,
        caller: &Caller,
        id_text: &str,
        deadline: Instant,
        listener: &mut impl WaitListener,
    ) -> Answer {
        match self.find::<K>(caller, id_text).await {
            Ok(View::Found(work)) => {
                let view = self.wait(caller, work, deadline, listener).await;
                Answer::of(id_text, view, self.operator_presence())
            }
            Ok(view) => Answer::of(id_text, view, self.operator_presence()),
            Err(problem) => Answer::Refused(problem),
        }
    }

    /// `cancel_mining`, `cancel_tool_run`: asks the operator to stop the
    /// caller's work `id_text` of kind `K`, and waits up to `confirm` for it
    /// to say so.
    pub async fn cancel_confirmed<K: Served>(
        &self,
        caller: &Caller,
        id_text: &str,
        confirm: Duration,
        listener: &mut impl WaitListener,
    ) -> Answer {
        let work = match self.cancel::<K>(caller, id_text).await {
            Ok(CancelOutcome::NotCancelled(view)) => {
                return Answer::of(id_text, view, self.operator_presence());
            }
            Ok(CancelOutcome::AlreadyFinished(work)) => {
                return Answer::of(id_text, View::Found(work), self.operator_presence());
            }
            Ok(CancelOutcome::AlreadyRequested(work) | CancelOutcome::Requested(work)) => work,
            Err(problem) => return Answer::Refused(problem),
        };
        let mut until_cancelled = super::wait::UntilCancelled(listener);
        let view = self.wait(caller, work, Instant::now() + confirm, &mut until_cancelled).await;
        Answer::of(id_text, view, self.operator_presence())
    }
}
