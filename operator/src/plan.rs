//! Decides what a workflow needs next (pure: no client, injected time).
//!
//! Input: the workflow, the state of its block Jobs, how many other
//! workflows are mining, and now. Output: the status it must have, the Jobs
//! to create or delete, the Events to record and when to look again.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use mining_api::{
    BlockResult, ConditionStatus, GENESIS, MinedBlock, MiningWorkflow, MiningWorkflowStatus, WorkflowPhase,
    condition_types, reasons,
};

use crate::conditions::set_condition;
use crate::config::Limits;
use crate::naming::block_job_name;

/// How often a queued workflow checks for a free slot.
pub const QUEUED_RECHECK: Duration = Duration::from_secs(5);

/// What a block's Job has come to.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockJob {
    /// Created and not finished (or being deleted).
    Running,
    /// Completed; `message` is its Pod's termination message, if any.
    Succeeded { message: Option<String>, started: Option<Time>, finished: Option<Time> },
    /// Failed for good (retries or deadline exhausted).
    Failed { reason: String, message: String },
}

/// Everything `plan` looks at.
pub struct Observed<'a> {
    pub workflow: &'a MiningWorkflow,
    /// This workflow's Jobs (owned by it), by block index.
    pub jobs: BTreeMap<u32, BlockJob>,
    /// Other workflows in phase Mining.
    pub others_mining: usize,
    pub now: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    CreateJob {
        block: u32,
        prev: String,
        difficulty: u32,
    },
    /// Delete a block's Job with background propagation (its Pods go too).
    DeleteJob {
        name: String,
    },
    /// Retention is over: delete the workflow.
    DeleteWorkflow,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub status: MiningWorkflowStatus,
    pub actions: Vec<Action>,
    pub events: Vec<PlannedEvent>,
    /// Look again after this long even if nothing is watched to change.
    pub requeue_after: Option<Duration>,
    /// Seconds each block verified in this pass took to mine (for metrics).
    pub mined_block_seconds: Vec<f64>,
}

struct Planner<'a> {
    name: String,
    observed: &'a Observed<'a>,
    now: Time,
    generation: Option<i64>,
    plan: Plan,
}

pub fn plan(observed: &Observed, limits: &Limits) -> Plan {
    let workflow = observed.workflow;
    let mut status = workflow.status.clone().unwrap_or_default();
    status.observed_generation = workflow.metadata.generation;
    let mut planner = Planner {
        name: workflow.metadata.name.clone().unwrap_or_default(),
        observed,
        now: Time(observed.now),
        generation: workflow.metadata.generation,
        plan: Plan {
            status,
            actions: Vec::new(),
            events: Vec::new(),
            requeue_after: None,
            mined_block_seconds: Vec::new(),
        },
    };
    planner.run(limits);
    planner.plan
}

impl Planner<'_> {
    fn spec(&self) -> &mining_api::MiningWorkflowSpec {
        &self.observed.workflow.spec
    }

    fn phase(&self) -> WorkflowPhase {
        self.plan.status.phase.unwrap_or_default()
    }

    fn total_blocks(&self) -> u32 {
        self.plan.status.admitted_blocks.unwrap_or(self.spec().blocks)
    }

    fn difficulty(&self) -> u32 {
        self.plan.status.admitted_difficulty.unwrap_or(self.spec().difficulty)
    }

    fn event(&mut self, warning: bool, reason: &'static str, note: impl Into<String>) {
        self.plan.events.push(PlannedEvent { warning, reason, note: note.into() });
    }

    fn condition(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
    ) -> bool {
        let now = self.now.clone();
        set_condition(&mut self.plan.status.conditions, type_, status, reason, message, &now, self.generation)
    }

    fn requeue(&mut self, after: Duration) {
        self.plan.requeue_after = Some(self.plan.requeue_after.map_or(after, |r| r.min(after)));
    }

    fn run(&mut self, limits: &Limits) {
        if self.phase().is_finished() {
            return self.retain_or_delete(limits);
        }
        if self.spec().cancel {
            self.delete_unfinished_jobs();
            self.finish(WorkflowPhase::Cancelled, reasons::CANCELLED, "cancelled by spec.cancel".into());
            return self.retain_or_delete(limits);
        }
        if self.deadline_passed() {
            self.delete_unfinished_jobs();
            let seconds = self.spec().active_deadline_seconds.unwrap_or_default();
            self.finish(
                WorkflowPhase::Failed,
                reasons::DEADLINE_EXCEEDED,
                format!("the workflow ran longer than activeDeadlineSeconds ({seconds} s)"),
            );
            return self.retain_or_delete(limits);
        }
        if self.phase() == WorkflowPhase::Pending && !self.admit(limits) {
            return;
        }
        self.note_ignored_spec_change();
        self.mine();
        if self.phase().is_finished() {
            self.retain_or_delete(limits);
        }
    }

    fn deadline_passed(&mut self) -> bool {
        let (Some(seconds), Some(started)) =
            (self.spec().active_deadline_seconds, &self.plan.status.started_at)
        else {
            return false;
        };
        let deadline = started.0 + SignedDuration::from_secs(seconds);
        let left = self.observed.now.duration_until(deadline);
        if left.is_positive() {
            self.requeue(left.unsigned_abs());
            false
        } else {
            true
        }
    }

    /// Pending → Mining, unless a limit says no (rejected) or not yet (queued).
    fn admit(&mut self, limits: &Limits) -> bool {
        let (difficulty, blocks) = (self.spec().difficulty, self.spec().blocks);
        self.plan.status.progress = Some(format!("0/{blocks}"));
        if difficulty > limits.max_difficulty || blocks > limits.max_blocks {
            let message = format!(
                "rejected: difficulty {difficulty} and blocks {blocks} must be at most {} and {} on this operator",
                limits.max_difficulty, limits.max_blocks
            );
            self.condition(condition_types::ADMITTED, ConditionStatus::False, reasons::OVER_LIMIT, &message);
            self.event(true, reasons::OVER_LIMIT, &message);
            self.finish(WorkflowPhase::Failed, reasons::OVER_LIMIT, message);
            return false;
        }
        if self.observed.others_mining >= limits.max_concurrent_workflows {
            let message = format!(
                "queued: {} workflows are mining, the most this operator runs at once",
                self.observed.others_mining
            );
            self.plan.status.phase = Some(WorkflowPhase::Pending);
            self.plan.status.message = Some(message.clone());
            if self.condition(condition_types::ADMITTED, ConditionStatus::False, reasons::QUEUED, &message) {
                self.event(false, reasons::QUEUED, message);
            }
            self.condition(
                condition_types::READY,
                ConditionStatus::False,
                reasons::QUEUED,
                "waiting to start",
            );
            self.requeue(QUEUED_RECHECK);
            return false;
        }
        let status = &mut self.plan.status;
        status.phase = Some(WorkflowPhase::Mining);
        status.started_at = Some(self.now.clone());
        status.admitted_difficulty = Some(difficulty);
        status.admitted_blocks = Some(blocks);
        self.condition(condition_types::ADMITTED, ConditionStatus::True, reasons::ADMITTED, "mining started");
        true
    }

    /// `difficulty` and `blocks` are immutable; where the API server did not
    /// enforce that, keep mining what was admitted and say so.
    fn note_ignored_spec_change(&mut self) {
        let (difficulty, blocks) = (self.spec().difficulty, self.spec().blocks);
        if difficulty != self.difficulty() || blocks != self.total_blocks() {
            let message = format!(
                "spec changed to difficulty {difficulty}, blocks {blocks}; both are immutable, so mining continues \
                 with difficulty {}, blocks {}",
                self.difficulty(),
                self.total_blocks()
            );
            if self.condition(
                condition_types::ADMITTED,
                ConditionStatus::True,
                reasons::SPEC_CHANGED,
                &message,
            ) {
                self.event(true, reasons::SPEC_CHANGED, message);
            }
        }
    }

    /// Walks the chain from the first unverified block as far as finished
    /// Jobs allow, then creates the next Job or waits for the running one.
    fn mine(&mut self) {
        let total = self.total_blocks();
        let difficulty = self.difficulty();
        loop {
            let block = self.plan.status.blocks.len() as u32 + 1;
            self.plan.status.progress = Some(format!("{}/{total}", block - 1));
            if block > total {
                return self.succeed();
            }
            let prev = self.plan.status.blocks.last().map_or(GENESIS.to_string(), |b| b.hash.clone());
            self.plan.status.current_block = Some(block);
            match self.observed.jobs.get(&block).cloned() {
                None => {
                    self.plan.actions.push(Action::CreateJob { block, prev, difficulty });
                    self.event(false, reasons::BLOCK_STARTED, format!("mining block {block}/{total}"));
                    return self.mining(block, total);
                }
                Some(BlockJob::Running) => return self.mining(block, total),
                Some(BlockJob::Succeeded { message, started, finished }) => {
                    match verify_block_result(message.as_deref(), block, &prev, difficulty) {
                        Ok(result) => self.record_block(block, result, started, finished, total),
                        Err((reason, why)) => {
                            let message = format!("block {block}: {why}");
                            self.event(true, reason, &message);
                            return self.finish(WorkflowPhase::Failed, reason, message);
                        }
                    }
                }
                Some(BlockJob::Failed { reason, message }) => {
                    let message = format!("block {block}: Job failed ({reason}): {message}");
                    self.event(true, reasons::JOB_FAILED, &message);
                    return self.finish(WorkflowPhase::Failed, reasons::JOB_FAILED, message);
                }
            }
        }
    }

    fn mining(&mut self, block: u32, total: u32) {
        let message = format!("mining block {block}/{total}");
        self.plan.status.message = Some(message.clone());
        self.condition(condition_types::MINING, ConditionStatus::True, reasons::BLOCK_STARTED, &message);
        self.condition(condition_types::READY, ConditionStatus::False, reasons::PENDING, message);
    }

    fn record_block(
        &mut self,
        block: u32,
        result: BlockResult,
        started: Option<Time>,
        finished: Option<Time>,
        total: u32,
    ) {
        if let (Some(s), Some(f)) = (&started, &finished) {
            self.plan.mined_block_seconds.push(s.0.duration_until(f.0).as_secs_f64().max(0.0));
        }
        self.event(
            false,
            reasons::BLOCK_MINED,
            format!(
                "block {block}/{total}: nonce {} after {} attempts, hash {}",
                result.nonce, result.attempts, result.hash
            ),
        );
        self.plan.status.blocks.push(MinedBlock {
            index: block,
            nonce: result.nonce,
            hash: result.hash,
            attempts: result.attempts,
            job_name: block_job_name(&self.name, block),
            started_at: started,
            finished_at: finished,
        });
    }

    fn succeed(&mut self) {
        let total = self.total_blocks();
        let message = format!("mined and verified {total} blocks");
        self.event(false, reasons::SUCCEEDED, &message);
        self.finish(WorkflowPhase::Succeeded, reasons::SUCCEEDED, message);
    }

    fn finish(&mut self, phase: WorkflowPhase, reason: &str, message: String) {
        let status = &mut self.plan.status;
        status.phase = Some(phase);
        status.finished_at = Some(self.now.clone());
        status.current_block = None;
        status.message = Some(message.clone());
        let ready =
            if phase == WorkflowPhase::Succeeded { ConditionStatus::True } else { ConditionStatus::False };
        self.condition(condition_types::READY, ready, reason, &message);
        if self.plan.status.conditions.iter().any(|c| c.type_ == condition_types::MINING) {
            self.condition(condition_types::MINING, ConditionStatus::False, reason, message);
        }
    }

    fn delete_unfinished_jobs(&mut self) {
        for (block, job) in &self.observed.jobs {
            if *job == BlockJob::Running {
                self.plan.actions.push(Action::DeleteJob { name: block_job_name(&self.name, *block) });
            }
        }
    }

    /// Deletes a finished workflow once its TTL has passed; until then, looks again then.
    fn retain_or_delete(&mut self, limits: &Limits) {
        let Some(finished) = &self.plan.status.finished_at else { return };
        let ttl = self
            .spec()
            .ttl_seconds_after_finished
            .map_or(limits.default_ttl(), |s| Duration::from_secs(s.max(0) as u64));
        let expiry = finished.0 + SignedDuration::try_from(ttl).unwrap_or(SignedDuration::MAX);
        let left = self.observed.now.duration_until(expiry);
        if left.is_positive() {
            self.requeue(left.unsigned_abs());
        } else {
            self.plan.actions.push(Action::DeleteWorkflow);
        }
    }
}

/// Parses and verifies a block's termination message.
/// Errors carry the reason for the condition and a sentence for people.
pub fn verify_block_result(
    message: Option<&str>,
    block: u32,
    prev: &str,
    difficulty: u32,
) -> Result<BlockResult, (&'static str, String)> {
    let Some(text) = message.filter(|m| !m.trim().is_empty()) else {
        return Err((reasons::MISSING_RESULT, "the miner's Pod completed without a result".into()));
    };
    let result = BlockResult::from_json(text)
        .map_err(|e| (reasons::INVALID_RESULT, format!("unreadable result ({e}): {}", clip(text, 200))))?;
    miner::verify_result(&result, block as u64, prev, difficulty)
        .map_err(|e| (reasons::INVALID_RESULT, format!("result rejected: {e}")))?;
    Ok(result)
}

fn clip(text: &str, max: usize) -> &str {
    let end = (0..=max.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{at, workflow};

    fn limits() -> Limits {
        Limits { max_difficulty: 40, max_blocks: 64, max_concurrent_workflows: 2, default_ttl_seconds: 3600 }
    }

    fn observe(wf: &MiningWorkflow, jobs: &[(u32, BlockJob)], now: Timestamp) -> Plan {
        let observed = Observed { workflow: wf, jobs: jobs.iter().cloned().collect(), others_mining: 0, now };
        plan(&observed, &limits())
    }

    /// A real result document for `block` on top of `prev`, mined here.
    fn mined(block: u32, prev: &str, difficulty: u32) -> BlockResult {
        let found = miner::mine_block(block as u64, prev, difficulty, 1).unwrap();
        BlockResult {
            index: block as u64,
            prev: prev.to_string(),
            nonce: found.nonce,
            hash: miner::hex_upper(&found.digest),
            attempts: found.nonce + 1,
            difficulty,
            elapsed_ms: 1,
        }
    }

    fn succeeded(result: &BlockResult) -> BlockJob {
        BlockJob::Succeeded {
            message: Some(result.to_json_line()),
            started: Some(Time(at(10))),
            finished: Some(Time(at(12))),
        }
    }

    /// The workflow as it is after `plan`'s status was written.
    fn with_status(mut wf: MiningWorkflow, plan: &Plan) -> MiningWorkflow {
        wf.status = Some(plan.status.clone());
        wf
    }

    fn condition<'a>(plan: &'a Plan, type_: &str) -> &'a mining_api::Condition {
        plan.status.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn a_new_workflow_is_admitted_and_its_first_block_job_is_created() {
        let plan = observe(&workflow("w", 8, 3), &[], at(0));
        assert_eq!(plan.status.phase, Some(WorkflowPhase::Mining));
        assert_eq!(plan.status.progress.as_deref(), Some("0/3"));
        assert_eq!(plan.status.current_block, Some(1));
        assert_eq!(plan.status.started_at, Some(Time(at(0))));
        assert_eq!(plan.actions, [Action::CreateJob { block: 1, prev: GENESIS.into(), difficulty: 8 }]);
        assert_eq!(plan.events[0].reason, reasons::BLOCK_STARTED);
        assert_eq!(condition(&plan, condition_types::ADMITTED).status, ConditionStatus::True);
    }

    #[test]
    fn a_running_job_keeps_the_workflow_mining_and_plans_nothing_new() {
        let wf = workflow("w", 8, 3);
        let first = observe(&wf, &[], at(0));
        let wf = with_status(wf, &first);
        let plan = observe(&wf, &[(1, BlockJob::Running)], at(5));
        assert!(plan.actions.is_empty() && plan.events.is_empty());
        assert_eq!(plan.status, first.status, "an unchanged state gives an unchanged status");
    }

    #[test]
    fn a_completed_job_with_a_valid_result_records_the_block_and_creates_the_next_job() {
        let wf = workflow("w", 8, 3);
        let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
        let result = mined(1, GENESIS, 8);
        let plan = observe(&wf, &[(1, succeeded(&result))], at(20));
        assert_eq!(plan.status.blocks.len(), 1);
        let block = &plan.status.blocks[0];
        assert_eq!(
            (block.index, block.nonce, &block.hash, block.job_name.as_str()),
            (1, result.nonce, &result.hash, "w-b1")
        );
        assert_eq!(plan.actions, [Action::CreateJob { block: 2, prev: result.hash.clone(), difficulty: 8 }]);
        assert_eq!(plan.status.progress.as_deref(), Some("1/3"));
        assert_eq!(plan.mined_block_seconds, [2.0]);
        let reasons: Vec<_> = plan.events.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, [reasons::BLOCK_MINED, reasons::BLOCK_STARTED]);
    }

    #[test]
    fn the_last_verified_block_succeeds_the_workflow_and_sets_ready() {
        let wf = workflow("w", 8, 2);
        let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
        let first = mined(1, GENESIS, 8);
        let second = mined(2, &first.hash, 8);
        let plan = observe(&wf, &[(1, succeeded(&first)), (2, succeeded(&second))], at(30));
        assert_eq!(plan.status.phase, Some(WorkflowPhase::Succeeded));
        assert_eq!(plan.status.progress.as_deref(), Some("2/2"));
        assert_eq!(plan.status.finished_at, Some(Time(at(30))));
        assert_eq!(plan.status.current_block, None);
        assert_eq!(condition(&plan, condition_types::READY).status, ConditionStatus::True);
        assert!(plan.actions.is_empty());
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(3600)), "retention timer");
        assert_eq!(plan.events.last().unwrap().reason, reasons::SUCCEEDED);
    }

    #[test]
    fn a_forged_result_fails_the_workflow_with_reason_invalid_result() {
        let wf = workflow("w", 8, 2);
        let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
        let mut forged = mined(1, GENESIS, 8);
        forged.nonce += 1;
        forged.attempts += 1;
        let plan = observe(&wf, &[(1, succeeded(&forged))], at(20));
        assert_eq!(plan.status.phase, Some(WorkflowPhase::Failed));
        let ready = condition(&plan, condition_types::READY);
        assert_eq!(ready.reason, reasons::INVALID_RESULT);
        assert!(ready.message.starts_with("block 1: result rejected"), "{}", ready.message);
        assert!(plan.status.blocks.is_empty());
        assert!(plan.events.iter().any(|e| e.warning && e.reason == reasons::INVALID_RESULT));
    }

    #[test]
    fn garbled_and_missing_results_fail_with_their_own_reasons() {
        let wf = workflow("w", 8, 2);
        let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
        for (message, reason) in
            [(Some("not json"), reasons::INVALID_RESULT), (None, reasons::MISSING_RESULT)]
        {
            let job =
                BlockJob::Succeeded { message: message.map(String::from), started: None, finished: None };
            let plan = observe(&wf, &[(1, job)], at(20));
            assert_eq!(plan.status.phase, Some(WorkflowPhase::Failed));
            assert_eq!(condition(&plan, condition_types::READY).reason, reason);
        }
    }

    #[test]
    fn a_failed_job_fails_the_workflow_with_its_reason_and_pod_message() {
        let wf = workflow("w", 8, 2);
        let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
        let job = BlockJob::Failed {
            reason: "BackoffLimitExceeded".into(),
            message: "miner: out of memory".into(),
        };
        let plan = observe(&wf, &[(1, job)], at(20));
        assert_eq!(plan.status.phase, Some(WorkflowPhase::Failed));
        assert_eq!(
            plan.status.message.as_deref(),
            Some("block 1: Job failed (BackoffLimitExceeded): miner: out of memory")
        );
        assert_eq!(condition(&plan, condition_types::READY).reason, reasons::JOB_FAILED);
    }

    #[test]
    fn cancel_deletes_the_running_job_and_ends_cancelled() {
        let wf = workflow("w", 8, 2);
        let mut wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
        wf.spec.cancel = true;
        let plan = observe(&wf, &[(1, BlockJob::Running)], at(3));
        assert_eq!(plan.status.phase, Some(WorkflowPhase::Cancelled));
        assert_eq!(plan.actions, [Action::DeleteJob { name: "w-b1".into() }]);
        assert_eq!(condition(&plan, condition_types::READY).reason, reasons::CANCELLED);
    }

    #[test]
    fn a_workflow_past_its_deadline_fails_and_its_running_job_is_deleted() {
        let mut wf = workflow("w", 8, 2);
        wf.spec.active_deadline_seconds = Some(60);
        let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
        let before = observe(&wf, &[(1, BlockJob::Running)], at(50));
        assert_eq!(before.requeue_after, Some(Duration::from_secs(10)), "wakes up at the deadline");
        assert_eq!(before.status.phase, Some(WorkflowPhase::Mining));
        let after = observe(&wf, &[(1, BlockJob::Running)], at(60));
        assert_eq!(after.status.phase, Some(WorkflowPhase::Failed));
        assert_eq!(condition(&after, condition_types::READY).reason, reasons::DEADLINE_EXCEEDED);
        assert_eq!(after.actions, [Action::DeleteJob { name: "w-b1".into() }]);
    }

    #[test]
    fn a_workflow_over_the_difficulty_limit_is_rejected_without_a_job() {
        let plan = observe(&workflow("w", 41, 2), &[], at(0));
        assert_eq!(plan.status.phase, Some(WorkflowPhase::Failed));
        assert!(plan.actions.is_empty());
        let admitted = condition(&plan, condition_types::ADMITTED);
        assert_eq!(
            (admitted.status, admitted.reason.as_str()),
            (ConditionStatus::False, reasons::OVER_LIMIT)
        );
    }

    #[test]
    fn a_workflow_beyond_the_concurrency_limit_waits_pending_and_rechecks() {
        let wf = workflow("w", 8, 2);
        let observed = Observed { workflow: &wf, jobs: BTreeMap::new(), others_mining: 2, now: at(0) };
        let plan = plan(&observed, &limits());
        assert_eq!(plan.status.phase, Some(WorkflowPhase::Pending));
        assert!(plan.actions.is_empty());
        assert_eq!(condition(&plan, condition_types::ADMITTED).reason, reasons::QUEUED);
        assert_eq!(plan.requeue_after, Some(QUEUED_RECHECK));
    }

    #[test]
    fn a_finished_workflow_is_deleted_once_its_ttl_has_passed() {
        let mut wf = workflow("w", 8, 1);
        wf.spec.ttl_seconds_after_finished = Some(30);
        let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
        let done = observe(&wf, &[(1, succeeded(&mined(1, GENESIS, 8)))], at(10));
        let wf = with_status(wf, &done);
        assert_eq!(observe(&wf, &[], at(20)).requeue_after, Some(Duration::from_secs(20)));
        assert_eq!(observe(&wf, &[], at(40)).actions, [Action::DeleteWorkflow]);
    }

    #[test]
    fn after_a_restart_completed_jobs_are_verified_in_order_and_only_the_missing_job_is_created() {
        // The status lost track of two finished blocks (operator killed before writing it).
        let wf = workflow("w", 8, 4);
        let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
        let first = mined(1, GENESIS, 8);
        let second = mined(2, &first.hash, 8);
        let plan =
            observe(&wf, &[(1, succeeded(&first)), (2, succeeded(&second)), (3, BlockJob::Running)], at(9));
        assert_eq!(plan.status.blocks.len(), 2);
        assert!(plan.actions.is_empty(), "block 3's Job exists: adopt it, create nothing");
        assert_eq!(plan.status.current_block, Some(3));
    }

    #[test]
    fn a_changed_difficulty_after_admission_is_ignored_and_reported() {
        let wf = workflow("w", 8, 2);
        let mut wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
        wf.spec.difficulty = 20;
        let plan = observe(&wf, &[], at(1));
        assert_eq!(plan.actions, [Action::CreateJob { block: 1, prev: GENESIS.into(), difficulty: 8 }]);
        assert_eq!(condition(&plan, condition_types::ADMITTED).reason, reasons::SPEC_CHANGED);
    }
}
