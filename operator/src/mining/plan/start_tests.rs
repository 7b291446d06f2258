//! A block whose Pods cannot start (`BlockJob::Blocked`): it fails at once
//! when the cause cannot clear, waits with the cause in its message within
//! the bound, fails after it, and waits for full nodes without one.

use super::*;
use crate::admission::{Limit, Slots, Yield};
use crate::naming::block_job_name;
use crate::testing::{at, workflow};
use mining_api::pod_start::{Blocked, Cause, reasons as start};

fn limits() -> Limits {
    let mut limits = <crate::config::Config as clap::Parser>::parse_from(["operator"]).limits;
    limits.pod_start_timeout_seconds = 60;
    limits
}

fn observe(wf: &MiningWorkflow, job: Option<BlockJob>, now: Timestamp) -> Plan {
    let observed = Observed {
        workflow: wf,
        jobs: job.map(|job| (1, job)).into_iter().collect(),
        ranges: BTreeMap::new(),
        slots: Slots { taken: 0, limit: 2, ahead: 0, binding: Limit::Kind },
        yielding: Yield::Keep,
        waiting_for_node: None,
        give_way: None,
        now,
    };
    plan(&observed, &limits())
}

/// A workflow mining its first block (its start written at 0).
fn mining() -> MiningWorkflow {
    let mut wf = workflow("w", 8, 2);
    let first = observe(&wf, None, at(0));
    wf.status = Some(first.status);
    wf
}

fn blocked(cause: Cause, since: i64) -> BlockJob {
    BlockJob::Blocked(Blocked::new(cause, "what the cluster said", at(since)))
}

fn ready(plan: &Plan) -> &mining_api::Condition {
    plan.status.conditions.iter().find(|c| c.type_ == condition_types::READY).unwrap()
}

#[test]
fn a_refused_pod_fails_the_block_at_once_and_deletes_its_job() {
    let wf = mining();
    let plan = observe(&wf, Some(blocked(Cause::Refused, 1)), at(4));
    assert_eq!(plan.status.phase, Some(WorkflowPhase::Failed));
    assert_eq!(ready(&plan).reason, start::CANNOT_START);
    assert!(ready(&plan).message.contains("the cluster refuses its Pod: what the cluster said"), "{plan:?}");
    let job = block_job_name("w", wf.metadata.uid.as_deref().unwrap(), 1);
    assert!(plan.actions.contains(&Action::DeleteJob { name: job }), "{:?}", plan.actions);
    assert!(plan.events.iter().any(|e| e.warning && e.reason == start::CANNOT_START));
}

#[test]
fn a_pull_back_off_is_said_within_the_bound_and_fails_after_it() {
    let wf = mining();
    let waiting = observe(&wf, Some(blocked(Cause::ImagePull, 1)), at(11));
    assert_eq!(waiting.status.phase, Some(WorkflowPhase::Mining), "it keeps its slot");
    let message = waiting.status.message.clone().unwrap();
    assert!(message.starts_with("mining block 1/2: waiting for its image to be pulled"), "{message}");
    assert!(waiting.actions.is_empty());
    assert!(waiting.requeue_after.is_some_and(|after| after <= Duration::from_secs(5)));
    assert_eq!(waiting.events.iter().filter(|e| e.reason == start::WAITING_TO_START).count(), 1);
    // Said once: the next look, the wait already written, makes no Event.
    let mut written = wf.clone();
    written.status = Some(waiting.status.clone());
    let again = observe(&written, Some(blocked(Cause::ImagePull, 1)), at(16));
    assert!(again.events.is_empty(), "{:?}", again.events);
    // Past the bound (60 s since the Pod was made): failed, the Job deleted.
    let ended = observe(&written, Some(blocked(Cause::ImagePull, 1)), at(61));
    assert_eq!(ended.status.phase, Some(WorkflowPhase::Failed));
    assert_eq!(ready(&ended).reason, start::START_TIMED_OUT);
    assert!(matches!(ended.actions.as_slice(), [Action::DeleteJob { .. }]), "{:?}", ended.actions);
}

#[test]
fn full_nodes_are_waited_for_without_a_bound_and_a_cleared_cause_mines_on() {
    let wf = mining();
    let full = observe(&wf, Some(blocked(Cause::NoCapacity, 1)), at(100_000));
    assert_eq!(full.status.phase, Some(WorkflowPhase::Mining));
    assert!(full.status.message.unwrap().contains("waiting for room on the cluster's nodes"));
    let mut written = wf.clone();
    written.status = Some(observe(&wf, Some(blocked(Cause::Quota, 1)), at(5)).status);
    let cleared = observe(&written, Some(BlockJob::Running), at(9));
    assert_eq!(cleared.status.message.as_deref(), Some("mining block 1/2"));
    assert_eq!(
        cleared.status.conditions.iter().find(|c| c.type_ == condition_types::MINING).unwrap().reason,
        reasons::BLOCK_STARTED
    );
}

#[test]
fn a_block_waiting_for_a_node_says_since_when_and_gives_way_without_losing_anything() {
    use crate::admission::node::GiveWay;
    let mut wf = workflow("w", 8, 3);
    let first = observe(&wf, None, at(0));
    wf.status = Some(first.status);
    // Block 1 mined; block 2's Pod waits for a node since 20.
    let mut status = wf.status.clone().unwrap();
    status.blocks.push(MinedBlock {
        index: 1,
        nonce: 1,
        hash: "00AB".into(),
        attempts: 2,
        minimality_checked: true,
        job_name: "j".into(),
        started_at: None,
        finished_at: None,
    });
    wf.status = Some(status);
    let waiting_plan_at = |wf: &MiningWorkflow, give_way, now| {
        let observed = Observed {
            workflow: wf,
            jobs: [(2, blocked(Cause::NoCapacity, 20))].into_iter().collect(),
            ranges: BTreeMap::new(),
            slots: Slots::OPEN,
            yielding: Yield::Keep,
            waiting_for_node: Some(at(20)),
            give_way,
            now,
        };
        plan(&observed, &limits())
    };
    let said_after = pod_start::NODE_WAIT_SAID_AFTER.as_secs() as i64;
    let waiting_plan = |wf: &MiningWorkflow, give_way| waiting_plan_at(wf, give_way, at(20 + said_after));
    // A wait shorter than that is a busy node's normal: not said, and looked
    // at again when it would be.
    let quiet = waiting_plan_at(&wf, None, at(30));
    assert_eq!(quiet.status.waiting_for_node_since, None);
    assert!(
        quiet.status.message.as_deref().is_some_and(|m| !m.contains("waiting")),
        "{:?}",
        quiet.status.message
    );
    assert!(quiet.events.is_empty(), "{:?}", quiet.events);
    assert_eq!(quiet.requeue_after, Some(Duration::from_secs((said_after - 10) as u64)));
    let waiting = waiting_plan(&wf, None);
    assert!(
        waiting
            .status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("waiting for room on the cluster's nodes")),
        "{:?}",
        waiting.status.message
    );
    assert!(waiting.events.iter().any(|e| e.reason == pod_start::reasons::WAITING_TO_START));
    assert_eq!(waiting.status.phase, Some(WorkflowPhase::Mining));
    assert_eq!(
        waiting.status.waiting_for_node_since,
        Some(Time(at(20))),
        "said once it lasted, since its Pod's creation"
    );
    // Its Pod replaced (a new one, waiting seconds): the wait said before is taken back.
    let mut said = wf.clone();
    said.status = Some(waiting.status.clone());
    let replaced = Observed {
        workflow: &said,
        jobs: [(2, blocked(Cause::NoCapacity, 100))].into_iter().collect(),
        ranges: BTreeMap::new(),
        slots: Slots::OPEN,
        yielding: Yield::Keep,
        waiting_for_node: Some(at(100)),
        give_way: None,
        now: at(105),
    };
    let replaced = plan(&replaced, &limits());
    assert_eq!(replaced.status.message.as_deref(), Some("mining block 2/3"));
    let mining = replaced.status.conditions.iter().find(|c| c.type_ == condition_types::MINING).unwrap();
    assert_eq!(mining.reason, reasons::BLOCK_STARTED);
    assert_eq!(replaced.status.waiting_for_node_since, None);
    assert!(replaced.events.is_empty(), "{:?}", replaced.events);
    let gave = waiting_plan(&wf, Some(GiveWay::ToLess));
    assert_eq!(gave.status.phase, Some(WorkflowPhase::Pending), "back in the queue");
    assert_eq!(gave.status.waiting_for_node_since, None, "holding no slot, it waits for none");
    assert_eq!(gave.status.blocks.len(), 1, "the mined block is kept");
    assert_eq!(gave.status.preemptions, None, "its block never ran: no preemption counted");
    let admitted = gave.status.conditions.iter().find(|c| c.type_ == condition_types::ADMITTED).unwrap();
    assert_eq!((admitted.status, admitted.reason.as_str()), (ConditionStatus::False, reasons::NO_CAPACITY));
    assert!(admitted.message.starts_with("no capacity: requeued"), "{}", admitted.message);
    let job = block_job_name("w", wf.metadata.uid.as_deref().unwrap(), 2);
    assert_eq!(gave.actions, vec![Action::DeleteJob { name: job }]);
    assert!(gave.events.iter().any(|e| e.reason == reasons::NO_CAPACITY));
}
