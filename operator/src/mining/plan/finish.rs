//! The end of a workflow's life: success, failure or cancel, the Jobs left
//! to delete, and the retention after which the workflow itself goes.

use super::*;

impl Planner<'_> {
    pub(super) fn succeed(&mut self) {
        let total = self.total_blocks();
        let message = format!("mined and verified {total} {}", if total == 1 { "block" } else { "blocks" });
        self.event(false, reasons::SUCCEEDED, &message);
        self.finish(WorkflowPhase::Succeeded, reasons::SUCCEEDED, message);
    }

    pub(super) fn finish(&mut self, phase: WorkflowPhase, reason: &str, message: String) {
        let status = &mut self.plan.status;
        status.phase = Some(phase);
        status.finished_at = Some(self.now.clone());
        status.current_block = None;
        status.no_winner_below = None;
        status.message = Some(message.clone());
        let ready =
            if phase == WorkflowPhase::Succeeded { ConditionStatus::True } else { ConditionStatus::False };
        self.condition(condition_types::READY, ready, reason, &message);
        if self.plan.status.conditions.iter().any(|c| c.type_ == condition_types::MINING) {
            self.condition(condition_types::MINING, ConditionStatus::False, reason, message);
        }
    }

    pub(super) fn delete_unfinished_jobs(&mut self) {
        let mut running: Vec<String> = (self.observed.jobs.iter())
            .filter(|(_, job)| job.is_running())
            .map(|(block, _)| block_job_name(&self.name, self.uid(), *block))
            .collect();
        let ranges = self.observed.ranges.values().flatten();
        running.extend(ranges.filter(|j| j.state.is_running()).map(|j| j.name.clone()));
        self.plan.actions.extend(running.into_iter().map(|name| Action::DeleteJob { name }));
    }

    /// Deletes a finished workflow once its TTL has passed; until then, looks again then.
    pub(super) fn retain_or_delete(&mut self, limits: &Limits) {
        let Some(finished) = &self.plan.status.finished_at else { return };
        let ttl = self
            .spec()
            .ttl_seconds_after_finished
            .map_or(limits.default_ttl(), |s| Duration::from_secs(s.max(0) as u64));
        let expiry = SignedDuration::try_from(ttl).ok().and_then(|ttl| finished.0.checked_add(ttl).ok());
        // Retention past the end of representable time: keep it.
        let Some(expiry) = expiry else {
            return self.requeue(MAX_REQUEUE);
        };
        let left = self.observed.now.duration_until(expiry);
        if left.is_positive() {
            self.requeue(left.unsigned_abs());
        } else {
            self.plan.actions.push(Action::DeleteWorkflow);
        }
    }
}

/// The status to write when the API server refused the planned one (422):
/// the last stored status, failed with reason StatusRejected and its words,
/// so the workflow ends visibly instead of retrying the same write forever.
pub fn status_rejected(workflow: &MiningWorkflow, why: &str, now: Timestamp) -> MiningWorkflowStatus {
    let message = format!("the API server refused to store the workflow's status: {}", clip(why, 300));
    status_failed(workflow, reasons::STATUS_REJECTED, message, now)
}

/// The status to write when a Job of the workflow's name or ownership is not
/// one this operator built: the block fails with reason ForeignJob, naming
/// the Job, and nothing of that Job is read.
pub fn status_foreign_job(
    workflow: &MiningWorkflow,
    job: &str,
    why: &str,
    now: Timestamp,
) -> MiningWorkflowStatus {
    let message =
        format!("Job {job} is not one this operator built, so its result is not read: {}", clip(why, 200));
    status_failed(workflow, reasons::FOREIGN_JOB, message, now)
}

/// The last stored status, failed now with `reason` and `message`.
fn status_failed(
    workflow: &MiningWorkflow,
    reason: &str,
    message: String,
    now: Timestamp,
) -> MiningWorkflowStatus {
    let mut status = workflow.status.clone().unwrap_or_default();
    let now = Time(now);
    status.phase = Some(WorkflowPhase::Failed);
    status.finished_at = Some(now.clone());
    status.current_block = None;
    status.message = Some(message.clone());
    let generation = workflow.metadata.generation;
    let conditions = &mut status.conditions;
    set_condition(
        conditions,
        condition_types::READY,
        ConditionStatus::False,
        reason,
        &message,
        &now,
        generation,
    );
    set_condition(
        conditions,
        condition_types::MINING,
        ConditionStatus::False,
        reason,
        message,
        &now,
        generation,
    );
    status
}
