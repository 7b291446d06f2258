//! The one queue every kind of work waits in, and the I/O around the pure
//! decisions of [`crate::admission`]: it reads both kinds' caches and what
//! this operator wrote, reserves a slot while an admission is written, and
//! wakes whatever is next when a slot frees — of whichever kind.

use std::sync::Arc;

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::{ObjectRef, Store};
use mining_api::{MiningWorkflow, ToolRun};

use crate::admission::{
    Budget, QueueEntry, Seen, Slots, WorkKind, freshest_phases, next_in_queue, queue_positions, should_yield,
    slots_for, taken_by_others,
};
use crate::memory::{Memory, Reservation};
use crate::parties::Parties;

/// Wakes the controller of each kind.
pub struct Wakers {
    pub workflows: UnboundedSender<ObjectRef<MiningWorkflow>>,
    pub runs: UnboundedSender<ObjectRef<ToolRun>>,
}

pub struct WorkQueue {
    pub workflows: Store<MiningWorkflow>,
    pub runs: Store<ToolRun>,
    pub parties: Parties,
    pub memory: Arc<Memory>,
    pub budget: Budget,
    pub wakers: Wakers,
}

impl WorkQueue {
    /// All work of every kind with its freshest phase. Tool runs without
    /// the frontend's proof are never run, so they hold no place.
    pub fn all(&self) -> Vec<Seen> {
        let written = self.memory.written_standings();
        let started_workflow =
            |w: &MiningWorkflow| w.status.as_ref().and_then(|s| s.started_at.as_ref()).map(|t| t.0);
        let started_run = |r: &ToolRun| r.status.as_ref().and_then(|s| s.started_at.as_ref()).map(|t| t.0);
        let workflows = self.workflows.state();
        let runs: Vec<Arc<ToolRun>> =
            self.runs.state().into_iter().filter(|run| self.parties.proves(run.as_ref())).collect();
        let mut all = freshest_phases(WorkKind::Workflow, &workflows, &written, started_workflow, |w| {
            self.parties.of(w)
        });
        all.extend(freshest_phases(WorkKind::ToolRun, &runs, &written, started_run, |r| self.parties.of(r)));
        all
    }

    /// `me`'s slots, counted while no other admission can be, and a slot
    /// reserved for it until the reservation is dropped (after its status
    /// is written). The queue's order is shared by the reconciles that
    /// follow while nothing changed it (see `Memory::queue_positions`).
    pub fn admission(&self, me: &QueueEntry) -> (Slots, Reservation<'_>) {
        self.memory.reserve_admission(me.kind, |(in_flight, in_flight_of_kind)| {
            let all = self.all();
            let positions = self.memory.queue_positions(&me.uid, || queue_positions(&all, &self.budget));
            let (taken, taken_of_kind) = taken_by_others(&all, me);
            let taken = (taken + in_flight, taken_of_kind + in_flight_of_kind);
            slots_for(me, taken, &positions, &self.budget)
        })
    }

    /// Whether the workflow `me`, between two blocks, should lend its slot.
    pub fn should_yield(&self, me: &QueueEntry) -> bool {
        should_yield(&self.all(), me, &self.budget)
    }

    /// A slot freed (or the queue changed): reconcile the work next in line
    /// now, whatever its kind.
    pub fn wake_next(&self) {
        self.memory.queue_changed();
        let all = self.all();
        for next in next_in_queue(&all, &self.budget) {
            self.wake(next);
        }
    }

    fn wake(&self, entry: &QueueEntry) {
        match entry.kind {
            WorkKind::Workflow => {
                let _ = self
                    .wakers
                    .workflows
                    .unbounded_send(ObjectRef::new(&entry.name).within(&entry.namespace));
            }
            WorkKind::ToolRun => {
                let _ = self.wakers.runs.unbounded_send(ObjectRef::new(&entry.name).within(&entry.namespace));
            }
        }
    }

    /// A new leadership term: every piece of work is looked at again.
    pub fn wake_all(&self) {
        for workflow in self.workflows.state() {
            let _ = self.wakers.workflows.unbounded_send(ObjectRef::from_obj(workflow.as_ref()));
        }
        for run in self.runs.state() {
            let _ = self.wakers.runs.unbounded_send(ObjectRef::from_obj(run.as_ref()));
        }
    }
}
