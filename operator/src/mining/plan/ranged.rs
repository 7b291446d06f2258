//! The planner's steps for a block mined in ranges across Pods.

use mining_api::reasons;

use super::*;

impl Planner<'_> {
    /// Pods this block may use: the spec's wish within the operator's limit.
    pub(super) fn parallelism(&self) -> u32 {
        self.spec().parallelism.clamp(1, self.limits.max_parallelism.max(1))
    }

    /// One step of a block mined in ranges; true when the block is recorded
    /// and the chain can move on.
    pub(super) fn mine_ranges(&mut self, block: u32, prev: &str, total: u32) -> bool {
        let difficulty = self.difficulty();
        let parallelism = self.parallelism();
        let size = range_size(difficulty, parallelism, self.limits.nonce_range_size);
        let jobs = self.observed.ranges.get(&block).cloned().unwrap_or_default();
        let cleared_before = self.plan.status.no_winner_below.unwrap_or(0);
        match decide(&jobs, cleared_before, block, prev, difficulty, parallelism, size) {
            RangeStep::Decided { result, job, .. } => {
                let minimal = match check_minimality(
                    &result,
                    block,
                    prev,
                    difficulty,
                    self.limits.minimality_check_budget,
                ) {
                    Ok(minimal) => minimal,
                    Err((reason, why)) => {
                        let message = format!("block {block}: {why}");
                        self.event(true, reason, &message);
                        self.finish(WorkflowPhase::Failed, reason, message);
                        return false;
                    }
                };
                let winner = jobs.iter().find(|j| j.name == job);
                let (started, finished) = match winner.map(|j| &j.state) {
                    Some(BlockJob::Succeeded { started, finished, .. }) => {
                        (started.clone(), finished.clone())
                    }
                    _ => (None, None),
                };
                let cleanup = jobs.iter().filter(|j| j.name != job).map(|j| j.name.clone());
                let cleanup: Vec<Action> = cleanup.map(|name| Action::CleanUpJob { name }).collect();
                self.plan.actions.extend(cleanup);
                self.record_block(block, result, minimal, started, finished, job);
                true
            }
            RangeStep::Mining { create, stop, refilled, cleared, running } => {
                // Recorded, the cleared prefix lets the Jobs that found it go
                // (after the status write), so a block keeps about
                // `parallelism` Jobs however many ranges it takes.
                let cleared = cleared.min(MAX_STORED_INTEGER);
                self.plan.status.no_winner_below = (cleared > 0).then_some(cleared);
                let below = jobs.iter().filter(|j| {
                    matches!(j.state, BlockJob::Succeeded { .. })
                        && j.start.saturating_add(j.count) <= cleared
                });
                let done: Vec<Action> = below.map(|j| Action::CleanUpJob { name: j.name.clone() }).collect();
                self.plan.actions.extend(done);
                if jobs.is_empty() && cleared_before == 0 {
                    let mut note = format!(
                        "mining block {block}/{total} in {parallelism} Pods, ranges of {size} nonces"
                    );
                    let asked = self.spec().parallelism;
                    if asked > parallelism {
                        note.push_str(&format!(" (spec.parallelism {asked} is above this operator's limit)"));
                    }
                    self.event(false, reasons::BLOCK_STARTED, note);
                } else if refilled > 0
                    && self.phase() == WorkflowPhase::Mining
                    && self.observed.workflow.phase() == WorkflowPhase::Mining
                {
                    // (Not when it resumes: ranges it gave back are not lost.)
                    let note = format!(
                        "{refilled} range Job(s) of block {block}/{total} are gone; creating them again"
                    );
                    self.event(true, reasons::JOB_RECREATED, note);
                }
                let starting = create.len();
                self.plan.actions.extend(stop.into_iter().map(|name| Action::DeleteJob { name }));
                self.plan.actions.extend(create.into_iter().map(|range| Action::CreateRangeJob {
                    block,
                    prev: prev.to_string(),
                    difficulty,
                    start: range.start,
                    count: range.end - range.start,
                }));
                let pods = running + starting;
                let detail = format!(" in {pods} Pods; no winner below nonce {cleared}");
                self.mining_with(block, total, &detail);
                false
            }
            RangeStep::Lost { job, why } if self.results_lost() < MAX_RESULTS_LOST => {
                self.mine_again(job, block, total, &why);
                false
            }
            RangeStep::Lost { why, .. } => {
                let message = format!("block {block}: {why}");
                self.event(true, reasons::MISSING_RESULT, &message);
                self.finish(WorkflowPhase::Failed, reasons::MISSING_RESULT, message);
                false
            }
            RangeStep::Failed { reason, message } => {
                self.event(true, reason, &message);
                self.finish(WorkflowPhase::Failed, reason, message);
                false
            }
        }
    }
}
