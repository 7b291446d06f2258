use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mining_api::testing::{self, WorkflowExt};
use mining_api::{
    Condition, ConditionStatus, GENESIS, MinedBlock, MiningWorkflowStatus, WorkflowPhase, reasons,
};
use proptest::prelude::*;

use super::*;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn workflow(difficulty: u32, blocks: u32) -> MiningWorkflow {
    testing::workflow("mw-aaaaaaaaaaaaaaaaaaaaaaaaaa", difficulty, blocks).created_at(at(0))
}

/// A real chain of `count` blocks, block k taking `k` seconds from t=10.
fn mined_blocks(difficulty: u32, count: u32) -> Vec<MinedBlock> {
    let mut prev = GENESIS.to_string();
    let mut clock = 10;
    (1..=count)
        .map(|index| {
            let found = miner::mine_block(u64::from(index), &prev, difficulty, 1).unwrap();
            let hash = miner::hex_upper(&found.digest);
            let started = clock;
            clock += i64::from(index);
            prev = hash.clone();
            MinedBlock {
                index,
                nonce: found.nonce,
                hash,
                attempts: found.nonce + 1,
                minimality_checked: true,
                job_name: format!("job-{index}"),
                started_at: Some(Time(at(started))),
                finished_at: Some(Time(at(clock))),
            }
        })
        .collect()
}

fn with_status(
    mut workflow: MiningWorkflow,
    phase: WorkflowPhase,
    blocks: Vec<MinedBlock>,
) -> MiningWorkflow {
    workflow.status = Some(MiningWorkflowStatus {
        phase: Some(phase),
        blocks,
        started_at: Some(Time(at(10))),
        ..Default::default()
    });
    workflow
}

fn ready(reason: &str, message: &str) -> Condition {
    testing::condition(condition_types::READY, ConditionStatus::False, reason, message, at(0))
}

#[test]
fn succeeded_workflow_is_completed_with_the_verified_chain() {
    let mut workflow = with_status(workflow(8, 3), WorkflowPhase::Succeeded, mined_blocks(8, 3));
    workflow.status.as_mut().unwrap().finished_at = Some(Time(at(16)));
    let answer = outcome(&workflow, at(20));
    assert_eq!(answer.status, OutcomeStatus::Completed);
    assert_eq!(answer.details.progress, Some(Progress { blocks_done: 3, blocks_total: 3 }));
    let chain = answer.details.result.unwrap();
    assert_eq!(chain.difficulty, 8);
    assert_eq!(chain.blocks[0].prev, GENESIS);
    assert_eq!(chain.blocks[1].prev, chain.blocks[0].hash);
    assert_eq!(chain.total_attempts, chain.blocks.iter().map(|b| b.attempts).sum::<u64>());
    assert_eq!(chain.elapsed_seconds, 6.0);
    assert_eq!(answer.poll_after_seconds, None);
    assert_eq!(answer.status_message, "Mined all 3 blocks at difficulty 8");
}

#[test]
fn forged_chain_in_a_succeeded_status_is_failed_invalid_result() {
    let mut blocks = mined_blocks(8, 2);
    blocks[1].nonce += 1;
    let answer = outcome(&with_status(workflow(8, 2), WorkflowPhase::Succeeded, blocks), at(20));
    assert_eq!(answer.status, OutcomeStatus::Failed);
    assert_eq!(answer.reason.as_deref(), Some(reasons::INVALID_RESULT));
    assert!(answer.error.unwrap().contains("block 2"));
    assert_eq!(answer.details.result, None);
}

#[test]
fn a_status_claiming_an_easier_chain_than_the_spec_asked_for_is_failed_invalid_result() {
    // A status writer sets what was "admitted" to 1 block at difficulty 1, and
    // records a real 1-block chain of that difficulty: it must not pass.
    let mut forged = with_status(workflow(20, 3), WorkflowPhase::Succeeded, mined_blocks(1, 1));
    let status = forged.status.as_mut().unwrap();
    (status.admitted_difficulty, status.admitted_blocks) = (Some(1), Some(1));
    let answer = outcome(&forged, at(20));
    assert_eq!(answer.status, OutcomeStatus::Failed, "{answer:?}");
    assert_eq!(answer.reason.as_deref(), Some(reasons::INVALID_RESULT));
    assert!(answer.error.unwrap().contains("the workflow asked for 20"));
    assert_eq!(
        answer.details.progress,
        Some(Progress { blocks_done: 1, blocks_total: 3 }),
        "progress is against the spec"
    );
    // Without the admitted values the chain itself is too short and too easy.
    let status = forged.status.as_mut().unwrap();
    (status.admitted_difficulty, status.admitted_blocks) = (None, None);
    assert_eq!(outcome(&forged, at(20)).status, OutcomeStatus::Failed);
}

#[test]
fn attempts_that_are_not_nonce_plus_one_are_failed_invalid_result() {
    let mut blocks = mined_blocks(8, 2);
    blocks[0].attempts = 1;
    let answer = outcome(&with_status(workflow(8, 2), WorkflowPhase::Succeeded, blocks), at(20));
    assert_eq!(answer.status, OutcomeStatus::Failed);
    assert!(answer.error.unwrap().contains("attempts"), "names what is wrong");
}

#[test]
fn succeeded_status_missing_a_block_is_not_called_complete() {
    let answer = outcome(&with_status(workflow(8, 3), WorkflowPhase::Succeeded, mined_blocks(8, 2)), at(20));
    assert_eq!(answer.status, OutcomeStatus::Failed);
}

#[test]
fn mining_workflow_is_running_with_progress_and_instructions() {
    let answer = outcome(&with_status(workflow(8, 4), WorkflowPhase::Mining, mined_blocks(8, 2)), at(13));
    assert_eq!(answer.status, OutcomeStatus::Running);
    assert_eq!(answer.details.progress, Some(Progress { blocks_done: 2, blocks_total: 4 }));
    assert_eq!(answer.status_message, "Mined 2 of 4 blocks; mining block 3");
    let next = answer.next.unwrap();
    assert!(next.contains("get_mining_result") && next.contains("mw-aaaaaaaaaaaaaaaaaaaaaaaaaa"), "{next}");
}

#[test]
fn failed_workflow_carries_the_operators_reason_and_words() {
    let mut workflow = with_status(workflow(8, 4), WorkflowPhase::Failed, mined_blocks(8, 1));
    let status = workflow.status.as_mut().unwrap();
    status.message = Some("block 2: Job failed: BackoffLimitExc…".into());
    status.conditions.push(ready(reasons::JOB_FAILED, "block 2: Job failed: BackoffLimitExceeded"));
    let answer = outcome(&workflow, at(30));
    assert_eq!(answer.status, OutcomeStatus::Failed);
    assert_eq!(answer.reason.as_deref(), Some("JobFailed"));
    assert_eq!(answer.error.as_deref(), Some("block 2: Job failed: BackoffLimitExceeded"));
    assert_eq!(answer.poll_after_seconds, None);
}

#[test]
fn cancelled_workflow_and_a_pending_cancel_read_differently() {
    let cancelled =
        outcome(&with_status(workflow(8, 4), WorkflowPhase::Cancelled, mined_blocks(8, 1)), at(30));
    assert_eq!(cancelled.status, OutcomeStatus::Cancelled);
    assert_eq!(cancelled.status_message, "Cancelled after mining 1 of 4 blocks");

    let mut requested = with_status(workflow(8, 4), WorkflowPhase::Mining, mined_blocks(8, 1));
    requested.spec.cancel = true;
    let answer = outcome(&requested, at(30));
    assert_eq!(answer.status, OutcomeStatus::Running);
    assert!(answer.status_message.starts_with("Cancel requested"), "{}", answer.status_message);
}

#[test]
fn queued_workflow_says_so() {
    let mut queued = with_status(workflow(8, 1), WorkflowPhase::Pending, vec![]);
    let mut condition = ready(reasons::QUEUED, "3 workflows are mining (limit 3)");
    condition.type_ = condition_types::ADMITTED.into();
    queued.status.as_mut().unwrap().conditions.push(condition);
    let answer = outcome(&queued, at(5));
    assert_eq!(answer.status_message, "Queued: 3 workflows are mining (limit 3)");
    assert_eq!(outcome(&workflow(8, 1), at(5)).status_message, "Accepted; mining has not started yet");
    assert_eq!(
        outcome(&workflow(8, 1), at(5)).details.progress,
        Some(Progress { blocks_done: 0, blocks_total: 1 })
    );
}

#[test]
fn a_workflow_that_yielded_its_slot_says_what_it_mined_and_that_it_waits() {
    let mut yielded = with_status(workflow(8, 3), WorkflowPhase::Pending, mined_blocks(8, 1));
    let text = "queued: yielded its slot after block 1/3 to a workflow that waited";
    let mut condition = ready(reasons::YIELDED, text);
    condition.type_ = condition_types::ADMITTED.into();
    yielded.status.as_mut().unwrap().conditions.push(condition);
    let answer = outcome(&yielded, at(30));
    assert_eq!(answer.status, OutcomeStatus::Running);
    assert_eq!(answer.status_message, format!("Mined 1 of 3 blocks; {text}"));
    assert_eq!(answer.details.progress, Some(Progress { blocks_done: 1, blocks_total: 3 }));
}

#[test]
fn poll_after_estimates_the_remaining_work_from_mined_blocks() {
    // Blocks took 1 and 2 s (mean 1.5 → 1); 3 remain; the last finished at t=13.
    let workflow = with_status(workflow(8, 5), WorkflowPhase::Mining, mined_blocks(8, 2));
    assert_eq!(poll_after_seconds(&workflow, at(13)), 3);
    assert_eq!(poll_after_seconds(&workflow, at(15)), 1);
}

#[test]
fn poll_after_grows_with_age_before_any_block_and_stays_within_bounds() {
    let fresh = workflow(20, 4);
    assert_eq!(poll_after_seconds(&fresh, at(0)), 1);
    assert_eq!(poll_after_seconds(&fresh, at(20)), 10);
    assert_eq!(poll_after_seconds(&fresh, at(100_000)), 60);
    assert_eq!(poll_after_seconds(&fresh, at(-50)), 1);
}

#[test]
fn not_found_names_the_way_out() {
    let answer = MiningOutcome::not_found("whatever");
    assert_eq!(answer.status, OutcomeStatus::NotFound);
    assert!(answer.next.unwrap().contains("list_mining_workflows"));
}

#[test]
fn text_rendering_leads_with_status_and_id() {
    let answer = outcome(&with_status(workflow(8, 2), WorkflowPhase::Mining, vec![]), at(1));
    assert!(
        answer.to_text().starts_with("[running] mw-aaaaaaaaaaaaaaaaaaaaaaaaaa: "),
        "{}",
        answer.to_text()
    );
}

fn arbitrary_block() -> impl Strategy<Value = MinedBlock> {
    (
        any::<u32>(),
        any::<u64>(),
        ".{0,70}",
        any::<u64>(),
        proptest::option::of(any::<i32>()),
        proptest::option::of(any::<i32>()),
    )
        .prop_map(|(index, nonce, hash, attempts, start, end)| MinedBlock {
            index,
            nonce,
            hash,
            attempts,
            minimality_checked: false,
            job_name: "j".into(),
            started_at: start.map(|s| Time(at(i64::from(s)))),
            finished_at: end.map(|e| Time(at(i64::from(e)))),
        })
}

fn arbitrary_phase() -> impl Strategy<Value = Option<WorkflowPhase>> {
    proptest::option::of(proptest::sample::select(WorkflowPhase::ALL.to_vec()))
}

proptest! {
    /// Whatever status the API server hands over, the mapping answers within its bounds.
    #[test]
    fn any_status_maps_without_panicking(
        difficulty in any::<u32>(),
        blocks in any::<u32>(),
        admitted in proptest::option::of(any::<u32>()),
        phase in arbitrary_phase(),
        recorded in proptest::collection::vec(arbitrary_block(), 0..6),
        now in any::<i32>(),
    ) {
        let mut workflow = workflow(difficulty, blocks);
        workflow.status = Some(MiningWorkflowStatus { phase, blocks: recorded, admitted_blocks: admitted, ..Default::default() });
        let answer = outcome(&workflow, at(i64::from(now)));
        let progress = answer.details.progress.unwrap();
        prop_assert!(progress.blocks_done <= progress.blocks_total);
        if let Some(wait) = answer.poll_after_seconds {
            prop_assert!((1..=MAX_POLL_AFTER_SECONDS).contains(&wait));
        }
        prop_assert_eq!(answer.details.result.is_some(), answer.status == OutcomeStatus::Completed);
    }
}

#[test]
fn with_no_operator_an_unfinished_workflow_says_nobody_is_working_and_a_finished_one_is_unchanged() {
    let pending = workflow(8, 2);
    let plain = outcome(&pending, at(20));
    // Known to lead, or unknown: the answer is the plain one.
    assert_eq!(plain.clone().with_operator(Presence::Leading), plain);
    assert_eq!(plain.clone().with_operator(Presence::Unknown), plain);
    // None leads: still running (the work is recorded), and it says so.
    let absent = plain.clone().with_operator(Presence::Absent { since: Some(at(5)) });
    assert_eq!(absent.status, OutcomeStatus::Running);
    assert_eq!(absent.reason.as_deref(), Some(NO_OPERATOR));
    assert!(absent.status_message.starts_with(&plain.status_message), "{}", absent.status_message);
    assert!(
        absent.status_message.contains("No operator is running since 2027-01-15T08:00:05Z"),
        "{}",
        absent.status_message
    );
    assert_eq!((&absent.next, absent.poll_after_seconds), (&plain.next, plain.poll_after_seconds));
    let never = plain.clone().with_operator(Presence::Absent { since: None });
    assert!(never.status_message.contains("No operator is running:"), "{}", never.status_message);
    // Finished work needs no operator.
    let done = with_status(workflow(8, 2), WorkflowPhase::Succeeded, mined_blocks(8, 2));
    let completed = outcome(&done, at(20));
    assert_eq!(completed.status, OutcomeStatus::Completed);
    assert_eq!(completed.clone().with_operator(Presence::Absent { since: None }), completed);
}
