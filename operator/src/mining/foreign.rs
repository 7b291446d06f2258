//! A Job that is not the operator's, standing where a block's Job should.

use k8s_openapi::jiff::Timestamp;
use mining_api::Work as _;
use mining_api::{MiningWorkflow, reasons};
use tracing::warn;

use super::WorkflowShell;
use crate::metrics::ErrorLabels;
use crate::mining::plan::status_foreign_job;
use crate::work::{Outcome, PlannedEvent, REPLAN_AFTER, Recorded, publish_events};
use crate::{Error, Result};

/// A Job that is not the operator's stands where a block's Job should: the
/// workflow fails visibly (reason ForeignJob, an Event naming the Job) and
/// nothing of that Job is ever read.
pub(super) async fn fail_for_foreign_job(
    workflow: &MiningWorkflow,
    shell: &WorkflowShell,
    job: &str,
    why: &str,
) -> Result<Outcome> {
    let name = workflow.metadata.name.clone().ok_or(Error::MissingMetadata("name"))?;
    shell.metrics.reconcile_errors.get_or_create(&ErrorLabels { error: "foreign_job" }).inc();
    if workflow.is_finished() {
        return Ok(Outcome::AWAIT_CHANGE);
    }
    warn!(workflow = %name, %job, %why, "a Job the operator did not build stands for a block; failing the workflow");
    let status = status_foreign_job(workflow, job, why, Timestamp::now());
    match shell.record_status(workflow, &status).await? {
        Recorded::Written => {}
        Recorded::Conflict => return Ok(Outcome::after(REPLAN_AFTER)),
        Recorded::Refused => return Ok(Outcome::AWAIT_CHANGE),
    }
    let note = status.message.clone().unwrap_or_default();
    let event = PlannedEvent { warning: true, reason: reasons::FOREIGN_JOB, note };
    publish_events(&shell.client, &shell.instance, workflow, &name, vec![event]);
    Ok(Outcome::AWAIT_CHANGE)
}
