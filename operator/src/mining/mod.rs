//! Workflows, the first kind of work: a chain of blocks, one verified Job
//! per block. The shell (`crate::work`) runs the reconcile around this
//! one: observe the workflow's Jobs, plan (a pure function), apply.

use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use mining_api::{MiningWorkflow, Work as _, WorkflowPhase, labels, reasons};
use tracing::warn;

use crate::admission::Slots;
use crate::config::Config;
use crate::metrics::ErrorLabels;
use crate::projection;
use crate::queue::Proven;
use crate::work::{MANAGER, Outcome, PlannedEvent, REPLAN_AFTER, Shell, WorkKind, publish_events};
use crate::{Error, Result};
use apply::{Applied, Target};
use job::{MinerSettings, job_for_block};
use observe::{BlockJob, JobSources, ObservedJobs, observe_jobs, waiting_for_node};
use plan::{Observed, plan};

pub mod apply;
pub mod conditions;
mod foreign;
pub mod job;
pub mod observe;
pub mod plan;
pub mod provenance;
pub mod ranges;
pub mod verify;
use foreign::fail_for_foreign_job;

/// A workflow's reconciles: what every block's Job runs, and the limits.
pub struct Context {
    pub config: Config,
}

/// The shell of workflows' reconciles.
pub type WorkflowShell = Shell<MiningWorkflow>;

impl WorkKind for MiningWorkflow {
    type Context = Context;
    /// Unbounded, a start with thousands of retained workflows reconciles
    /// them all at once, each holding its whole chain's Jobs.
    const CONCURRENCY: u16 = 16;
    /// Workflows' size the CRD bounds, except in metadata.
    const PAGE_SIZE: u32 = 50;
    /// Anyone who may create one in its namespace starts work.
    const PROVEN: Proven = Proven::Any;

    fn jobs_selector() -> String {
        format!("{}={MANAGER}", labels::MANAGED_BY)
    }

    fn project_job(job: &mut Job) {
        projection::project_job(job)
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "reconcile",
            workflow = self.metadata.name.as_deref().unwrap_or_default(),
            trace_id = tracing::field::Empty,
        )
    }

    fn reconcile<'a>(&'a self, shell: &'a WorkflowShell) -> BoxFuture<'a, Result<Outcome>> {
        async move {
            match reconcile_inner(self, shell).await {
                Err(Error::ForeignJob { name, why }) => fail_for_foreign_job(self, shell, &name, &why).await,
                other => other,
            }
        }
        .boxed()
    }

    fn refused_status(&self, why: &str, now: Timestamp) -> (Self::Status, String) {
        let status = crate::mining::plan::status_rejected(self, why, now);
        let note = status.message.clone().unwrap_or_default();
        (status, note)
    }

    fn reconciled(shell: &WorkflowShell) {
        shell.metrics.set_workflow_phases(shell.store.state().iter().map(|w| w.phase()));
    }
}

impl Context {
    /// What every block's Job runs, from the configuration.
    fn miner_settings(&self) -> MinerSettings<'_> {
        MinerSettings {
            image: &self.config.miner_image,
            image_pull_policy: &self.config.miner_image_pull_policy,
            pull_secrets: &self.config.miner_image_pull_secrets,
            threads: self.config.miner_threads,
            job: &self.config.job,
            otlp: self
                .config
                .miner_otlp_endpoint
                .as_deref()
                .map(|endpoint| (endpoint, self.config.miner_otlp_protocol.as_str())),
        }
    }
}

/// What applying a plan to `workflow` needs.
fn target<'a>(
    shell: &'a WorkflowShell,
    workflow: &'a MiningWorkflow,
    name: &'a str,
    namespace: &'a str,
    settings: &'a MinerSettings<'a>,
) -> Target<'a> {
    Target { shell, settings, workflow, name, namespace }
}

async fn reconcile_inner(workflow: &MiningWorkflow, shell: &WorkflowShell) -> Result<Outcome> {
    let name = workflow.metadata.name.clone().ok_or(Error::MissingMetadata("name"))?;
    let namespace = workflow.metadata.namespace.clone().ok_or(Error::MissingMetadata("namespace"))?;
    // A finished one's Jobs go with it (owner references); an unfinished one
    // may be kept stored by a finalizer, so the plan stops it first.
    if workflow.metadata.deletion_timestamp.is_some() && workflow.is_finished() {
        return Ok(Outcome::AWAIT_CHANGE);
    }
    // Skipped, never overwritten: a person must look at (or delete) it.
    if let Some(problem) = workflow.status.as_ref().and_then(|s| s.unreadable.clone()) {
        warn!(workflow = %name, %problem, "skipping a workflow whose status cannot be read");
        shell.metrics.reconcile_errors.get_or_create(&ErrorLabels { error: "unreadable_status" }).inc();
        let note = format!("{problem}; the operator leaves this workflow alone until it is fixed or deleted");
        let event = PlannedEvent { warning: true, reason: reasons::UNREADABLE_STATUS, note };
        publish_events(&shell.client, &shell.instance, workflow, &name, vec![event]);
        return Ok(Outcome::AWAIT_CHANGE);
    }
    // Observe.
    let settings = shell.kind.miner_settings();
    let built = |block: u32, range: Option<(u64, u64)>| job_for_block(workflow, block, range, &settings);
    let sources = JobSources {
        client: &shell.client,
        jobs: &shell.jobs,
        pods: &shell.pods,
        memory: &shell.memory,
        built: &built,
    };
    let now = Timestamp::now();
    let ObservedJobs { blocks: jobs, ranges, look_again } =
        observe_jobs(workflow, &name, &namespace, &sources, now).await?;
    // A workflow that may be admitted counts the work holding slots (of
    // every kind), and that being admitted right now, and reserves a slot
    // until its status is written. Only a waiting workflow needs its
    // standing: computing it reads all work, and at start-up every
    // retained one is reconciled.
    let before = workflow.phase();
    let (slots, admission) = match before {
        WorkflowPhase::Pending => {
            let (slots, reserved) = shell.admission(workflow);
            (slots, Some(reserved))
        }
        _ => (Slots::default(), None),
    };
    // Between two blocks (no whole-block Job running), a workflow holding a
    // slot that waiting work should have yields it; mid-block only once the
    // head of the queue, having waited past the preemption delay, asked
    // (`reclaim_for`): a running block's other reconciles never sort the
    // queue. (A block mined in ranges has no whole-block Job, so it is told
    // at each reconcile: the plan yields before a block no Job was made
    // for, or, told "now", stops the block's running ranges and keeps what
    // they searched.)
    let between_blocks = !jobs.values().any(BlockJob::is_running);
    let yielding = shell.yielding(workflow, before == WorkflowPhase::Mining, between_blocks, now);
    // Its Pods waiting for a node: it may give its slot back (`admission::node`).
    let waiting_for_node = waiting_for_node(&jobs, &ranges).filter(|_| before == WorkflowPhase::Mining);
    let give_way = shell.node_wait(workflow, waiting_for_node, now);
    // Plan.
    let observed = Observed {
        workflow,
        jobs,
        ranges,
        slots,
        yielding: yielding.decision,
        waiting_for_node,
        give_way,
        now,
    };
    // Verifying a block may hash up to the minimality budget (~0.5 s of a
    // core): keep that off the async workers' other tasks.
    let plan = tokio::task::block_in_place(|| plan(&observed, &shell.kind.config.limits));
    if !shell.leadership.is_leading() {
        return Ok(Outcome::AWAIT_CHANGE); // deposed while planning
    }
    for seconds in &plan.mined_block_seconds {
        shell.metrics.block_duration.observe(*seconds);
    }
    // Not admitted: nothing to count on, so others need not wait for this write.
    let admission = admission.filter(|_| plan.status.phase == Some(WorkflowPhase::Mining));
    // Apply and write the status.
    let target = target(shell, workflow, &name, &namespace, &settings);
    match apply::run(&target, &plan, admission).await? {
        Applied::Done => {
            for event in &plan.events {
                shell.metrics.count_start_event(MiningWorkflow::NOUN, event.reason);
            }
        }
        Applied::Replan => return Ok(Outcome::after(REPLAN_AFTER)),
        Applied::WorkflowDeleted | Applied::StatusRejected => return Ok(Outcome::AWAIT_CHANGE),
    }
    // The yield is written: the next may be decided.
    drop(yielding);
    let mining = plan.status.phase == Some(WorkflowPhase::Mining);
    let outcome =
        Outcome { requeue: plan.requeue_after, waited: (before == WorkflowPhase::Pending).then_some(slots) };
    Ok(outcome.sooner(look_again.filter(|_| mining)))
}

#[cfg(test)]
mod tests;
