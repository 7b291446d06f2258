//! Cancelling: one patch of `spec.cancel`, asked for once.

use mining_api::MiningWorkflow;

use super::{Core, View};
use crate::ids::Caller;
use crate::workflows;

/// What came of a cancel.
pub enum CancelOutcome {
    /// Nothing this caller may cancel: unknown, foreign or unreadable.
    NotCancelled(View),
    /// Finished before the cancel: left as it is.
    AlreadyFinished(Box<MiningWorkflow>),
    /// A cancel was already recorded; nothing new was written.
    AlreadyRequested(Box<MiningWorkflow>),
    /// `spec.cancel` is now set; the workflow as the patch returned it.
    Requested(Box<MiningWorkflow>),
}

impl Core {
    /// Asks the operator to stop the caller's workflow `id_text`. The error
    /// says why the API server could not be asked.
    pub async fn cancel(&self, caller: &Caller, id_text: &str) -> Result<CancelOutcome, String> {
        let workflow = match self.find(caller, id_text).await? {
            View::Found(workflow) => workflow,
            view => return Ok(CancelOutcome::NotCancelled(view)),
        };
        if workflow.is_finished() {
            return Ok(CancelOutcome::AlreadyFinished(workflow));
        }
        if workflow.spec.cancel {
            return Ok(CancelOutcome::AlreadyRequested(workflow));
        }
        let name = workflow.metadata.name.as_deref().unwrap_or(id_text);
        let reproof = self.keys.reproof(&workflow);
        match self.api_call("patch", workflows::request_cancel(&self.api, name, reproof)).await {
            Ok(patched) => {
                tracing::info!(workflow = name, caller = %caller.name, "cancel requested");
                Ok(CancelOutcome::Requested(Box::new(patched)))
            }
            Err(err) => {
                self.count_api_error("patch");
                Err(format!("could not cancel: {err}"))
            }
        }
    }
}
