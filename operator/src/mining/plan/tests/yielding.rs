//! A workflow giving its slot back: between blocks, mid-block, in ranges —
//! and resuming where it stopped.

use super::*;

/// Issue #47: a block mined in ranges never reaches its boundary in days
/// (a party could evade preemption with `parallelism: 2`). Told "now", its
/// running ranges go and the searched prefix is kept: on resuming, the
/// search goes on above it, and no range is called lost.
#[test]
fn mid_block_a_workflow_mined_in_ranges_gives_its_slot_back_and_keeps_what_it_searched() {
    let mut limits = limits();
    limits.nonce_range_size = Some(300);
    let mut wf = workflow("w", 16, 2);
    wf.spec.parallelism = 2;
    let mut ranges: BTreeMap<u32, Vec<RangeJob>> = BTreeMap::new();
    let step = |wf: &mut MiningWorkflow, ranges: &mut BTreeMap<u32, Vec<RangeJob>>, yielding| {
        let plan = plan(&in_ranges(wf, ranges, yielding), &limits);
        apply_to_ranges(&plan, ranges);
        *wf = with_status(wf.clone(), &plan);
        plan
    };
    step(&mut wf, &mut ranges, Yield::Keep);
    // Range [0, 300) reports, as the real miner does: no winner in it.
    let first = &mut ranges.get_mut(&1).unwrap()[0];
    assert_eq!(first.start, 0);
    let found = miner::mine_range(1, GENESIS, 16, 1, 0, 300).unwrap();
    assert!(found.is_none(), "the test needs a range without a winner");
    let report = miner::range_report(1, GENESIS, 16, (0, 300), None, 1).to_json_line();
    first.state = BlockJob::Succeeded { message: Some(report), started: None, finished: None };
    step(&mut wf, &mut ranges, Yield::Keep);
    assert_eq!(wf.status.as_ref().unwrap().no_winner_below, Some(300));
    let running: Vec<u64> = ranges[&1].iter().map(|j| j.start).collect();
    assert_eq!(running, [300, 600]);

    let preempted = step(&mut wf, &mut ranges, Yield::Now);
    assert_eq!(preempted.status.phase, Some(WorkflowPhase::Pending));
    assert!(ranges[&1].is_empty(), "both running ranges stopped: {:?}", preempted.actions);
    let admitted = condition(&preempted, condition_types::ADMITTED);
    assert_eq!(admitted.reason, reasons::YIELDED);
    let message = &admitted.message;
    assert!(message.contains("during block 1/2") && message.contains("above nonce 300"), "{message}");
    assert_eq!(preempted.status.no_winner_below, Some(300), "what was searched is kept");

    let resumed = step(&mut wf, &mut ranges, Yield::Keep);
    assert_eq!(resumed.status.phase, Some(WorkflowPhase::Mining));
    let starts: Vec<u64> = ranges[&1].iter().map(|j| j.start).collect();
    assert_eq!(starts, [300, 600], "the search goes on above what was searched");
    assert!(resumed.events.iter().all(|e| e.reason != reasons::JOB_RECREATED), "{:?}", resumed.events);
}

#[test]
fn between_blocks_a_workflow_told_to_yield_queues_again_and_resumes_where_it_stopped() {
    let wf = workflow("w", 8, 3);
    let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
    let first = mined(1, GENESIS, 8);
    let yielded = told_to_yield(&wf, &[(1, succeeded(&first))], at(20));
    // The block is recorded, its slot given back, no next Job created.
    assert_eq!(yielded.status.phase, Some(WorkflowPhase::Pending));
    assert_eq!(yielded.status.blocks.len(), 1);
    assert!(yielded.actions.is_empty(), "{:?}", yielded.actions);
    assert_eq!(condition(&yielded, condition_types::ADMITTED).reason, reasons::YIELDED);
    assert!(yielded.events.iter().any(|e| e.reason == reasons::YIELDED));
    assert!(yielded.status.message.as_deref().unwrap().contains("after block 1/3"));
    // Re-admitted later: the next block on top of the mined one, the
    // admission and the first start kept.
    let mut wf = with_status(wf, &yielded);
    wf.spec.difficulty = 9; // a spec edit the API server let through changes nothing
    let resumed = observe(&wf, &[(1, succeeded(&first))], at(90));
    assert_eq!(resumed.status.phase, Some(WorkflowPhase::Mining));
    assert_eq!(resumed.status.progress.as_deref(), Some("1/3"));
    assert_eq!(resumed.status.started_at, Some(Time(at(0))));
    assert_eq!(resumed.status.admitted_difficulty, Some(8));
    assert_eq!(resumed.actions, [Action::CreateJob { block: 2, prev: first.hash.clone(), difficulty: 8 }]);
}

#[test]
fn the_first_block_never_yields() {
    let admitted = told_to_yield(&workflow("w", 8, 3), &[], at(0));
    assert_eq!(admitted.status.phase, Some(WorkflowPhase::Mining), "just admitted: it mines its first block");
    assert_eq!(admitted.actions.len(), 1);
}

#[test]
fn a_workflow_mined_in_ranges_yields_before_its_next_block_too() {
    let mut wf = workflow("w", 8, 3).with_parallelism(2);
    wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
    let first = mined(1, GENESIS, 8);
    let status = wf.status.as_mut().unwrap();
    status.blocks.push(mining_api::testing::mined_block(1, first.nonce, &first.hash, at(1), at(2)));
    let yielded = told_to_yield(&wf, &[], at(20));
    assert_eq!(yielded.status.phase, Some(WorkflowPhase::Pending));
    assert!(
        !yielded.actions.iter().any(|a| matches!(a, Action::CreateRangeJob { .. })),
        "{:?}",
        yielded.actions
    );
    // Once the status names block 2, its Jobs exist (or existed): no yield.
    let mut started = wf.clone();
    started.status.as_mut().unwrap().current_block = Some(2);
    let mining = told_to_yield(&started, &[], at(20));
    assert_eq!(mining.status.phase, Some(WorkflowPhase::Mining));
}

#[test]
fn mid_block_a_workflow_told_to_give_its_slot_back_now_stops_its_job_and_keeps_its_blocks() {
    // Issue #47: block 2 of a long chain runs for days; the head of the
    // queue has waited past the preemption delay.
    let wf = workflow("w", 8, 3);
    let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
    let first = mined(1, GENESIS, 8);
    let mut wf = with_status(wf.clone(), &observe(&wf, &[(1, succeeded(&first))], at(10)));
    assert_eq!(wf.status.as_ref().unwrap().current_block, Some(2));
    let running = [(1, succeeded(&first)), (2, BlockJob::Running)];
    // Told only "at the next boundary": it keeps mining block 2.
    let kept = told_to_yield(&wf, &running, at(20));
    assert_eq!(kept.status.phase, Some(WorkflowPhase::Mining), "{:?}", kept.status.message);
    assert!(kept.actions.is_empty(), "{:?}", kept.actions);
    // Told "now": block 2's Job goes, block 1 stays, back in the queue.
    let preempted = observe_with(&wf, &running, 1, Yield::Now, at(90));
    assert_eq!(preempted.status.phase, Some(WorkflowPhase::Pending));
    assert_eq!(preempted.status.blocks.len(), 1, "the mined block is kept");
    assert_eq!(preempted.status.current_block, None);
    let job = crate::naming::block_job_name("w", wf.metadata.uid.as_deref().unwrap(), 2);
    assert_eq!(preempted.actions, [Action::DeleteJob { name: job }]);
    assert_eq!(condition(&preempted, condition_types::ADMITTED).reason, reasons::YIELDED);
    assert!(preempted.status.message.as_deref().unwrap().contains("during block 2/3"));
    // Re-admitted: block 2 again from its first nonce, on block 1.
    wf = with_status(wf, &preempted);
    let resumed = observe(&wf, &[(1, succeeded(&first))], at(200));
    assert_eq!(resumed.status.phase, Some(WorkflowPhase::Mining));
    assert_eq!(resumed.actions, [Action::CreateJob { block: 2, prev: first.hash.clone(), difficulty: 8 }]);
    assert!(resumed.events.iter().all(|e| e.reason != reasons::JOB_RECREATED), "{:?}", resumed.events);
}
