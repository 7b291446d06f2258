//! Fair share at the node (issue #69): a budget larger than the cluster
//! runs, another namespace's Pods queued at a full node, a newcomer.

use std::time::Duration;

use super::*;
use crate::admission::node::{
    GIVE_WAY_AFTER, GiveWay, full, gives_way, kept_by_nodes, node_victims, owed_at_node,
};

const DELAY: Duration = Duration::from_secs(60);

/// Work holding a slot in `namespace`, its Pods waiting for a node since
/// `waiting` (`None`: running).
fn holding(namespace: &str, name: &str, admitted: i64, waiting: Option<i64>) -> Seen {
    let mut seen = seen_in(namespace, None, name, admitted, Lifecycle::Active);
    seen.work.waiting_for_node = waiting.map(at);
    seen
}

/// The cluster in miniature: "busy" holds every slot of 6, 2 of
/// its workflows running on the full node and 4 waiting there.
fn busy_node() -> Vec<Seen> {
    let mut all: Vec<Seen> = (0..2).map(|i| holding("busy", &format!("run-{i}"), i, None)).collect();
    all.extend((2..6).map(|i| holding("busy", &format!("wait-{i}"), i, Some(i + 1))));
    all
}

#[test]
fn a_full_node_is_work_holding_a_slot_that_waits_for_one() {
    let mut all = busy_node();
    assert!(full(&all));
    all.retain(|s| s.work.waiting_for_node.is_none());
    assert!(!full(&all), "only running work: the nodes may have room");
}

#[test]
fn work_waiting_for_a_node_gives_its_slot_back_after_the_bound() {
    let all = busy_node();
    let me = &all[2].work;
    let bounded = budget(6).giving_back_after(Duration::from_secs(300));
    assert_eq!(gives_way(&all, me, at(3), &bounded, at(302)), None, "299 s: it keeps waiting");
    assert_eq!(
        gives_way(&all, me, at(3), &bounded, at(303)),
        Some(GiveWay::Bound { waited: Duration::from_secs(300) })
    );
    assert_eq!(gives_way(&all, me, at(3), &budget(6), at(100_000)), None, "no bound set: it waits");
}

#[test]
fn a_newcomer_below_its_share_at_the_node_makes_every_waiting_pod_above_it_give_way() {
    let mut all = busy_node();
    // Every slot taken: the newcomer queues, and what "busy" has waiting
    // at the node would be served before the newcomer's Pod there.
    all.push(seen_in("new", Some("carol"), "call", 100, Lifecycle::Waiting));
    for waiting in &all[2..6] {
        assert_eq!(gives_way(&all, &waiting.work, at(3), &budget(6), at(101)), Some(GiveWay::ToLess));
    }
    // Work of the newcomer's own group never makes it give way, nor does
    // a group running as much.
    let mut alone = busy_node();
    alone.push(seen_in("busy", None, "more", 100, Lifecycle::Waiting));
    assert_eq!(gives_way(&alone, &alone[2].work, at(3), &budget(6), at(101)), None);
    // A waiting newcomer whose slot is free takes that slot: nothing to give way for.
    assert_eq!(gives_way(&all, &all[2].work, at(3), &budget(7), at(101)), None);
}

#[test]
fn a_full_node_keeps_a_group_running_no_less_from_piling_pods_on_it() {
    let mut all = busy_node();
    all.push(seen_in("busy", None, "more", 100, Lifecycle::Waiting));
    all.push(seen_in("new", Some("carol"), "call", 100, Lifecycle::Waiting));
    let more = kept_by_nodes(&all, &all[6].work, at(100)).expect("its own group waits at the node first");
    assert_eq!((more.binding, more.ahead, more.taken), (Limit::Nodes, 4, 2));
    assert!(!more.admits());
    assert!(more.queued_message("workflows are mining").contains("waiting for a node"));
    assert_eq!(kept_by_nodes(&all, &all[7].work, at(100)), None, "the newcomer runs less than every waiter");
    // A busy node, not a full one: its waiters waited less than GIVE_WAY_AFTER.
    let soon = at(3 + GIVE_WAY_AFTER.as_secs() as i64 - 1);
    assert_eq!(kept_by_nodes(&all, &all[6].work, soon), None, "Pods waiting seconds keep nobody");
    let later = at(3 + GIVE_WAY_AFTER.as_secs() as i64);
    assert_eq!(kept_by_nodes(&all, &all[6].work, later).map(|s| s.ahead), Some(1), "the oldest waiter now");
    // A group running fewer waits for a node: that keeps the others at
    // once, so no Pod of theirs queues ahead of it for the spot a victim frees.
    let mut fewer = all.clone();
    fewer.push(holding("new", "waits", 11, Some(11)));
    assert_eq!(
        kept_by_nodes(&fewer, &fewer[6].work, soon).map(|s| s.ahead),
        Some(1),
        "its wait counts at once"
    );
    assert_eq!(kept_by_nodes(&fewer, &fewer[6].work, at(100)).map(|s| s.ahead), Some(5));
    // Nodes with room: nothing kept.
    all.retain(|s| s.work.waiting_for_node.is_none());
    assert_eq!(kept_by_nodes(&all, &all[2].work, at(100)), None);
}

#[test]
fn a_newcomer_waiting_for_a_node_takes_one_running_slot_back_after_the_delay() {
    let mut all: Vec<Seen> = (0..2).map(|i| holding("busy", &format!("run-{i}"), i, None)).collect();
    all.push(holding("new", "call", 100, Some(101)));
    let head = all[2].work.clone();
    let preempting = budget(6).preempting_after(DELAY);
    assert!(node_victims(&all, &head, at(101), &preempting, at(160)).is_empty(), "59 s: not yet");
    let victims: Vec<&str> =
        node_victims(&all, &head, at(101), &preempting, at(161)).iter().map(|v| v.name.as_str()).collect();
    assert_eq!(victims, ["run-1", "run-0"], "the latest admitted first (the least of its step lost)");
    assert!(node_victims(&all, &head, at(101), &budget(6), at(100_000)).is_empty(), "no delay set: never");
    // What each running workflow hears: a spot is owed, taken now after the delay.
    assert_eq!(owed_at_node(&all, &all[0].work, &preempting, at(130)), Some(false));
    assert_eq!(owed_at_node(&all, &all[0].work, &preempting, at(161)), Some(true));
    assert_eq!(yield_for(&all, &all[1].work, &preempting, at(161)), Yield::Now);
    assert_eq!(yield_for(&all, &all[1].work, &preempting, at(130)), Yield::AtBlockBoundary);
    // The newcomer running as much as each other group: nothing owed.
    all[2].work.waiting_for_node = None;
    assert_eq!(owed_at_node(&all, &all[0].work, &preempting, at(161)), None);
    assert_eq!(yield_for(&all, &all[0].work, &preempting, at(161)), Yield::Keep);
}

#[test]
fn work_admitted_after_the_waiter_began_to_wait_is_not_taken_back() {
    // Its turn, not a debt (`may_take_back`): no spot handed to and fro.
    let mut all = vec![holding("busy", "late", 200, None), holding("new", "call", 100, Some(101))];
    let head = all[1].work.clone();
    let preempting = budget(6).preempting_after(DELAY);
    assert!(node_victims(&all, &head, at(101), &preempting, at(300)).is_empty());
    all[0].work.admitted = Some(at(50));
    assert_eq!(node_victims(&all, &head, at(101), &preempting, at(300)).len(), 1);
    // A tool run that is not preemptible keeps its slot.
    all[0].work.preemptible = false;
    assert!(node_victims(&all, &head, at(101), &preempting, at(300)).is_empty());
}

#[test]
fn a_slot_taken_while_the_waiters_step_ran_may_be_taken_back_once_it_waits() {
    // The waiter was admitted at 100 and ran a block; "busy" took its
    // slot at 150; the waiter's next block waits for a node from 200.
    let all = vec![holding("busy", "mid", 150, None), holding("new", "call", 100, Some(200))];
    let preempting = budget(6).preempting_after(DELAY);
    let victims = node_victims(&all, &all[1].work, at(200), &preempting, at(260));
    assert_eq!(victims.len(), 1, "it began to wait at 200, after the slot was taken");
}

#[test]
fn within_one_namespace_the_parties_are_compared() {
    // The cluster test's shape: the direct creators ("") run 2 and wait at
    // the node with 4; an MCP caller of the same namespace is a newcomer.
    let mut all: Vec<Seen> = (0..2).map(|i| holding("busy", &format!("run-{i}"), i, None)).collect();
    all.extend((2..6).map(|i| holding("busy", &format!("wait-{i}"), i, Some(i + 1))));
    all.push(seen_in("busy", Some("carol"), "call", 100, Lifecycle::Waiting));
    assert_eq!(kept_by_nodes(&all, &all[6].work, at(100)), None, "carol runs less than the direct creators");
    assert_eq!(gives_way(&all, &all[2].work, at(3), &budget(6), at(101)), Some(GiveWay::ToLess));
    all.push(seen_in("busy", None, "more", 100, Lifecycle::Waiting));
    assert!(
        kept_by_nodes(&all, &all[7].work, at(100)).is_some(),
        "the direct creators' own waiters go first"
    );
}

#[test]
fn a_pod_that_waited_only_moments_does_not_give_way_yet() {
    let mut all = busy_node();
    all.push(seen_in("new", Some("carol"), "call", 100, Lifecycle::Waiting));
    // "busy"'s waiter began to wait at 95: a busy node, not yet a full one.
    assert_eq!(gives_way(&all, &all[2].work, at(95), &budget(6), at(101)), None);
    assert_eq!(gives_way(&all, &all[2].work, at(95), &budget(6), at(105)), Some(GiveWay::ToLess));
}
