//! A Job that is not the operator's, standing where a block's Job should.

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action as Requeue;
use mining_api::Work as _;
use mining_api::{MiningWorkflow, reasons};
use tracing::warn;

use super::{Context, REPLAN_AFTER};
use crate::apply::{publish_events, record_status};
use crate::metrics::ErrorLabels;
use crate::plan::{PlannedEvent, status_foreign_job};
use crate::{Error, Result};

/// A Job that is not the operator's stands where a block's Job should: the
/// workflow fails visibly (reason ForeignJob, an Event naming the Job) and
/// nothing of that Job is ever read.
pub(super) async fn fail_for_foreign_job(
    workflow: &MiningWorkflow,
    ctx: &Context,
    job: &str,
    why: &str,
) -> Result<Requeue> {
    let name = workflow.metadata.name.clone().ok_or(Error::MissingMetadata("name"))?;
    let namespace = workflow.metadata.namespace.clone().ok_or(Error::MissingMetadata("namespace"))?;
    ctx.metrics.reconcile_errors.get_or_create(&ErrorLabels { error: "foreign_job" }).inc();
    if workflow.is_finished() {
        return Ok(Requeue::await_change());
    }
    warn!(workflow = %name, %job, %why, "a Job the operator did not build stands for a block; failing the workflow");
    let status = status_foreign_job(workflow, job, why, Timestamp::now());
    let settings = ctx.miner_settings();
    let target = ctx.target(workflow, &name, &namespace, &settings);
    match record_status(&target, &status).await {
        Ok(true) => {}
        Ok(false) => return Ok(Requeue::requeue(REPLAN_AFTER)),
        Err(source) => return Err(Error::WriteStatus { workflow: name, source }),
    }
    let note = status.message.clone().unwrap_or_default();
    let event = PlannedEvent { warning: true, reason: reasons::FOREIGN_JOB, note };
    publish_events(&ctx.client, &ctx.instance, workflow, &name, vec![event]);
    ctx.queue.wake_next();
    Ok(Requeue::await_change())
}
