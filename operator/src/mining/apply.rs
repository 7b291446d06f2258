//! The apply step of a workflow's reconcile: the few writes a plan asks
//! for (create or adopt a Job, delete one, write the status through the
//! shell), in the one order that keeps every guarantee ([`run`]), and the
//! Events that describe them. Each is one API call; deciding is `plan`'s job.

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use mining_api::MiningWorkflow;
use std::time::Instant;
use tracing::info;

use crate::memory::{ExpectedJob, Reservation};
use crate::mining::job::{MinerSettings, build_block_job, build_range_job};
use crate::mining::plan::{Action, Plan};
use crate::mining::provenance::job_mismatch;
use crate::work::{MANAGER, Recorded, publish_events};
use crate::{Error, Result};
use mining_api::provenance::controlled_by;

/// The workflow a plan is applied to, and what applying it needs.
pub struct Target<'a> {
    pub shell: &'a crate::work::Shell<MiningWorkflow>,
    pub settings: &'a MinerSettings<'a>,
    /// As planned on (the freshest status this operator knows).
    pub workflow: &'a MiningWorkflow,
    pub name: &'a str,
    pub namespace: &'a str,
}

/// What applying a plan came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Every action taken and the status written (or unchanged).
    Done,
    /// Someone wrote since the plan's status was read: plan again.
    Replan,
    /// Retention is over: the workflow was deleted.
    WorkflowDeleted,
    /// The API server refused the planned status; the workflow failed with `StatusRejected`.
    StatusRejected,
}

/// Applies `plan`: deletions first (a status saying Cancelled must not stand
/// while its Jobs still run), then the status, then creations (a block is
/// recorded before the next block's Job builds on it), then the Events.
/// `admission` is released once the status is written.
pub async fn run(target: &Target<'_>, plan: &Plan, admission: Option<Reservation<'_>>) -> Result<Applied> {
    let name = target.name;
    let jobs: Api<Job> = Api::namespaced(target.shell.client.clone(), target.namespace);
    for action in &plan.actions {
        match action {
            Action::DeleteJob { name: job } => delete_job(&jobs, name, job).await?,
            Action::DeleteWorkflow => {
                let api: Api<MiningWorkflow> = Api::namespaced(target.shell.client.clone(), target.namespace);
                match api.delete(name, &DeleteParams::background()).await {
                    Ok(_) => info!(workflow = %name, "retention over; deleted workflow"),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(source) => return Err(Error::DeleteWorkflow { workflow: name.to_string(), source }),
                }
                return Ok(Applied::WorkflowDeleted);
            }
            Action::CreateJob { .. } | Action::CreateRangeJob { .. } | Action::CleanUpJob { .. } => {}
        }
    }
    if target.workflow.status.as_ref() != Some(&plan.status) {
        match target.shell.record_status(target.workflow, &plan.status).await? {
            Recorded::Written => info!(
                workflow = %name,
                namespace = %target.namespace,
                phase = %plan.status.phase.unwrap_or_default(),
                progress = plan.status.progress.as_deref().unwrap_or(""),
                "status updated"
            ),
            Recorded::Conflict => return Ok(Applied::Replan),
            Recorded::Refused => return Ok(Applied::StatusRejected),
        }
    }
    drop(admission);
    for action in &plan.actions {
        let workflow = target.workflow;
        let (job, block, range) = match action {
            Action::CreateJob { block, prev, difficulty } => {
                (build_block_job(workflow, *block, prev, *difficulty, target.settings), *block, None)
            }
            Action::CreateRangeJob { block, prev, difficulty, start, count } => {
                let range = (*start, *count);
                let job = build_range_job(workflow, *block, prev, *difficulty, range, target.settings);
                (job, *block, Some(range))
            }
            Action::CleanUpJob { name: job } => {
                delete_job(&jobs, name, job).await?;
                continue;
            }
            Action::DeleteJob { .. } | Action::DeleteWorkflow => continue,
        };
        let job = create_or_adopt_job(workflow, &jobs, job, block).await?;
        let workflow_uid = workflow.metadata.uid.clone().unwrap_or_default();
        target
            .shell
            .memory
            .expect_job(job, ExpectedJob { workflow_uid, block, range, created: Instant::now() });
    }
    publish_events(&target.shell.client, &target.shell.instance, target.workflow, name, plan.events.clone());
    Ok(Applied::Done)
}

pub async fn delete_job(api: &Api<Job>, workflow: &str, job: &str) -> Result<()> {
    match api.delete(job, &DeleteParams::background()).await {
        Ok(_) => {
            info!(workflow = %workflow, job = %job, "deleted Job");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::DeleteJob { name: job.to_string(), source }),
    }
}

/// Creates the block's Job; when one of that name exists and this workflow
/// controls it and it is exactly the Job built here (a restart after
/// create, before status), it is adopted.
pub async fn create_or_adopt_job(
    workflow: &MiningWorkflow,
    api: &Api<Job>,
    job: Job,
    block: u32,
) -> Result<String> {
    let name = job.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams { field_manager: Some(MANAGER.into()), ..Default::default() }, &job).await {
        Ok(_) => {
            info!(workflow = %workflow.name_any(), block, job = %name, "created Job");
            Ok(name)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing =
                api.get(&name).await.map_err(|source| Error::CreateJob { name: name.clone(), source })?;
            let uid = workflow.metadata.uid.as_deref().unwrap_or_default();
            // Adopted only when this workflow controls it and it runs exactly
            // what this operator builds: never a look-alike someone planted.
            let why = if controlled_by(&existing.metadata, uid) {
                job_mismatch(&existing, &job)
            } else {
                Some("this workflow does not control it".into())
            };
            match why {
                None => {
                    info!(workflow = %workflow.name_any(), block, job = %name, "adopted existing Job");
                    Ok(name)
                }
                Some(why) => Err(Error::ForeignJob { name, why }),
            }
        }
        Err(source) => Err(Error::CreateJob { name, source }),
    }
}
