//! Admission: a limit says no (rejected) or not yet (queued, with its
//! place), and what is admitted stays as admitted.

use super::*;

#[test]
fn a_workflow_over_the_difficulty_limit_is_rejected_without_a_job() {
    let plan = observe(&workflow("w", 41, 2), &[], at(0));
    assert_eq!(plan.status.phase, Some(WorkflowPhase::Failed));
    assert!(plan.actions.is_empty());
    let admitted = condition(&plan, condition_types::ADMITTED);
    assert_eq!((admitted.status, admitted.reason.as_str()), (ConditionStatus::False, reasons::OVER_LIMIT));
}

#[test]
fn a_workflow_beyond_the_concurrency_limit_waits_pending_and_rechecks() {
    let wf = workflow("w", 8, 2);
    let observed = Observed {
        workflow: &wf,
        jobs: BTreeMap::new(),
        ranges: BTreeMap::new(),
        slots: crate::admission::Slots {
            taken: 2,
            limit: 2,
            ahead: 0,
            binding: crate::admission::Limit::Kind,
        },
        yielding: Yield::Keep,
        waiting_for_node: None,
        give_way: None,
        now: at(0),
    };
    let plan = plan(&observed, &limits());
    assert_eq!(plan.status.phase, Some(WorkflowPhase::Pending));
    assert!(plan.actions.is_empty());
    assert_eq!(condition(&plan, condition_types::ADMITTED).reason, reasons::QUEUED);
    assert_eq!(plan.requeue_after, Some(QUEUED_RECHECK));
}

#[test]
fn older_queued_workflows_take_free_slots_first_and_the_message_tells_the_position() {
    let wf = workflow("w", 8, 2);
    // Limit 2, one mining: one slot, and one older workflow waits for it.
    let observed = Observed {
        workflow: &wf,
        jobs: BTreeMap::new(),
        ranges: BTreeMap::new(),
        slots: crate::admission::Slots {
            taken: 1,
            limit: 2,
            ahead: 1,
            binding: crate::admission::Limit::Kind,
        },
        yielding: Yield::Keep,
        waiting_for_node: None,
        give_way: None,
        now: at(0),
    };
    let queued = plan(&observed, &limits());
    assert_eq!(queued.status.phase, Some(WorkflowPhase::Pending));
    assert!(queued.actions.is_empty());
    assert_eq!(
        queued.status.message.as_deref(),
        Some("queued: 0 ahead of it; 1 of at most 2 workflows are mining")
    );
    // Still queued a moment later, further back: no second Queued Event.
    let wf = with_status(wf.clone(), &queued);
    let observed = Observed {
        workflow: &wf,
        jobs: BTreeMap::new(),
        ranges: BTreeMap::new(),
        slots: crate::admission::Slots {
            taken: 2,
            limit: 2,
            ahead: 3,
            binding: crate::admission::Limit::Kind,
        },
        yielding: Yield::Keep,
        waiting_for_node: None,
        give_way: None,
        now: at(1),
    };
    let later = plan(&observed, &limits());
    assert!(later.events.is_empty(), "{:?}", later.events);
    assert!(later.status.message.unwrap().starts_with("queued: 3 ahead of it"));
    // Its turn: admitted.
    let observed = Observed {
        workflow: &wf,
        jobs: BTreeMap::new(),
        ranges: BTreeMap::new(),
        slots: crate::admission::Slots {
            taken: 1,
            limit: 2,
            ahead: 0,
            binding: crate::admission::Limit::Kind,
        },
        yielding: Yield::Keep,
        waiting_for_node: None,
        give_way: None,
        now: at(2),
    };
    let admitted = plan(&observed, &limits());
    assert_eq!(admitted.status.phase, Some(WorkflowPhase::Mining));
    // After a wait its start is news (unlike a start on creation): one Event.
    let reasons: Vec<_> = admitted.events.iter().map(|e| e.reason).collect();
    assert_eq!(reasons, [reasons::ADMITTED]);
    assert_eq!(admitted.events[0].note, "mining started: 2 blocks at difficulty 8");
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
