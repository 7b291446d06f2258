//! Decides what a workflow needs next (pure: no client, injected time).
//!
//! Input: the workflow, the state of its block Jobs, how many other
//! workflows are mining, and now. Output: the status it must have, the Jobs
//! to create or delete, the Events to record and when to look again.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use mining_api::bounds::MAX_STORED_INTEGER;
use mining_api::{
    BlockResult, ConditionStatus, GENESIS, MinedBlock, MiningWorkflow, MiningWorkflowStatus, WorkflowPhase,
    condition_types, reasons,
};

use crate::admission::Yield;
use crate::admission::node::GiveWay;
use crate::config::Limits;
use crate::mining::conditions::set_condition;
use crate::mining::observe::{BlockJob, RangeJob};
use crate::mining::ranges::{RangeStep, decide, range_size};
use crate::mining::verify::{check_minimality, clip, verify_block_result};
use crate::naming::block_job_name;
pub use crate::work::PlannedEvent;
use mining_api::pod_start::{self, Blocked, Verdict};

/// How often a queued workflow looks again on its own. A freed slot wakes
/// the oldest queued workflows at once; this timer only refreshes the
/// position shown in their messages.
pub const QUEUED_RECHECK: Duration = Duration::from_secs(30);
/// Longest requeue: a far deadline or retention is looked at again after
/// this long (a timer decades out would overflow the runtime's clock).
pub const MAX_REQUEUE: Duration = Duration::from_secs(3600);

/// Everything `plan` looks at.
pub struct Observed<'a> {
    pub workflow: &'a MiningWorkflow,
    /// This workflow's Jobs (owned by it), by block index.
    pub jobs: BTreeMap<u32, BlockJob>,
    /// The Jobs of blocks mined in ranges (`spec.parallelism` > 1), by block.
    pub ranges: BTreeMap<u32, Vec<RangeJob>>,
    /// The slots other work (of every kind) holds, or is being admitted
    /// to, of the limit that binds this workflow, and the waiting work
    /// that goes first (see `admission::slots_for`).
    pub slots: crate::admission::Slots,
    /// Whether this workflow should give its slot to work that waits, and
    /// when: before its next block, or now (`admission::yield_for`).
    pub yielding: crate::admission::Yield,
    /// Since when its running block's Pods wait for a node, none running
    /// (`observe::waiting_for_node`).
    pub waiting_for_node: Option<Timestamp>,
    /// Whether it gives its slot back for that, and why (`admission::node::gives_way`).
    pub give_way: Option<GiveWay>,
    pub now: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    CreateJob {
        block: u32,
        prev: String,
        difficulty: u32,
    },
    /// Mine the nonces `start..start + count` of a block in a Job of its own.
    CreateRangeJob {
        block: u32,
        prev: String,
        difficulty: u32,
        start: u64,
        count: u64,
    },
    /// Delete a block's Job with background propagation (its Pods go too).
    DeleteJob {
        name: String,
    },
    /// Delete a Job no longer needed once the status is written (the ranges
    /// of a decided block: deleted earlier, a failed status write would have
    /// them mined again).
    CleanUpJob {
        name: String,
    },
    /// Retention is over: delete the workflow.
    DeleteWorkflow,
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
    minimality_budget: u64,
    limits: &'a Limits,
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
        minimality_budget: limits.minimality_check_budget,
        limits,
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
    // What fair share at the node reads: only of work holding a slot.
    let mining = planner.plan.status.phase == Some(WorkflowPhase::Mining);
    // What the status says of a node wait (fair share reads the Pod watch).
    let said = |since: &Timestamp| pod_start::node_wait_said(*since, observed.now);
    planner.plan.status.waiting_for_node_since =
        observed.waiting_for_node.filter(|_| mining).filter(said).map(Time);
    // `message` is a column of `kubectl get -o wide`: keep it short; the
    // conditions carry the whole text.
    if let Some(message) = planner.plan.status.message.as_mut()
        && message.chars().count() > MAX_MESSAGE_CHARS
    {
        let cut: String = message.chars().take(MAX_MESSAGE_CHARS - 1).collect();
        *message = format!("{}…", cut.trim_end());
    }
    planner.plan
}

/// Results lost (a finished block's Pod gone before its result was read) that
/// are mined again before the workflow fails with MissingResult.
pub const MAX_RESULTS_LOST: u32 = 3;

/// Longest `status.message` (a printer column).
pub const MAX_MESSAGE_CHARS: usize = 80;

impl Planner<'_> {
    fn spec(&self) -> &mining_api::MiningWorkflowSpec {
        &self.observed.workflow.spec
    }

    fn uid(&self) -> &str {
        self.observed.workflow.metadata.uid.as_deref().unwrap_or_default()
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
        let after = after.min(MAX_REQUEUE);
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
        // Deleted, yet kept by someone's finalizer: stop the work and say so,
        // so it holds no slot and no quota place while it waits to go.
        if self.observed.workflow.metadata.deletion_timestamp.is_some() {
            self.delete_unfinished_jobs();
            let note = "deleted before it finished; its Jobs were stopped".into();
            return self.finish(WorkflowPhase::Cancelled, reasons::DELETED, note);
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
        // A deadline past the end of representable time never comes.
        let Ok(deadline) = started.0.checked_add(SignedDuration::from_secs(seconds)) else {
            self.requeue(MAX_REQUEUE);
            return false;
        };
        let left = self.observed.now.duration_until(deadline);
        if left.is_positive() {
            self.requeue(left.unsigned_abs());
            false
        } else {
            true
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
            let ranges = self.observed.ranges.get(&block).map_or(&[][..], Vec::as_slice);
            // A block started in ranges stays in ranges (even if parallelism
            // drops to 1, or every Job of it has been cleaned up so far).
            let in_ranges = !ranges.is_empty() || self.plan.status.no_winner_below.is_some();
            // A block no Job was made for yet (the status named the one
            // before): where a workflow told to give its slot away does so.
            let untouched = block > 1
                && self.observed.workflow.status.as_ref().and_then(|s| s.current_block) != Some(block)
                && !in_ranges
                && !self.observed.jobs.contains_key(&block);
            if self.observed.yielding != Yield::Keep && untouched {
                return self.yield_slot(block, total);
            }
            if !self.observed.jobs.contains_key(&block) && (in_ranges || self.parallelism() > 1) {
                // The head of the queue waited past the preemption delay:
                // the block's running ranges go; the nonces searched so far
                // (`no_winner_below`, the ranges that reported) are kept.
                if in_ranges && self.observed.yielding == Yield::Now {
                    let running = ranges.iter().filter(|job| job.state.is_running());
                    let stop: Vec<Action> =
                        running.map(|job| Action::DeleteJob { name: job.name.clone() }).collect();
                    self.plan.actions.extend(stop);
                    return self.preempted_in_ranges(block, total);
                }
                // Every running range waits for a node and it gives way:
                // what the ranges searched is kept.
                if let Some(give_way) = self.observed.give_way.filter(|_| in_ranges) {
                    let waiting = ranges.iter().filter(|job| job.state.is_running());
                    let stop: Vec<Action> =
                        waiting.map(|job| Action::DeleteJob { name: job.name.clone() }).collect();
                    self.plan.actions.extend(stop);
                    return self.no_capacity(give_way);
                }
                let blocked = ranges.iter().filter_map(|job| match &job.state {
                    BlockJob::Blocked(blocked) => Some(blocked.clone()),
                    _ => None,
                });
                let blocked = pod_start::first(blocked);
                let running = ranges.iter().filter(|job| job.state.is_running()).map(|job| job.name.clone());
                let running: Vec<String> = running.collect();
                if let Some(blocked) = &blocked
                    && matches!(self.start_verdict(blocked), Verdict::Fail { .. })
                {
                    self.cannot_start(block, total, running, blocked);
                    return;
                }
                if self.mine_ranges(block, &prev, total) {
                    continue;
                }
                // Still on this block: say what its waiting ranges wait for.
                if let Some(blocked) = &blocked
                    && self.plan.status.phase == Some(WorkflowPhase::Mining)
                {
                    self.cannot_start(block, total, running, blocked);
                }
                return;
            }
            match self.observed.jobs.get(&block).cloned() {
                None => {
                    // The status already named this block: its Job existed (or was
                    // about to) and is gone — deleted by someone, or lost with a crash.
                    let recreated = self.observed.workflow.status.as_ref().and_then(|s| s.current_block)
                        == Some(block)
                        && self.phase() == WorkflowPhase::Mining;
                    self.plan.actions.push(Action::CreateJob { block, prev, difficulty });
                    // Each block's start and result are in the status (progress,
                    // `blocks`); Events are for transitions people read and for
                    // warnings, not one per block: at two a block they were half of
                    // the operator's API calls.
                    if recreated {
                        let note = format!("the Job of block {block}/{total} is gone; creating it again");
                        self.event(true, reasons::JOB_RECREATED, note);
                    }
                    return self.mining(block, total);
                }
                // Its Pods wait for a node and it gives way (they never ran).
                Some(BlockJob::Blocked(_)) if let Some(give_way) = self.observed.give_way => {
                    let job = block_job_name(&self.name, self.uid(), block);
                    self.plan.actions.push(Action::DeleteJob { name: job });
                    return self.no_capacity(give_way);
                }
                // The head of the queue waited past the preemption delay: the
                // block's Job goes and it is mined again when this resumes.
                Some(BlockJob::Running | BlockJob::Blocked(_))
                    if self.observed.yielding == Yield::Now && !in_ranges =>
                {
                    let job = block_job_name(&self.name, self.uid(), block);
                    self.plan.actions.push(Action::DeleteJob { name: job });
                    return self.preempted(block, total);
                }
                Some(BlockJob::Running) => return self.mining(block, total),
                Some(BlockJob::Blocked(blocked)) => {
                    let job = block_job_name(&self.name, self.uid(), block);
                    self.cannot_start(block, total, vec![job], &blocked);
                    return;
                }
                Some(BlockJob::Succeeded { message, started, finished }) => {
                    let budget = self.minimality_budget;
                    match verify_block_result(message.as_deref(), block, &prev, difficulty, budget) {
                        Ok((result, minimal)) => {
                            let job = block_job_name(&self.name, self.uid(), block);
                            self.record_block(block, result, minimal, started, finished, job)
                        }
                        // Mining is deterministic: a result whose Pod is gone is mined again.
                        Err((reasons::MISSING_RESULT, why)) if self.results_lost() < MAX_RESULTS_LOST => {
                            let job = block_job_name(&self.name, self.uid(), block);
                            return self.mine_again(
                                job,
                                block,
                                total,
                                &format!("block {block}/{total}: {why}"),
                            );
                        }
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

    fn results_lost(&self) -> u32 {
        self.plan.status.results_lost.unwrap_or(0)
    }

    /// Deletes `job`, finished with its result gone; the next pass (the Job
    /// gone) creates it again. The one re-mine path, for whole blocks and ranges.
    fn mine_again(&mut self, job: String, block: u32, total: u32, why: &str) {
        let lost = self.results_lost().saturating_add(1);
        self.plan.status.results_lost = Some(lost);
        self.plan.actions.push(Action::DeleteJob { name: job });
        let note = format!(
            "{why} (its Pod is gone); mining it again ({lost} of at most {MAX_RESULTS_LOST} re-minings)"
        );
        self.event(true, reasons::RESULT_LOST, note);
        self.mining(block, total);
    }

    fn start_verdict(&self, blocked: &Blocked) -> Verdict {
        pod_start::verdict(blocked, self.limits.pod_start_timeout(), self.observed.now)
    }

    /// The Pods of block `block`'s Jobs `jobs` cannot start: the block
    /// fails (its Jobs deleted) when the cause cannot clear or waited past
    /// the bound (true); else it keeps its slot and says what it waits for,
    /// with an Event once (false).
    fn cannot_start(&mut self, block: u32, total: u32, jobs: Vec<String>, blocked: &Blocked) -> bool {
        // A short wait for room on the nodes is not said (`NODE_WAIT_SAID_AFTER`);
        // a wait said before, of a Pod since replaced, is taken back.
        if let Some(left) = pod_start::quiet_for(blocked, self.observed.now) {
            if self.said_waiting() {
                self.mining(block, total);
            }
            self.requeue(left);
            return false;
        }
        match self.start_verdict(blocked) {
            Verdict::Wait { message, look_again } => {
                let message = format!("mining block {block}/{total}: {message}");
                if !self.said_waiting() {
                    self.event(true, pod_start::reasons::WAITING_TO_START, &message);
                }
                self.plan.status.message = Some(message.clone());
                let waiting = pod_start::reasons::WAITING_TO_START;
                self.condition(condition_types::MINING, ConditionStatus::True, waiting, &message);
                self.condition(condition_types::READY, ConditionStatus::False, reasons::PENDING, message);
                self.requeue(look_again);
                false
            }
            Verdict::Fail { reason, message } => {
                self.plan.actions.extend(jobs.into_iter().map(|name| Action::DeleteJob { name }));
                let message = format!("block {block}: {message}");
                self.event(true, reason, &message);
                self.finish(WorkflowPhase::Failed, reason, message);
                true
            }
        }
    }

    /// Whether the status read says its Pods wait to start.
    fn said_waiting(&self) -> bool {
        (self.observed.workflow.status.as_ref())
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == condition_types::MINING))
            .is_some_and(|c| c.reason == pod_start::reasons::WAITING_TO_START)
    }

    fn mining(&mut self, block: u32, total: u32) {
        self.mining_with(block, total, "");
    }

    fn mining_with(&mut self, block: u32, total: u32, detail: &str) {
        let message = format!("mining block {block}/{total}{detail}");
        self.plan.status.message = Some(message.clone());
        self.condition(condition_types::MINING, ConditionStatus::True, reasons::BLOCK_STARTED, &message);
        self.condition(condition_types::READY, ConditionStatus::False, reasons::PENDING, message);
    }

    fn record_block(
        &mut self,
        block: u32,
        result: BlockResult,
        minimality_checked: bool,
        started: Option<Time>,
        finished: Option<Time>,
        job_name: String,
    ) {
        // The miner's own clock: Job times have a resolution of one second.
        self.plan.mined_block_seconds.push(result.elapsed_ms as f64 / 1000.0);
        self.plan.status.no_winner_below = None;
        self.plan.status.blocks.push(MinedBlock {
            index: block,
            nonce: result.nonce,
            hash: result.hash,
            attempts: result.attempts,
            minimality_checked,
            job_name,
            started_at: started,
            finished_at: finished,
        });
    }
}

mod finish;
mod slot;
pub use finish::{status_foreign_job, status_rejected};
mod ranged;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod start_tests;

#[cfg(test)]
mod tests;
