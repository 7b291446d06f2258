//! The queue's and the budget's rules, table by table.

use std::sync::Arc;
use std::time::Duration;

use super::shares::{OTHER_NAMESPACES, PartyClass};
use super::*;
use crate::testing::{at, workflow};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const WORKFLOW: WorkKind = WorkKind("workflow");
const RUN: WorkKind = WorkKind("tool run");

/// One slot budget that only `total` binds.
fn budget(total: usize) -> Budget {
    Budget::new(total)
}

fn seen_of(kind: WorkKind, namespace: &str, name: &str, created: i64, phase: Lifecycle) -> Seen {
    let work = QueueEntry {
        kind,
        uid: format!("{namespace}/{name}"),
        namespace: namespace.into(),
        name: name.into(),
        created: Some(at(created)),
        leaving: false,
        // As `Work::preemptible` says of a workflow, and of a tool run by default.
        preemptible: kind == WORKFLOW,
        // Work holding a slot took it when it was made.
        admitted: (phase == Lifecycle::Active).then(|| at(created)),
        preemptions: 0,
        waiting_for_node: None,
    };
    Seen { work, phase, party: String::new() }
}

fn seen(name: &str, created: i64, phase: Lifecycle) -> Seen {
    seen_of(WORKFLOW, "ns", name, created, phase)
}

fn seen_in(namespace: &str, caller: Option<&str>, name: &str, created: i64, phase: Lifecycle) -> Seen {
    let mut seen = seen_of(WORKFLOW, namespace, name, created, phase);
    // As if its proof verified: what a party is, is decided in `party`.
    seen.party = caller.unwrap_or_default().into();
    seen
}

fn names(queue: &[&Seen]) -> Vec<String> {
    queue.iter().map(|s| s.work.name.clone()).collect()
}

/// `me`'s slots as a reconcile computes them (no admission in flight).
fn slots(all: &[Seen], me: &QueueEntry, budget: &Budget) -> Slots {
    slots_for(me, taken_by_others(all, me), &queue_positions(all, budget), budget)
}

#[test]
fn a_namespace_holding_every_slot_yields_one_to_a_newcomer_and_no_more() {
    let mut all: Vec<Seen> =
        (0..4).map(|i| seen_in("busy", None, &format!("long-{i}"), i, Lifecycle::Active)).collect();
    all.push(seen_in("busy", None, "long-queued", 5, Lifecycle::Waiting));
    let me = all[0].work.clone();
    assert!(!should_yield(&all, &me, &budget(4)), "nobody else waits");
    all.push(seen_in("victim", None, "short", 9, Lifecycle::Waiting));
    assert!(should_yield(&all, &me, &budget(4)), "4 slots against none");
    assert!(!should_yield(&all, &me, &budget(5)), "a free slot serves the newcomer");
    // Once it has yielded and the newcomer mines: 3 against 1, and the
    // head of the queue is the busy namespace's own: no more trades.
    all[0].phase = Lifecycle::Waiting;
    all.last_mut().unwrap().phase = Lifecycle::Active;
    assert!(!should_yield(&all, &all[1].work.clone(), &budget(4)));
    // The newcomer never yields back to the busy namespace.
    let newcomer = all.last().unwrap().work.clone();
    assert!(!should_yield(&all, &newcomer, &budget(4)));
}

#[test]
fn within_a_namespace_a_party_holding_more_yields_to_another() {
    let party =
        |name: &str, created: i64, phase, caller: &str| seen_in("shared", Some(caller), name, created, phase);
    let all = [
        party("a-1", 0, Lifecycle::Active, "alice"),
        party("a-2", 1, Lifecycle::Active, "alice"),
        party("b-1", 2, Lifecycle::Waiting, "bob"),
    ];
    assert!(should_yield(&all, &all[0].work, &budget(2)));
    // Issue #47: one caller's long work gives way mid-block once the other
    // waited past the delay; direct creators ("" is a party) alike.
    let preempting = budget(2).preempting_after(std::time::Duration::from_secs(60));
    assert_eq!(yield_for(&all, &all[0].work, &preempting, at(62)), Yield::Now);
    let direct = [
        seen_in("shared", None, "direct-1", 0, Lifecycle::Active),
        seen_in("shared", None, "direct-2", 1, Lifecycle::Active),
        party("b-1", 2, Lifecycle::Waiting, "bob"),
    ];
    assert_eq!(yield_for(&direct, &direct[0].work, &preempting, at(62)), Yield::Now);
    // Equal holdings never trade.
    let even = [
        party("a-1", 0, Lifecycle::Active, "alice"),
        party("b-1", 1, Lifecycle::Active, "bob"),
        party("a-2", 2, Lifecycle::Waiting, "alice"),
    ];
    assert!(!should_yield(&even, &even[1].work, &budget(2)));
    assert!(!should_yield(&even, &even[0].work, &budget(2)), "the head is alice's own");
}

#[test]
fn slots_count_the_others_holding_one_and_older_waiting_ones() {
    let all = [
        seen("a", 0, Lifecycle::Active),
        seen("b", 1, Lifecycle::Waiting),
        seen("c", 2, Lifecycle::Waiting),
        seen("d", 3, Lifecycle::Succeeded),
    ];
    let of = |i: usize| {
        let s = slots(&all, &all[i].work, &budget(2));
        (s.taken, s.ahead)
    };
    assert_eq!((of(2), of(1), of(0)), ((1, 1), (1, 0), (0, 0)));
    assert!(slots(&all, &all[1].work, &budget(2)).admits());
    assert!(!slots(&all, &all[2].work, &budget(2)).admits(), "b takes the one free slot");
}

#[test]
fn a_caller_label_without_the_frontends_proof_is_the_direct_party() {
    let mut labelled = workflow("w", 8, 1);
    labelled.metadata.labels = Some([(labels::CALLER.to_string(), "abc".to_string())].into());
    assert_eq!(party(&labelled, |_| true), "abc");
    assert_eq!(party(&labelled, |_| false), "", "a label anyone wrote is a claim");
    assert_eq!(party(&workflow("w", 8, 1), |_| true), "", "no label: direct");
}

#[test]
fn thirty_workflows_with_random_unproven_labels_are_one_party_and_wait_their_turn() {
    // The attack as found: 30 direct workflows, each with its own random
    // caller label, against one MCP caller's workflow queued after them.
    let mut all: Vec<Seen> = (0..30)
        .map(|i| {
            let mut labelled = workflow(&format!("d{i}"), 8, 1);
            labelled.metadata.labels = Some([(labels::CALLER.to_string(), format!("random-{i}"))].into());
            let mut seen = seen_in("shared", None, &format!("d{i}"), i, Lifecycle::Waiting);
            seen.party = party(&labelled, |_| false);
            seen
        })
        .collect();
    all.push(seen_in("shared", Some("caller"), "mcp", 100, Lifecycle::Waiting));
    let order = names(&queue(&all));
    let place = order.iter().position(|n| *n == "mcp").unwrap();
    assert!(place <= 1, "the caller's workflow waits {place} turns");
    // Red team round 5 saw the caller admitted after 3 of them: a caller
    // already holding 2 slots waits while the direct party takes as many,
    // then turns alternate. That is the share, not the label.
    all.push(seen_in("shared", Some("caller"), "held-1", 50, Lifecycle::Active));
    all.push(seen_in("shared", Some("caller"), "held-2", 51, Lifecycle::Active));
    let order = names(&queue(&all));
    let place = order.iter().position(|n| *n == "mcp").unwrap();
    assert!(place <= 3, "behind at most the 2 slots it holds and one turn: {place}");
}

#[test]
fn what_this_operator_wrote_wins_over_a_lagging_cache() {
    let mut written = HashMap::new();
    written.insert("uid-b".to_string(), Standing { phase: Lifecycle::Active, admitted: Some(at(7)) });
    written.insert("uid-a".to_string(), Standing { phase: Lifecycle::Succeeded, admitted: None });
    let cached = [Arc::new(workflow("a", 8, 1)), Arc::new(workflow("b", 8, 1))];
    let seen = freshest_phases(&cached, &written, &HashMap::new(), |_| String::new());
    let phases: Vec<_> = seen.iter().map(|s| s.phase).collect();
    // The fixtures carry no status, so the cache would say Waiting for both.
    assert_eq!(phases, [Lifecycle::Succeeded, Lifecycle::Active]);
    assert_eq!(seen[1].work.admitted, Some(at(7)), "an admission the cache has not seen yet counts");
}

#[test]
fn node_waits_are_what_the_reconciles_observed_and_only_of_work_holding_a_slot() {
    let mut written = HashMap::new();
    written.insert("uid-a".to_string(), Standing { phase: Lifecycle::Active, admitted: Some(at(1)) });
    let mut waits = HashMap::new();
    waits.insert("uid-a".to_string(), at(3));
    // A wait observed of work the queue holds waiting is not a node's.
    waits.insert("uid-b".to_string(), at(4));
    let cached = [Arc::new(workflow("a", 8, 1)), Arc::new(workflow("b", 8, 1))];
    let seen = freshest_phases(&cached, &written, &waits, |_| String::new());
    assert_eq!(seen[0].work.waiting_for_node, Some(at(3)), "observed, though no status says it");
    assert_eq!(seen[1].work.waiting_for_node, None);
    let none = freshest_phases(&cached, &written, &HashMap::new(), |_| String::new());
    assert_eq!(none[0].work.waiting_for_node, None);
}

#[test]
fn a_deleted_workflow_kept_by_a_finalizer_holds_no_slot() {
    // Finding 4 of the tool boundary: mining, deleted, a finalizer keeps it.
    let mut written = HashMap::new();
    written.insert("uid-a".to_string(), Standing { phase: Lifecycle::Active, admitted: Some(at(1)) });
    let mut deleted = workflow("a", 8, 1);
    deleted.metadata.deletion_timestamp = Some(Time(at(2)));
    deleted.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let cached = [Arc::new(deleted), Arc::new(workflow("b", 8, 1))];
    let all = freshest_phases(&cached, &written, &HashMap::new(), |_| String::new());
    assert_eq!(all[0].phase, Lifecycle::Cancelled);
    assert_eq!(taken_by_others(&all, &all[1].work), Taken::default(), "no slot is held");
    assert_eq!(
        next_in_queue(&all, &budget(1), at(100)).len(),
        1,
        "the one slot goes to the waiting workflow"
    );
}

#[test]
fn free_slots_go_to_the_oldest_waiting_workflows() {
    let mut cancelled = seen("x", -5, Lifecycle::Waiting);
    cancelled.work.leaving = true;
    let all = [
        seen("late", 9, Lifecycle::Waiting),
        seen("busy", 0, Lifecycle::Active),
        seen("early", 1, Lifecycle::Waiting),
        cancelled,
        seen("middle", 5, Lifecycle::Waiting),
    ];
    let names: Vec<_> = next_in_queue(&all, &budget(3), at(100)).iter().map(|w| w.name.clone()).collect();
    assert_eq!(names, ["early", "middle"]);
    assert!(next_in_queue(&all, &budget(1), at(100)).is_empty());
}

#[test]
fn a_backlog_in_one_namespace_delays_another_by_at_most_one_turn() {
    let mut all: Vec<Seen> =
        (0..300).map(|i| seen_in("x", None, &format!("x{i}"), i, Lifecycle::Waiting)).collect();
    all.push(seen_in("x", None, "x-busy", -1, Lifecycle::Active));
    all.push(seen_in("y", None, "y0", 1_000, Lifecycle::Waiting));
    all.push(seen_in("y", None, "y1", 1_001, Lifecycle::Waiting));
    // x holds a slot, y none: y's oldest goes first, then they alternate.
    let order = names(&queue(&all));
    assert_eq!(order[..4], ["y0", "x0", "y1", "x1"]);
    let y0 = slots(&all, &all[301].work, &budget(2));
    assert_eq!((y0.taken, y0.ahead), (1, 0));
    // With no slot held and neither served yet, the older head goes first.
    all.retain(|s| s.phase != Lifecycle::Active);
    assert_eq!(names(&queue(&all))[..3], ["x0", "y0", "x1"]);
    // The slot x held has just freed: x was served last, so y goes next.
    let mut done = seen_in("x", None, "x-done", -1, Lifecycle::Succeeded);
    done.work.admitted = Some(at(500));
    all.push(done);
    assert_eq!(names(&queue(&all))[..4], ["y0", "x0", "y1", "x1"]);
}

#[test]
fn within_a_namespace_callers_take_turns_and_direct_creators_are_one_more() {
    let mut all: Vec<Seen> =
        (0..50).map(|i| seen_in("ns", Some("greedy"), &format!("g{i}"), i, Lifecycle::Waiting)).collect();
    all.push(seen_in("ns", Some("modest"), "m0", 100, Lifecycle::Waiting));
    all.push(seen_in("ns", None, "direct0", 200, Lifecycle::Waiting));
    all.push(seen_in("ns", Some("greedy"), "g-busy", -1, Lifecycle::Active));
    let order = names(&queue(&all));
    assert_eq!(order[..4], ["m0", "direct0", "g0", "g1"]);
}

#[test]
fn the_queue_holds_every_waiting_workflow_once() {
    let mut all = Vec::new();
    for i in 0..40i64 {
        let namespace = ["a", "b", "c"][i as usize % 3];
        let caller = [Some("p"), Some("q"), None][(i as usize / 3) % 3];
        let phase = if i % 7 == 0 { Lifecycle::Active } else { Lifecycle::Waiting };
        all.push(seen_in(namespace, caller, &format!("w{i}"), i * 13 % 17, phase));
    }
    let mut order = names(&queue(&all));
    let waiting = all.iter().filter(|s| waiting(s)).count();
    assert_eq!(order.len(), waiting);
    order.sort();
    order.dedup();
    assert_eq!(order.len(), waiting);
}

fn run_of(caller: &str, name: &str, created: i64, phase: Lifecycle) -> Seen {
    let mut seen = seen_of(RUN, "ns", name, created, phase);
    seen.party = caller.into();
    seen
}

fn workflow_of(caller: &str, name: &str, created: i64, phase: Lifecycle) -> Seen {
    let mut seen = seen_of(WORKFLOW, "ns", name, created, phase);
    seen.party = caller.into();
    seen
}

#[test]
fn one_budget_full_of_one_callers_runs_gives_the_next_slot_to_anothers_workflow() {
    // Alice's tool runs hold the whole budget and more of hers wait
    // (older); bob's workflow is next the moment a slot frees.
    let budget = Budget::new(3);
    let mut all: Vec<Seen> =
        (0..3).map(|i| run_of("alice", &format!("a{i}"), i, Lifecycle::Active)).collect();
    all.extend((3..6).map(|i| run_of("alice", &format!("a{i}"), i, Lifecycle::Waiting)));
    all.push(workflow_of("bob", "b-mine", 100, Lifecycle::Waiting));
    let bob = all.last().unwrap().work.clone();
    let full = slots(&all, &bob, &budget);
    assert!(!full.admits(), "the budget is full: {full:?}");
    assert_eq!((full.taken, full.limit, full.ahead), (3, 3, 0), "bob is first in line");
    all[0].phase = Lifecycle::Succeeded;
    assert!(slots(&all, &bob, &budget).admits(), "the freed slot is bob's");
    assert!(!slots(&all, &all[3].work, &budget).admits(), "not alice's next run");
    assert_eq!(next_in_queue(&all, &budget, at(100)), [&bob]);
    // And the reverse: a budget of bob's workflows, alice's run next.
    let mut reverse: Vec<Seen> =
        (0..3).map(|i| workflow_of("bob", &format!("b{i}"), i, Lifecycle::Active)).collect();
    reverse.push(workflow_of("bob", "b3", 3, Lifecycle::Waiting));
    reverse.push(run_of("alice", "a-run", 50, Lifecycle::Waiting));
    reverse[1].phase = Lifecycle::Failed;
    let alice = reverse.last().unwrap().work.clone();
    assert!(slots(&reverse, &alice, &budget).admits());
    assert!(!slots(&reverse, &reverse[3].work, &budget).admits());
}

#[test]
fn a_kind_at_its_cap_holds_up_only_its_own_kind() {
    let budget = Budget::new(4).capping(RUN, 2);
    let all = [
        run_of("alice", "r0", 0, Lifecycle::Active),
        run_of("alice", "r1", 1, Lifecycle::Active),
        run_of("alice", "r2", 2, Lifecycle::Waiting),
        workflow_of("alice", "w0", 3, Lifecycle::Waiting),
    ];
    let run = slots(&all, &all[2].work, &budget);
    assert!(!run.admits() && run.binding == Limit::Kind, "tool runs are at their cap: {run:?}");
    let workflow = slots(&all, &all[3].work, &budget);
    assert!(workflow.admits(), "the waiting run is no turn ahead of the workflow: {workflow:?}");
    assert_eq!(next_in_queue(&all, &budget, at(100)), [&all[3].work]);
    // A run never yields, and a workflow yields only to its own kind when
    // its kind's cap binds.
    let capped = Budget::new(10).capping(WORKFLOW, 1);
    let mut busy = vec![workflow_of("alice", "w-busy", 0, Lifecycle::Active)];
    busy.push(run_of("bob", "r-wait", 1, Lifecycle::Waiting));
    assert!(!should_yield(&busy, &busy[0].work, &capped), "the run has slots of its own");
    busy.push(workflow_of("bob", "w-wait", 2, Lifecycle::Waiting));
    assert!(should_yield(&busy, &busy[0].work, &capped));
}

#[test]
fn a_kind_is_its_noun_and_one_without_a_cap_is_bounded_by_the_budget() {
    assert_eq!(WorkKind::of::<mining_api::MiningWorkflow>(), WORKFLOW);
    assert_eq!(WorkKind::of::<mining_api::ToolRun>(), RUN);
    let capped = Budget::new(5).capping(RUN, 2).capping(RUN, 3);
    assert_eq!(capped.cap(RUN), 3, "the last cap set counts");
    assert_eq!(capped.cap(WorkKind("report")), 5, "a kind nobody capped");
    // A third kind's work waits in the same queue and takes the free slot.
    let mut third = seen_of(WorkKind("report"), "ns", "r", 1, Lifecycle::Waiting);
    third.work.uid = "r".into();
    let all = [seen("w", 2, Lifecycle::Active), third];
    let next: Vec<_> = next_in_queue(&all, &budget(2), at(100)).into_iter().map(|e| e.name.clone()).collect();
    assert_eq!(next, ["r"]);
}

#[test]
fn a_caller_at_its_tool_run_cap_waits_while_slots_are_free_and_others_do_not() {
    // Issue #47: a tool run cannot give its slot back, so one caller's long
    // runs must never hold them all: alice may run 2 of the 4.
    let budget = Budget::new(10).capping(RUN, 4).capping_per_party(RUN, 2);
    let mut all = vec![
        run_of("alice", "a0", 0, Lifecycle::Active),
        run_of("alice", "a1", 1, Lifecycle::Active),
        run_of("alice", "a2", 2, Lifecycle::Waiting),
        run_of("alice", "a3", 3, Lifecycle::Waiting),
    ];
    let hers = slots(&all, &all[2].work, &budget);
    assert!(!hers.admits(), "two free run slots, but alice holds her two: {hers:?}");
    assert_eq!((hers.binding, hers.taken, hers.limit, hers.ahead), (Limit::Party, 2, 2, 0));
    let message = hers.queued_message("tool runs are running");
    assert!(message.contains("already holds 2 of at most 2"), "{message}");
    assert!(!message.contains("alice"), "a refusal names no caller: {message}");
    assert_eq!(slots(&all, &all[3].work, &budget).ahead, 1, "her own older run goes first");
    assert!(next_in_queue(&all, &budget, at(100)).is_empty(), "nobody is woken for slots alice may not take");
    // Bob, later, starts at once: alice's waiting runs are nobody's turn ahead.
    all.push(run_of("bob", "b0", 10, Lifecycle::Waiting));
    let bobs = slots(&all, &all[4].work, &budget);
    assert!(bobs.admits(), "{bobs:?}");
    assert_eq!(next_in_queue(&all, &budget, at(100)), [&all[4].work]);
    // One of alice's ends: her next takes its place.
    all[0].phase = Lifecycle::Succeeded;
    assert!(slots(&all, &all[2].work, &budget).admits());
    assert!(!slots(&all, &all[3].work, &budget).admits(), "a2 goes first and fills her cap");
    // The cap is per kind: alice's workflows are not held by it.
    all.push(workflow_of("alice", "w0", 20, Lifecycle::Waiting));
    all[0].phase = Lifecycle::Active;
    assert!(slots(&all, &all[5].work, &budget).admits());
}

#[test]
fn a_namespace_at_its_cap_waits_and_the_queue_serves_the_others() {
    let budget = Budget::new(6).capping_per_namespace(2);
    let mut all = vec![
        seen_in("busy", None, "w0", 0, Lifecycle::Active),
        seen_in("busy", Some("alice"), "w1", 1, Lifecycle::Active),
        seen_in("busy", Some("bob"), "w2", 2, Lifecycle::Waiting),
        seen_in("quiet", None, "q0", 3, Lifecycle::Waiting),
    ];
    let busy = slots(&all, &all[2].work, &budget);
    assert!(!busy.admits() && busy.binding == Limit::Namespace, "{busy:?}");
    assert!(
        busy.queued_message("workflows are mining").contains("this namespace already holds 2 of at most 2")
    );
    assert!(slots(&all, &all[3].work, &budget).admits(), "the blocked one is no turn ahead");
    let next: Vec<&str> = next_in_queue(&all, &budget, at(100)).iter().map(|e| e.name.as_str()).collect();
    assert_eq!(next, ["q0"]);
    // Every slot taken (the cap lowered after busy took two): busy yields
    // to a namespace holding none, never to one its cap keeps waiting.
    let full = Budget::new(3).capping_per_namespace(1);
    all[3].phase = Lifecycle::Active;
    all[2].phase = Lifecycle::Succeeded;
    all.push(seen_in("quiet", None, "q1", 4, Lifecycle::Waiting));
    assert!(!should_yield(&all, &all[0].work, &full), "quiet holds its one: q1 could not take the slot");
    all.push(seen_in("third", None, "t0", 5, Lifecycle::Waiting));
    assert!(should_yield(&all, &all[0].work, &full), "busy holds 2 against third's none");
}

mod node;
mod preemption;
mod shares;

/// A workflow's status shows at most `MAX_MESSAGE_CHARS` of its message: the
/// budget's queued message fits whole, with four-digit limits and a queue
/// of a hundred thousand.
#[test]
fn the_budgets_queued_message_fits_a_workflows_status() {
    let slots = Slots { taken: 1000, limit: 1000, ahead: 99_999, binding: Limit::Budget };
    let message = slots.queued_message("workflows are mining");
    assert!(message.chars().count() <= crate::mining::plan::MAX_MESSAGE_CHARS, "{message}");
    assert!(message.ends_with("slots (all kinds) are taken"), "{message}");
    assert!(message.starts_with("queued: 50000+ ahead of it"), "{message}");
}

/// A waiter's message changes only when its place crosses a step, so a
/// queue that moves rewrites each waiter O(log n) times, not O(n).
#[test]
fn the_count_ahead_is_exact_under_ten_then_in_steps() {
    use super::limits::rough_count;
    for (count, said) in [
        (0, "0"),
        (9, "9"),
        (10, "10+"),
        (19, "10+"),
        (20, "20+"),
        (49, "20+"),
        (50, "50+"),
        (999, "500+"),
        (1000, "1000+"),
        (usize::MAX, "10000000000000000000+"),
    ] {
        assert_eq!(rough_count(count), said, "{count}");
    }
    let changes =
        |from: usize| (0..from).rev().map(rough_count).collect::<std::collections::BTreeSet<_>>().len();
    assert_eq!(changes(10_000), 10 + 9, "0..9 exact, then 10, 20, 50, …, 5000");
    let slots = Slots { taken: 20, limit: 20, ahead: 20 + 437, binding: Limit::Kind };
    assert_eq!(
        slots.queued_message("tool runs are running"),
        "queued: 200+ ahead of it; 20 of at most 20 tool runs are running"
    );
}
