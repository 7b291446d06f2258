use super::*;
use crate::admission::Yield;
use crate::naming::block_job_name;
use crate::testing::{at, workflow};
use mining_api::bounds::MAX_STORED_INTEGER;
use mining_api::testing::WorkflowExt;

fn limits() -> Limits {
    Limits {
        max_difficulty: 40,
        max_blocks: 64,
        max_concurrent_workflows: 2,
        max_concurrent_tool_runs: 20,
        max_concurrent_work: None,
        max_tool_runs_per_caller: 5,
        max_work_per_namespace: 0,
        preempt_after_seconds: 60,
        capacity_wait_seconds: 300,
        default_ttl_seconds: 3600,
        minimality_check_budget: 1 << 24,
        max_parallelism: 8,
        nonce_range_size: None,
        pod_start_timeout_seconds: 600,
    }
}

fn observe(wf: &MiningWorkflow, jobs: &[(u32, BlockJob)], now: Timestamp) -> Plan {
    observe_with(wf, jobs, 0, Yield::Keep, now)
}

/// `observe`, with `others_mining` and the controller's word on yielding.
fn observe_with(
    wf: &MiningWorkflow,
    jobs: &[(u32, BlockJob)],
    others_mining: usize,
    yielding: Yield,
    now: Timestamp,
) -> Plan {
    let observed = Observed {
        workflow: wf,
        jobs: jobs.iter().cloned().collect(),
        ranges: BTreeMap::new(),
        slots: crate::admission::Slots {
            taken: others_mining,
            limit: 2,
            ahead: 0,
            binding: crate::admission::Limit::Kind,
        },
        yielding,
        waiting_for_node: None,
        give_way: None,
        now,
    };
    plan(&observed, &limits())
}

/// A real result document for `block` on top of `prev`, mined here.
fn mined(block: u32, prev: &str, difficulty: u32) -> BlockResult {
    let found = miner::mine_block(block as u64, prev, difficulty, 1).unwrap();
    miner::block_result(block as u64, prev, difficulty, &found, 1)
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
    assert!(plan.events.is_empty(), "a start on creation is no news: {:?}", plan.events);
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
        (1, result.nonce, &result.hash, block_job_name("w", "uid-w", 1).as_str())
    );
    assert_eq!(plan.actions, [Action::CreateJob { block: 2, prev: result.hash.clone(), difficulty: 8 }]);
    assert_eq!(plan.status.progress.as_deref(), Some("1/3"));
    assert_eq!(plan.mined_block_seconds, [0.001], "the miner's elapsed_ms, not the Job's 1 s clock");
    assert!(plan.events.is_empty(), "a block's result is in the status, not an Event: {:?}", plan.events);
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
fn a_garbled_result_fails_the_workflow() {
    let wf = workflow("w", 8, 2);
    let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
    let job = BlockJob::Succeeded { message: Some("not json".into()), started: None, finished: None };
    let plan = observe(&wf, &[(1, job)], at(20));
    assert_eq!(plan.status.phase, Some(WorkflowPhase::Failed));
    assert_eq!(condition(&plan, condition_types::READY).reason, reasons::INVALID_RESULT);
}

#[test]
fn a_lost_result_is_mined_again_a_few_times_then_fails_missing_result() {
    let mut wf = workflow("w", 8, 2);
    wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
    let lost = || BlockJob::Succeeded { message: None, started: None, finished: None };
    for attempt in 1..=MAX_RESULTS_LOST {
        let plan = observe(&wf, &[(1, lost())], at(i64::from(attempt)));
        assert_eq!(plan.status.phase, Some(WorkflowPhase::Mining), "attempt {attempt}");
        assert_eq!(plan.status.results_lost, Some(attempt));
        assert_eq!(plan.actions, [Action::DeleteJob { name: block_job_name("w", "uid-w", 1) }]);
        assert!(plan.events.iter().any(|e| e.warning && e.reason == reasons::RESULT_LOST));
        wf = with_status(wf.clone(), &plan);
        // The Job gone, the next pass creates it again.
        let again = observe(&wf, &[], at(i64::from(attempt)));
        assert!(
            matches!(again.actions.as_slice(), [Action::CreateJob { block: 1, .. }]),
            "{:?}",
            again.actions
        );
    }
    let plan = observe(&wf, &[(1, lost())], at(9));
    assert_eq!(plan.status.phase, Some(WorkflowPhase::Failed));
    assert_eq!(condition(&plan, condition_types::READY).reason, reasons::MISSING_RESULT);
}

#[test]
fn a_failed_job_fails_the_workflow_with_its_reason_and_pod_message() {
    let wf = workflow("w", 8, 2);
    let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
    let job =
        BlockJob::Failed { reason: "BackoffLimitExceeded".into(), message: "miner: out of memory".into() };
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
    assert_eq!(plan.actions, [Action::DeleteJob { name: block_job_name("w", "uid-w", 1) }]);
    assert_eq!(condition(&plan, condition_types::READY).reason, reasons::CANCELLED);
}

#[test]
fn a_deleted_workflow_kept_by_a_finalizer_stops_and_ends_cancelled() {
    // Finding 4 and 5 of the tool boundary: a finalizer must not keep it mining.
    let wf = workflow("w", 8, 2);
    let mut wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
    wf.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(2)));
    wf.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let plan = observe(&wf, &[(1, BlockJob::Running)], at(3));
    assert_eq!(plan.status.phase, Some(WorkflowPhase::Cancelled));
    assert_eq!(plan.actions, [Action::DeleteJob { name: block_job_name("w", "uid-w", 1) }]);
    assert_eq!(condition(&plan, condition_types::READY).reason, reasons::DELETED);
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
    assert_eq!(after.actions, [Action::DeleteJob { name: block_job_name("w", "uid-w", 1) }]);
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
fn far_deadlines_and_retentions_do_not_overflow_the_clock() {
    let mut wf = workflow("far", 8, 2);
    wf.spec.active_deadline_seconds = Some(i64::MAX);
    wf.spec.ttl_seconds_after_finished = Some(i64::MAX);
    wf.status = Some(MiningWorkflowStatus {
        phase: Some(WorkflowPhase::Mining),
        started_at: Some(Time(Timestamp::MAX)),
        ..Default::default()
    });
    let mining = observe(&wf, &[], at(0));
    assert!(mining.requeue_after.unwrap() <= MAX_REQUEUE);
    wf.status = Some(MiningWorkflowStatus {
        phase: Some(WorkflowPhase::Succeeded),
        finished_at: Some(Time(Timestamp::MAX)),
        ..Default::default()
    });
    let finished = observe(&wf, &[], at(0));
    assert_eq!(finished.requeue_after, Some(MAX_REQUEUE));
    assert!(!finished.actions.contains(&Action::DeleteWorkflow));
}

#[test]
fn a_nonce_no_status_can_hold_is_an_invalid_result() {
    let result = BlockResult {
        index: 1,
        prev: GENESIS.into(),
        nonce: MAX_STORED_INTEGER + 1,
        hash: "00".repeat(32),
        attempts: MAX_STORED_INTEGER + 2,
        difficulty: 1,
        elapsed_ms: 1,
    };
    let (reason, why) =
        verify_block_result(Some(&result.to_json_line()), 1, GENESIS, 1, 1 << 24).unwrap_err();
    assert_eq!(reason, reasons::INVALID_RESULT);
    assert!(why.contains("largest a status can hold"), "{why}");
}

#[test]
fn a_refused_status_fails_the_workflow_keeping_what_was_stored() {
    let mut wf = workflow("refused", 8, 3);
    let prev = mined(1, GENESIS, 8);
    wf.status = Some(MiningWorkflowStatus {
        phase: Some(WorkflowPhase::Mining),
        blocks: vec![MinedBlock {
            index: 1,
            nonce: prev.nonce,
            hash: prev.hash.clone(),
            attempts: prev.attempts,
            minimality_checked: true,
            job_name: "j".into(),
            started_at: None,
            finished_at: None,
        }],
        ..Default::default()
    });
    let status = status_rejected(&wf, "status.blocks[1].nonce: Invalid value", at(5));
    assert_eq!(status.phase, Some(WorkflowPhase::Failed));
    assert_eq!(status.blocks.len(), 1);
    let ready = status.conditions.iter().find(|c| c.type_ == condition_types::READY).unwrap();
    assert_eq!(ready.reason, reasons::STATUS_REJECTED);
    assert!(status.message.unwrap().contains("Invalid value"));
}

#[test]
fn a_long_message_is_short_in_the_status_and_whole_in_the_condition() {
    let wf = workflow("w", 8, 2);
    let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
    let words = "x".repeat(400);
    let plan = observe(
        &wf,
        &[(1, BlockJob::Failed { reason: "BackoffLimitExceeded".into(), message: words.clone() })],
        at(9),
    );
    let message = plan.status.message.unwrap();
    assert_eq!(message.chars().count(), MAX_MESSAGE_CHARS);
    assert!(message.ends_with('…'));
    let ready = plan.status.conditions.iter().find(|c| c.type_ == condition_types::READY).unwrap();
    assert!(ready.message.contains(&words));
}

#[test]
fn one_block_is_one_block() {
    let wf = workflow("w", 8, 1);
    let wf = with_status(wf.clone(), &observe(&wf, &[], at(0)));
    let plan = observe(&wf, &[(1, succeeded(&mined(1, GENESIS, 8)))], at(3));
    assert_eq!(plan.status.message.as_deref(), Some("mined and verified 1 block"));
}

/// A result document for block 1 on GENESIS with the given nonce.
fn claimed(nonce: u64, difficulty: u32) -> String {
    let hash = miner::verify_block(1, GENESIS, nonce, difficulty).expect("a valid nonce");
    BlockResult {
        index: 1,
        prev: GENESIS.into(),
        nonce,
        hash,
        attempts: nonce + 1,
        difficulty,
        elapsed_ms: 1,
    }
    .to_json_line()
}

#[test]
fn a_valid_but_not_smallest_nonce_is_an_invalid_result_and_the_smallest_is_recorded_as_checked() {
    let smallest = miner::mine_block(1, GENESIS, 4, 1).unwrap().nonce;
    let larger = (smallest + 1..).find(|n| miner::verify_block(1, GENESIS, *n, 4).is_ok()).unwrap();
    let (reason, why) = verify_block_result(Some(&claimed(larger, 4)), 1, GENESIS, 4, 1 << 24).unwrap_err();
    assert_eq!(reason, reasons::INVALID_RESULT);
    assert!(why.contains(&format!("nonce {smallest} already has 4 leading zero bits")), "{why}");
    let (_, checked) = verify_block_result(Some(&claimed(smallest, 4)), 1, GENESIS, 4, 1 << 24).unwrap();
    assert!(checked);
    // Beyond the budget the check is skipped, and the status says so.
    let (_, checked) = verify_block_result(Some(&claimed(larger, 4)), 1, GENESIS, 4, smallest).unwrap();
    assert!(!checked);
}

/// What the controller sees of the workflow `wf` mined in `ranges`, no
/// other work holding a slot.
fn in_ranges<'a>(
    wf: &'a MiningWorkflow,
    ranges: &BTreeMap<u32, Vec<RangeJob>>,
    yielding: Yield,
) -> Observed<'a> {
    Observed {
        workflow: wf,
        jobs: BTreeMap::new(),
        ranges: ranges.clone(),
        slots: crate::admission::Slots {
            taken: 0,
            limit: 2,
            ahead: 0,
            binding: crate::admission::Limit::Kind,
        },
        yielding,
        waiting_for_node: None,
        give_way: None,
        now: at(1),
    }
}

/// The range Jobs as the plan leaves them: each created one running, each
/// deleted one gone; any other action is a failure.
fn apply_to_ranges(plan: &Plan, ranges: &mut BTreeMap<u32, Vec<RangeJob>>) {
    for action in &plan.actions {
        match action {
            Action::CreateRangeJob { block, start, count, .. } => {
                let name = crate::naming::range_job_name("w", "uid-w", *block, *start);
                let job = RangeJob { name, start: *start, count: *count, state: BlockJob::Running };
                ranges.entry(*block).or_default().push(job);
            }
            Action::DeleteJob { name } | Action::CleanUpJob { name } => {
                ranges.values_mut().for_each(|jobs| jobs.retain(|j| &j.name != name));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// `observe` with the controller's word that the slot should go to another.
fn told_to_yield(wf: &MiningWorkflow, jobs: &[(u32, BlockJob)], now: Timestamp) -> Plan {
    observe_with(wf, jobs, 1, Yield::AtBlockBoundary, now)
}

mod admission;
mod ranges;
mod yielding;
