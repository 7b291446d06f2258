//! `plan` against anything the API server can hand it: every spec and status
//! the CRD schema admits, any Job states, any clock.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use mining_api::bounds::{MAX_DURATION_SECONDS, MAX_STORED_INTEGER};
use mining_api::{MinedBlock, MiningWorkflowStatus, WorkflowPhase};
use proptest::prelude::*;

use super::*;
use crate::testing::workflow;

fn time() -> impl Strategy<Value = Time> {
    // Any instant jiff can hold: years -9999 to 9999.
    (-377_705_116_800i64..=253_402_300_799i64).prop_map(|s| Time(Timestamp::from_second(s).unwrap()))
}

fn phase() -> impl Strategy<Value = Option<WorkflowPhase>> {
    proptest::option::of(proptest::sample::select(WorkflowPhase::ALL.to_vec()))
}

fn block(index: u32) -> impl Strategy<Value = MinedBlock> {
    (0..=MAX_STORED_INTEGER, "[0-9A-F]{64}", proptest::option::of(time()), proptest::option::of(time()))
        .prop_map(move |(nonce, hash, started_at, finished_at)| MinedBlock {
            index,
            nonce,
            hash,
            attempts: nonce.saturating_add(1),
            minimality_checked: false,
            job_name: format!("j-b{index}"),
            started_at,
            finished_at,
        })
}

fn job() -> impl Strategy<Value = BlockJob> {
    prop_oneof![
        Just(BlockJob::Running),
        (proptest::option::of(".{0,80}"), proptest::option::of(time()), proptest::option::of(time()))
            .prop_map(|(message, started, finished)| BlockJob::Succeeded { message, started, finished }),
        (".{0,20}", ".{0,80}").prop_map(|(reason, message)| BlockJob::Failed { reason, message }),
    ]
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    difficulty: u32,
    blocks: u32,
    ttl: Option<i64>,
    deadline: Option<i64>,
    cancel: bool,
    phase: Option<WorkflowPhase>,
    recorded: Vec<MinedBlock>,
    times: (Option<Time>, Option<Time>),
    admitted: Option<(u32, u32)>,
) -> MiningWorkflow {
    let mut wf = workflow("prop", difficulty, blocks);
    wf.spec.ttl_seconds_after_finished = ttl;
    wf.spec.active_deadline_seconds = deadline;
    wf.spec.cancel = cancel;
    wf.status = Some(MiningWorkflowStatus {
        phase,
        blocks: recorded,
        started_at: times.0,
        finished_at: times.1,
        admitted_difficulty: admitted.map(|a| a.0),
        admitted_blocks: admitted.map(|a| a.1),
        ..Default::default()
    });
    wf
}

fn observed_workflow() -> impl Strategy<Value = MiningWorkflow> {
    (
        (1u32..=64, 1u32..=64),
        (proptest::option::of(0..=MAX_DURATION_SECONDS), proptest::option::of(1..=MAX_DURATION_SECONDS)),
        (any::<bool>(), phase()),
        (0u32..=8).prop_flat_map(|n| (1..=n).map(block).collect::<Vec<_>>()),
        (proptest::option::of(time()), proptest::option::of(time())),
        proptest::option::of((1u32..=64, 1u32..=64)),
    )
        .prop_map(
            |((difficulty, blocks), (ttl, deadline), (cancel, phase), recorded, times, admitted)| {
                assemble(difficulty, blocks, ttl, deadline, cancel, phase, recorded, times, admitted)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn plan_never_panics_and_never_plans_a_second_job_for_a_block(
        wf in observed_workflow(),
        jobs in proptest::collection::btree_map(1u32..=70, job(), 0..6),
        others_mining in 0usize..200,
        queued_ahead in 0usize..200,
        now in time(),
        default_ttl_seconds in 0..=MAX_DURATION_SECONDS as u64,
    ) {
        let limits = Limits { max_difficulty: 40, max_blocks: 64, max_concurrent_workflows: 50, max_concurrent_tool_runs: 20, max_concurrent_work: None, max_tool_runs_per_caller: 5, max_work_per_namespace: 0, preempt_after_seconds: 60, capacity_wait_seconds: 300, default_ttl_seconds, minimality_check_budget: 1 << 20, max_parallelism: 8, nonce_range_size: None, pod_start_timeout_seconds: 600 };
        let observed = Observed { workflow: &wf, jobs: jobs.clone(), ranges: BTreeMap::new(), slots: crate::admission::Slots { taken: others_mining, limit: 50, ahead: queued_ahead, binding: crate::admission::Limit::Kind }, yielding: crate::admission::Yield::Keep, waiting_for_node: None, give_way: None, now: now.0 };
        let plan = plan(&observed, &limits);
        let created: Vec<u32> = plan.actions.iter().filter_map(|a| match a {
            Action::CreateJob { block, .. } => Some(*block),
            _ => None,
        }).collect();
        prop_assert!(created.len() <= 1, "one Job at a time: {created:?}");
        let recorded = wf.status.as_ref().map_or(0, |s| s.blocks.len() as u32);
        for block in created {
            prop_assert!(!jobs.contains_key(&block), "a second Job for block {block}");
            prop_assert!(block > recorded, "a Job for recorded block {block}");
        }
        if let Some(after) = plan.requeue_after {
            prop_assert!(after <= MAX_REQUEUE);
        }
        let stored: BTreeMap<u32, u64> = plan.status.blocks.iter().map(|b| (b.index, b.nonce)).collect();
        prop_assert!(stored.values().all(|n| *n <= MAX_STORED_INTEGER), "only storable nonces are recorded");
    }
}
