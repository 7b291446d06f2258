//! Cancelling: one patch of `spec.cancel`, asked for once.

use kube::Api;
use mining_api::MiningWorkflow;
use mining_api::Work as _;

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
        let mut view = self.find(caller, id_text).await?;
        // The cache may lag: a conflict means the workflow changed since,
        // and the decision is made once more on the version just read.
        for fresh_read in [false, true] {
            let workflow = match view {
                View::Found(workflow) => workflow,
                view => return Ok(CancelOutcome::NotCancelled(view)),
            };
            if workflow.is_finished() {
                return Ok(CancelOutcome::AlreadyFinished(workflow));
            }
            if workflow.spec.cancel {
                return Ok(CancelOutcome::AlreadyRequested(workflow));
            }
            let name = workflow.metadata.name.clone().unwrap_or_default();
            let reproof = self.keys.reproof(&*workflow);
            let api = self.api_of(&workflow);
            match self.api_call("patch", workflows::request_cancel(api, &workflow, reproof)).await {
                Ok(patched) => {
                    tracing::info!(workflow = %name, caller = %caller.name, "cancel requested");
                    return Ok(CancelOutcome::Requested(Box::new(patched)));
                }
                Err(err) if err.is_conflict() && !fresh_read => {
                    view = self.read_fresh(caller, api, &name).await?;
                }
                Err(err) => {
                    self.count_api_error("patch");
                    return Err(format!("could not cancel: {err}"));
                }
            }
        }
        Err("could not cancel: the workflow kept changing; try again".into())
    }

    /// The caller's workflow `name` as the API server has it now.
    async fn read_fresh(
        &self,
        caller: &Caller,
        api: &Api<MiningWorkflow>,
        name: &str,
    ) -> Result<View, String> {
        match self.api_call("get", workflows::get(api, name)).await {
            Ok(Some(workflow)) if self.owns(&workflow, caller) => Ok(View::Found(Box::new(workflow))),
            Ok(_) => Ok(View::Missing),
            Err(err) => {
                self.count_api_error("get");
                Err(format!("cannot read the workflow: {err}"))
            }
        }
    }
}
