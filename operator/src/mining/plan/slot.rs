//! A workflow's slot: taken when a limit allows (or queued, or rejected),
//! and given back to the head of the queue — before a block, or mid-block.

use super::*;

impl Planner<'_> {
    /// Pending → Mining, unless a limit says no (rejected) or not yet (queued).
    pub(super) fn admit(&mut self, limits: &Limits) -> bool {
        let (difficulty, blocks) = (self.spec().difficulty, self.spec().blocks);
        let mined = self.plan.status.blocks.len();
        self.plan.status.progress = Some(format!("{mined}/{}", self.total_blocks()));
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
        let slots = self.observed.slots;
        if !slots.admits() {
            let message = slots.queued_message("workflows are mining");
            let was_queued = self
                .plan
                .status
                .conditions
                .iter()
                .any(|c| c.type_ == condition_types::ADMITTED && c.reason == reasons::QUEUED);
            self.plan.status.phase = Some(WorkflowPhase::Pending);
            self.plan.status.message = Some(message.clone());
            self.condition(condition_types::ADMITTED, ConditionStatus::False, reasons::QUEUED, &message);
            if !was_queued {
                self.event(false, reasons::QUEUED, message);
            }
            self.condition(
                condition_types::READY,
                ConditionStatus::False,
                reasons::QUEUED,
                "waiting to start",
            );
            // Woken when a slot frees; the timer only refreshes the position.
            self.requeue(QUEUED_RECHECK);
            return false;
        }
        let status = &mut self.plan.status;
        status.phase = Some(WorkflowPhase::Mining);
        // A workflow that yielded its slot resumes what it was admitted to
        // mine, and its deadline still counts from its first start.
        status.started_at.get_or_insert_with(|| self.now.clone());
        status.admitted_at = Some(self.now.clone());
        status.admitted_difficulty.get_or_insert(difficulty);
        status.admitted_blocks.get_or_insert(blocks);
        // A start after a wait is news (the Queued Event said it waited); a
        // start on creation is not.
        let waited = (self.plan.status.conditions.iter())
            .any(|c| c.type_ == condition_types::ADMITTED && c.status == ConditionStatus::False);
        if waited {
            self.event(
                false,
                reasons::ADMITTED,
                format!("mining started: {blocks} blocks at difficulty {difficulty}"),
            );
        }
        self.condition(condition_types::ADMITTED, ConditionStatus::True, reasons::ADMITTED, "mining started");
        true
    }

    /// `difficulty` and `blocks` are immutable; where the API server did not
    /// enforce that, keep mining what was admitted and say so.
    pub(super) fn note_ignored_spec_change(&mut self) {
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

    /// Gives the slot to a workflow that waits, before block `block`: back
    /// in the queue, every mined block kept.
    pub(super) fn yield_slot(&mut self, block: u32, total: u32) {
        self.back_in_queue(format!(
            "queued: yielded its slot after block {}/{total} to a workflow that waited; it resumes with the \
             blocks mined so far when a slot frees",
            block - 1
        ));
    }

    /// Gives the slot back mid-block `block` to work that waited past the
    /// preemption delay: back in the queue, every mined block kept, `block`
    /// mined again from its first nonce when a slot frees.
    pub(super) fn preempted(&mut self, block: u32, total: u32) {
        self.count_preemption();
        self.back_in_queue(format!(
            "queued: gave its slot back during block {block}/{total} to work that waited its turn; the \
             {} blocks mined so far are kept, block {block} is mined again when a slot frees",
            block - 1
        ));
    }

    /// [`Self::preempted`] for a block mined in ranges: what its ranges
    /// searched is kept, the search goes on above that when a slot frees.
    pub(super) fn preempted_in_ranges(&mut self, block: u32, total: u32) {
        let searched = self.plan.status.no_winner_below.unwrap_or(0);
        self.count_preemption();
        self.back_in_queue(format!(
            "queued: gave its slot back during block {block}/{total} to work that waited its turn; the \
             {} blocks mined so far are kept, and block {block}'s search goes on above nonce {searched} when \
             a slot frees",
            block - 1
        ));
    }

    /// One more running block stopped for work that waited: what protects
    /// the next slot for longer (`admission::protected_for`).
    fn count_preemption(&mut self) {
        let before = self.plan.status.preemptions.unwrap_or(0);
        self.plan.status.preemptions = Some(before.saturating_add(1));
    }

    /// Its block's Pods waited for a node and it gives its slot back
    /// (`admission::node::gives_way`): back in the queue, every mined block
    /// kept, and no preemption counted — its block never ran.
    pub(super) fn no_capacity(&mut self, give_way: GiveWay) {
        self.queue_again(reasons::NO_CAPACITY, give_way.message("workflow"));
    }

    /// Back in the queue with its slot given away, saying why (`message`).
    pub(super) fn back_in_queue(&mut self, message: String) {
        self.queue_again(reasons::YIELDED, message);
    }

    fn queue_again(&mut self, reason: &'static str, message: String) {
        self.plan.status.phase = Some(WorkflowPhase::Pending);
        self.plan.status.current_block = None;
        self.plan.status.message = Some(message.clone());
        self.condition(condition_types::ADMITTED, ConditionStatus::False, reason, &message);
        self.condition(condition_types::MINING, ConditionStatus::False, reason, &message);
        self.condition(condition_types::READY, ConditionStatus::False, reasons::QUEUED, "waiting to resume");
        self.event(false, reason, message);
        self.requeue(QUEUED_RECHECK);
    }
}
