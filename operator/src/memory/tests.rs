use mining_api::testing::workflow;
use mining_api::{MiningWorkflowStatus, WorkflowPhase};

use super::*;

#[test]
fn the_last_written_status_wins_over_a_stale_cache_until_forgotten() {
    let cached = workflow("w", 8, 2);
    let status = MiningWorkflowStatus { phase: Some(WorkflowPhase::Mining), ..Default::default() };
    let memory = Memory::default();
    memory.remember(&cached, &status, Some("42".into()));
    let fresh = memory.freshest(&cached);
    assert_eq!(fresh.phase(), WorkflowPhase::Mining);
    assert_eq!(fresh.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(memory.written_standings()["uid-w"].phase, mining_api::Lifecycle::Active);
    memory.forget(&cached);
    assert_eq!(memory.freshest(&cached).phase(), WorkflowPhase::Pending);
}

#[test]
fn a_tool_runs_written_status_wins_over_a_stale_cache_as_a_workflows_does() {
    let cached = mining_api::testing::tool_run("r", "sum");
    let status = mining_api::ToolRunStatus {
        phase: Some(mining_api::ToolRunPhase::Running),
        job_uid: Some("job".into()),
        ..Default::default()
    };
    let memory = Memory::default();
    memory.remember(&cached, &status, Some("7".into()));
    let fresh = memory.freshest(&cached);
    assert_eq!(fresh.status.as_ref().and_then(|s| s.job_uid.as_deref()), Some("job"));
    assert_eq!(fresh.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(
        memory.written_standings()[cached.metadata.uid.as_deref().unwrap()].phase,
        mining_api::Lifecycle::Active
    );
    // Another kind's entry is never read back as this kind's status.
    let workflow = workflow("w", 8, 2);
    memory.remember(&workflow, &MiningWorkflowStatus::default(), None);
    assert_eq!(memory.freshest(&cached).status.and_then(|s| s.job_uid), Some("job".into()));
}

#[test]
fn old_written_statuses_are_swept_as_the_map_grows() {
    let written = |at| Written {
        status: Box::new(()),
        resource_version: None,
        standing: Standing { phase: mining_api::Lifecycle::Active, admitted: None },
        at,
    };
    let mut all = WrittenStatuses::default();
    let kept = Duration::from_secs(60);
    for i in 0..WRITTEN_SWEEP_FLOOR - 1 {
        all.insert(format!("old-{i}"), written(Instant::now()), kept);
    }
    assert_eq!(all.by_uid.len(), WRITTEN_SWEEP_FLOOR - 1, "nothing swept below the floor");
    all.insert("recent".into(), written(Instant::now()), kept);
    // Everything here is older than a zero retention: the next insert sweeps.
    all.insert("new".into(), written(Instant::now()), Duration::ZERO);
    let mut left: Vec<&String> = all.by_uid.keys().collect();
    left.sort();
    assert_eq!(left, ["new"], "the old ones went, the new one stays");
    assert_eq!(all.sweep_at, 0, "the next sweep waits for the floor again");
}

#[test]
fn a_preemption_request_is_taken_once_and_bounded() {
    let memory = Memory::default();
    assert!(!memory.take_preemption_request("u"), "nobody asked");
    memory.request_preemption("u");
    assert!(memory.take_preemption_request("u"));
    assert!(!memory.take_preemption_request("u"), "taken once");
    for i in 0..=MAX_PREEMPTION_REQUESTS {
        memory.request_preemption(&format!("w{i}"));
    }
    assert!(lock(&memory.preemption_requests).len() <= MAX_PREEMPTION_REQUESTS);
}

#[test]
fn a_reservation_counts_until_dropped() {
    let memory = Memory::default();
    let key = |kind, namespace: &str, party: &str| InFlightKey {
        kind,
        namespace: namespace.into(),
        party: party.into(),
    };
    let (workflow, run) =
        (WorkKind::of::<mining_api::MiningWorkflow>(), WorkKind::of::<mining_api::ToolRun>());
    let counted = |all, kind, party, namespace| Taken { all, kind, party, namespace };
    let (seen, first) = memory.reserve_admission(key(workflow, "a", "alice"), |in_flight| in_flight);
    assert_eq!(seen, counted(0, 0, 0, 0));
    let (seen, second) = memory.reserve_admission(key(run, "a", "alice"), |in_flight| in_flight);
    assert_eq!(
        seen,
        counted(1, 0, 0, 1),
        "the workflow in flight counts against the budget and the namespace, not the runs' caps"
    );
    let (seen, third) = memory.reserve_admission(key(run, "a", "alice"), |in_flight| in_flight);
    assert_eq!(seen, counted(2, 1, 1, 2), "alice's run in flight counts against her cap");
    let (seen, fourth) = memory.reserve_admission(key(run, "b", "alice"), |in_flight| in_flight);
    assert_eq!(seen, counted(3, 2, 0, 0), "a party is a caller within one namespace");
    drop((first, second, third, fourth));
    assert_eq!(memory.admissions_in_flight(), 0);
    assert!(lock(&memory.admissions_in_flight).is_empty(), "no key is kept once its admissions end");
}

#[test]
fn expected_jobs_are_dropped_once_seen() {
    let memory = Memory::default();
    let expected = ExpectedJob { workflow_uid: "u".into(), block: 2, range: None, created: Instant::now() };
    memory.expect_job("j2".into(), expected.clone());
    assert_eq!(memory.expected_jobs("u", 1, &[]), [("j2".to_string(), expected.clone())]);
    assert!(memory.expected_jobs("other", 1, &[]).is_empty(), "another workflow's");
    assert!(memory.expected_jobs("u", 2, &[]).is_empty(), "its block is verified");
    assert!(memory.expected_jobs("u", 1, &["j2".into()]).is_empty(), "seen in the store");
    assert!(memory.expected_jobs("u", 1, &[]).is_empty(), "and forgotten");
}

#[test]
fn forbidden_is_told_once_per_interval() {
    let memory = Memory::default();
    assert!(memory.should_tell_forbidden("u", 1));
    assert!(!memory.should_tell_forbidden("u", 1));
    assert!(memory.should_tell_forbidden("v", 1));
}

#[test]
fn the_newer_version_is_the_larger_number_else_ours() {
    assert_eq!(newer_version(Some("9".into()), Some("10".into())).as_deref(), Some("10"));
    assert_eq!(newer_version(Some("11".into()), Some("10".into())).as_deref(), Some("11"));
    assert_eq!(newer_version(Some("x".into()), Some("y".into())).as_deref(), Some("y"));
    assert_eq!(newer_version(Some("x".into()), None).as_deref(), Some("x"));
}

#[test]
fn one_sort_of_the_queue_serves_the_waiting_reconciles_until_it_changes() {
    use std::cell::Cell;
    let memory = Memory::default();
    let sorts = Cell::new(0);
    let budget = crate::admission::Budget::new(1);
    let waiting = |names: &[&str]| {
        let all: Vec<crate::admission::Seen> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut workflow = crate::testing::workflow(name, 8, 1);
                workflow.metadata.creation_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::testing::at(i as i64)));
                crate::admission::Seen {
                    work: crate::admission::QueueEntry::of(&workflow),
                    phase: mining_api::Lifecycle::Waiting,
                    party: String::new(),
                }
            })
            .collect();
        sorts.set(sorts.get() + 1);
        crate::admission::queue_positions(&all, &budget)
    };
    for uid in ["uid-a", "uid-b", "uid-c", "uid-a"] {
        memory.queue_positions(uid, || waiting(&["a", "b", "c"]));
    }
    assert_eq!(sorts.get(), 1, "one sort for four waiting reconciles");
    // A workflow the last order does not know, or a change, sorts anew.
    memory.queue_positions("uid-d", || waiting(&["a", "b", "c", "d"]));
    assert_eq!(sorts.get(), 2);
    memory.queue_changed();
    let positions = memory.queue_positions("uid-b", || waiting(&["b", "c", "d"]));
    assert_eq!(sorts.get(), 3);
    let b = crate::testing::workflow("b", 8, 1);
    assert_eq!(positions.ahead_of(&crate::admission::QueueEntry::of(&b)), crate::admission::Place::default());
}

#[test]
fn one_yield_is_decided_at_a_time() {
    let memory = Memory::default();
    let turn = memory.yield_turn().expect("the first asks");
    assert!(memory.yield_turn().is_none(), "a second waits for the first's write");
    drop(turn);
    assert!(memory.yield_turn().is_some());
}

#[test]
fn work_waiting_for_a_node_asks_one_victim_per_wait() {
    let memory = Memory::default();
    let (wait, next_wait) = (crate::testing::at(10), crate::testing::at(400));
    assert!(memory.node_reclaim_due("head", wait, "a"), "the first ask of a wait");
    assert!(memory.node_reclaim_due("head", wait, "a"), "the same victim again, in case a request was lost");
    assert!(!memory.node_reclaim_due("head", wait, "b"), "never a second victim in one wait");
    assert!(memory.node_reclaim_due("other", wait, "b"), "another waiter has its own");
    assert!(
        memory.node_reclaim_due("head", next_wait, "b"),
        "a new wait (after giving its slot back) asks again"
    );
}

#[test]
fn a_node_wait_is_remembered_until_observed_over_and_its_end_is_told_once() {
    let memory = Memory::default();
    let since = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap();
    assert!(!memory.observe_node_wait("a", None), "no wait, nothing ended");
    assert!(!memory.observe_node_wait("a", Some(since)));
    assert_eq!(memory.node_wait("a"), Some(since));
    assert_eq!(memory.node_waits().len(), 1);
    assert!(memory.observe_node_wait("a", None), "its Pods placed: the wait ended");
    assert!(!memory.observe_node_wait("a", None), "told once");
    assert_eq!(memory.node_wait("a"), None);
    memory.observe_node_wait("b", Some(since));
    memory.clear();
    assert_eq!(memory.node_wait("b"), None, "a new term observes again");
}

#[test]
fn node_waits_are_bounded() {
    let memory = Memory::default();
    let since = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap();
    for i in 0..=MAX_NODE_WAITS {
        memory.observe_node_wait(&format!("w-{i}"), Some(since));
    }
    assert!(memory.node_waits().len() <= MAX_NODE_WAITS);
    assert_eq!(memory.node_wait(&format!("w-{MAX_NODE_WAITS}")), Some(since), "the newest is kept");
}
