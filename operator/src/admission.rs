//! Exact concurrency limits and a fair queue (pure).
//!
//! Admissions are serialized by the controller (one lock), and each one
//! counts the workflows mining by their *freshest* phase — what this operator
//! last wrote, else the cache — so neither parallel reconciles nor a cache
//! that lags the operator's own writes can admit more than the limit.
//!
//! The queue is fair: slots go round-robin across namespaces and, within a
//! namespace, across parties — each MCP caller is one, and everyone who
//! creates workflows directly is one more. A caller label is a claim anyone
//! can write, so a workflow is its caller's only when it carries the
//! frontend's proof ([`Party`]); every other one is "direct". A party's rank
//! counts the slots it holds now plus its place in its own queue, so a
//! namespace (or caller) with a backlog of hundreds delays another's next
//! workflow by at most one slot turn; equal ranks go oldest first.
//!
//! Slots are lent, not kept: when every slot is taken and the head of the
//! queue belongs to a group (namespace, or party within the namespace)
//! holding fewer slots than the group of a workflow between two blocks,
//! that workflow yields its slot ([`should_yield`]) and queues again with
//! its mined blocks kept. So days of one namespace's work delay another's
//! short workflow by at most one block.

use mining_api::Work as _;
use std::collections::HashMap;
use std::sync::Arc;

use mining_api::{MiningWorkflow, WorkflowPhase, labels};

/// A workflow with the phase (and admission time) this operator believes it has.
pub struct Seen {
    pub workflow: Arc<MiningWorkflow>,
    pub phase: WorkflowPhase,
    pub started: Served,
    /// The party it queues as within its namespace: its caller's label when
    /// the frontend's proof says so, else "" (the namespace's direct creators).
    pub party: String,
}

/// What this operator last wrote of a workflow's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub phase: WorkflowPhase,
    pub started: Served,
}

/// The freshest phase and admission time of every workflow: a status this
/// operator wrote wins over the cache's (which may not have caught up with
/// it yet — a queue that missed an admission would serve a party twice).
/// `party` says which party each workflow queues as (see [`Seen::party`]).
pub fn freshest_phases(
    cached: Vec<Arc<MiningWorkflow>>,
    written: &HashMap<String, Standing>,
    party: impl Fn(&MiningWorkflow) -> String,
) -> Vec<Seen> {
    cached
        .into_iter()
        .map(|workflow| {
            let cached = Standing { phase: workflow.phase(), started: started(&workflow) };
            let fresh =
                workflow.metadata.uid.as_ref().and_then(|uid| written.get(uid)).copied().unwrap_or(cached);
            let party = party(&workflow);
            // Deleted (whatever finalizer keeps it stored): it holds no slot.
            let phase = match workflow.metadata.deletion_timestamp {
                Some(_) if !fresh.phase.is_finished() => WorkflowPhase::Cancelled,
                _ => fresh.phase,
            };
            Seen { workflow, phase, started: fresh.started.or(cached.started), party }
        })
        .collect()
}

/// The party of a workflow: its caller label when `proven` (the frontend's
/// proof verifies), else the direct creators' "".
pub fn party(workflow: &MiningWorkflow, proven: impl FnOnce(&MiningWorkflow) -> bool) -> String {
    match workflow.label(labels::CALLER) {
        Some(label) if proven(workflow) => label.to_string(),
        _ => String::new(),
    }
}

/// Whether a workflow waits for a slot (and so holds a place in the queue).
fn waiting(seen: &Seen) -> bool {
    seen.phase == WorkflowPhase::Pending
        && !seen.workflow.spec.cancel
        && seen.workflow.metadata.deletion_timestamp.is_none()
}

/// Queue order among equals: creation time, then namespace and name.
fn queue_key(workflow: &MiningWorkflow) -> (Option<k8s_openapi::jiff::Timestamp>, &str, &str) {
    (
        workflow.metadata.creation_timestamp.as_ref().map(|t| t.0),
        workflow.metadata.namespace.as_deref().unwrap_or_default(),
        workflow.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn namespace_of(workflow: &MiningWorkflow) -> &str {
    workflow.metadata.namespace.as_deref().unwrap_or_default()
}

fn party_of(seen: &Seen) -> &str {
    &seen.party
}

type Served = Option<k8s_openapi::jiff::Timestamp>;

/// When a workflow was admitted, if it has been.
fn started(workflow: &MiningWorkflow) -> Served {
    workflow.status.as_ref()?.started_at.as_ref().map(|t| t.0)
}

/// What one level of the queue knows of each group: the slots it holds now,
/// and when it was last served (its newest admission, retained workflows
/// included).
#[derive(Default)]
struct Groups<'a> {
    holding: HashMap<&'a str, usize>,
    served: HashMap<&'a str, k8s_openapi::jiff::Timestamp>,
}

impl<'a> Groups<'a> {
    fn note(&mut self, group: &'a str, seen: &Seen) {
        if seen.phase == WorkflowPhase::Mining {
            *self.holding.entry(group).or_default() += 1;
        }
        if let Some(at) = seen.started {
            let served = self.served.entry(group).or_insert(at);
            *served = (*served).max(at);
        }
    }
}

/// Orders `members` (one level's waiting workflows, each with its place in
/// its own order so far) round-robin across the groups `group_of` names:
/// rank = slots the group holds + the member's place within the group; on
/// equal ranks the group served longest ago goes first, then the oldest.
fn round_robin<'a>(
    members: Vec<(usize, &'a Seen)>,
    group_of: impl Fn(&'a Seen) -> &'a str,
    groups: &Groups<'a>,
) -> Vec<&'a Seen> {
    let mut by_group: HashMap<&str, Vec<(usize, &Seen)>> = HashMap::new();
    for member in members {
        by_group.entry(group_of(member.1)).or_default().push(member);
    }
    let mut ranked: Vec<(usize, Served, &Seen)> = Vec::new();
    for (group, mut queue) in by_group {
        queue.sort_by(|a, b| (a.0, queue_key(&a.1.workflow)).cmp(&(b.0, queue_key(&b.1.workflow))));
        let held = groups.holding.get(group).copied().unwrap_or(0);
        let served = groups.served.get(group).copied();
        ranked.extend(
            queue
                .into_iter()
                .enumerate()
                .map(|(place, (_, seen))| (held.saturating_add(place), served, seen)),
        );
    }
    ranked.sort_by(|a, b| (a.0, a.1, queue_key(&a.2.workflow)).cmp(&(b.0, b.1, queue_key(&b.2.workflow))));
    ranked.into_iter().map(|(_, _, seen)| seen).collect()
}

/// Every waiting workflow, in the order slots go to them (fair; see above).
pub fn queue(all: &[Seen]) -> Vec<&Seen> {
    let mut namespaces = Groups::default();
    let mut parties: HashMap<&str, Groups> = HashMap::new();
    let mut waiting_by_namespace: HashMap<&str, Vec<(usize, &Seen)>> = HashMap::new();
    for seen in all {
        let namespace = namespace_of(&seen.workflow);
        namespaces.note(namespace, seen);
        parties.entry(namespace).or_default().note(party_of(seen), seen);
        if waiting(seen) {
            waiting_by_namespace.entry(namespace).or_default().push((0, seen));
        }
    }
    // Within each namespace: round-robin across its parties; each member's
    // place there is its place in the namespace's own order.
    let no_parties = Groups::default();
    let mut within: Vec<(usize, &Seen)> = Vec::new();
    for (namespace, members) in waiting_by_namespace {
        let ordered = round_robin(members, party_of, parties.get(namespace).unwrap_or(&no_parties));
        within.extend(ordered.into_iter().enumerate());
    }
    // Across namespaces, by the same rule.
    round_robin(within, |seen| namespace_of(&seen.workflow), &namespaces)
}

/// For `me`: how many other workflows are mining, and how many waiting ones
/// are ahead of it in the queue.
pub fn standing(all: &[Seen], me: &MiningWorkflow) -> (usize, usize) {
    (mining_others(all, me), ahead_of(&queue_positions(all), me))
}

/// How many workflows other than `me` are mining.
pub fn mining_others(all: &[Seen], me: &MiningWorkflow) -> usize {
    let uid = me.metadata.uid.as_deref();
    all.iter()
        .filter(|s| s.workflow.metadata.uid.as_deref() != uid && s.phase == WorkflowPhase::Mining)
        .count()
}

/// Every waiting workflow's place in the queue, by uid: the one sort a
/// burst of waiting reconciles shares (see `Memory::queue_positions`).
pub fn queue_positions(all: &[Seen]) -> QueuePositions {
    let order = queue(all);
    let mut positions = HashMap::with_capacity(order.len());
    let mut created = Vec::with_capacity(order.len());
    for (place, seen) in order.into_iter().enumerate() {
        positions.insert(seen.workflow.metadata.uid.clone().unwrap_or_default(), place);
        created.push(seen.workflow.metadata.creation_timestamp.as_ref().map(|t| t.0));
    }
    created.sort();
    QueuePositions { positions, created }
}

/// The queue's order, computed once and read by many.
#[derive(Debug, Default)]
pub struct QueuePositions {
    positions: HashMap<String, usize>,
    /// Creation times of the waiting workflows, sorted.
    created: Vec<Option<k8s_openapi::jiff::Timestamp>>,
}

impl QueuePositions {
    pub fn contains(&self, uid: &str) -> bool {
        self.positions.contains_key(uid)
    }
}

/// How many waiting workflows are ahead of `me`: its place, or (not
/// waiting itself: cancelled, or moved on) those created before it.
pub fn ahead_of(positions: &QueuePositions, me: &MiningWorkflow) -> usize {
    match positions.positions.get(me.metadata.uid.as_deref().unwrap_or_default()) {
        Some(place) => *place,
        None => {
            let created = me.metadata.creation_timestamp.as_ref().map(|t| t.0);
            positions.created.partition_point(|at| *at < created)
        }
    }
}

/// Whether `me`, mining and between two blocks, should give its slot to the
/// head of the queue: every slot is taken (else the head takes a free one),
/// and `me`'s group holds more slots than the head's — namespaces first,
/// then parties within one namespace. Groups an equal number of slots
/// apart never trade, so shares settle instead of swapping every block.
pub fn should_yield(all: &[Seen], me: &MiningWorkflow, limit: usize) -> bool {
    let mining = || all.iter().filter(|s| s.phase == WorkflowPhase::Mining);
    if mining().count() < limit {
        return false;
    }
    let Some(head) = queue(all).first().map(|s| s.workflow.clone()) else { return false };
    let (my_namespace, head_namespace) = (namespace_of(me), namespace_of(&head));
    let held_in = |namespace: &str, party: Option<&str>| {
        mining()
            .filter(|s| namespace_of(&s.workflow) == namespace)
            .filter(|s| party.is_none_or(|p| party_of(s) == p))
            .count()
    };
    if my_namespace != head_namespace {
        return held_in(my_namespace, None) > held_in(head_namespace, None);
    }
    let my_party = all.iter().find(|s| s.workflow.metadata.uid == me.metadata.uid).map_or("", party_of);
    let head_party = all.iter().find(|s| s.workflow.metadata.uid == head.metadata.uid).map_or("", party_of);
    my_party != head_party && held_in(my_namespace, Some(my_party)) > held_in(my_namespace, Some(head_party))
}

/// The waiting workflows that should take the slots free now, in queue order.
pub fn next_in_queue(all: &[Seen], limit: usize) -> Vec<Arc<MiningWorkflow>> {
    let mining = all.iter().filter(|s| s.phase == WorkflowPhase::Mining).count();
    queue(all).into_iter().take(limit.saturating_sub(mining)).map(|s| s.workflow.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{at, workflow};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn seen(name: &str, created: i64, phase: WorkflowPhase) -> Seen {
        let mut wf = workflow(name, 8, 1);
        wf.metadata.creation_timestamp = Some(Time(at(created)));
        Seen { workflow: Arc::new(wf), phase, started: None, party: String::new() }
    }

    #[test]
    fn a_namespace_holding_every_slot_yields_one_to_a_newcomer_and_no_more() {
        let mut all: Vec<Seen> =
            (0..4).map(|i| seen_in("busy", None, &format!("long-{i}"), i, WorkflowPhase::Mining)).collect();
        all.push(seen_in("busy", None, "long-queued", 5, WorkflowPhase::Pending));
        let me = all[0].workflow.clone();
        assert!(!should_yield(&all, &me, 4), "nobody else waits");
        all.push(seen_in("victim", None, "short", 9, WorkflowPhase::Pending));
        assert!(should_yield(&all, &me, 4), "4 slots against none");
        assert!(!should_yield(&all, &me, 5), "a free slot serves the newcomer");
        // Once it has yielded and the newcomer mines: 3 against 1, and the
        // head of the queue is the busy namespace's own: no more trades.
        all[0].phase = WorkflowPhase::Pending;
        all.last_mut().unwrap().phase = WorkflowPhase::Mining;
        assert!(!should_yield(&all, &all[1].workflow.clone(), 4));
        // The newcomer never yields back to the busy namespace.
        let newcomer = all.last().unwrap().workflow.clone();
        assert!(!should_yield(&all, &newcomer, 4));
    }

    #[test]
    fn within_a_namespace_a_party_holding_more_yields_to_another() {
        let party = |name: &str, created: i64, phase, caller: &str| {
            seen_in("shared", Some(caller), name, created, phase)
        };
        let all = [
            party("a-1", 0, WorkflowPhase::Mining, "alice"),
            party("a-2", 1, WorkflowPhase::Mining, "alice"),
            party("b-1", 2, WorkflowPhase::Pending, "bob"),
        ];
        assert!(should_yield(&all, &all[0].workflow, 2));
        // Equal holdings never trade.
        let even = [
            party("a-1", 0, WorkflowPhase::Mining, "alice"),
            party("b-1", 1, WorkflowPhase::Mining, "bob"),
            party("a-2", 2, WorkflowPhase::Pending, "alice"),
        ];
        assert!(!should_yield(&even, &even[1].workflow, 2));
        assert!(!should_yield(&even, &even[0].workflow, 2), "the head is alice's own");
    }

    #[test]
    fn standing_counts_mining_others_and_older_waiting_ones() {
        let all = [
            seen("a", 0, WorkflowPhase::Mining),
            seen("b", 1, WorkflowPhase::Pending),
            seen("c", 2, WorkflowPhase::Pending),
            seen("d", 3, WorkflowPhase::Succeeded),
        ];
        assert_eq!(standing(&all, &all[2].workflow), (1, 1));
        assert_eq!(standing(&all, &all[1].workflow), (1, 0));
        assert_eq!(standing(&all, &all[0].workflow), (0, 0));
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
                let mut seen = seen_in(
                    "shared",
                    Some(&format!("random-{i}")),
                    &format!("d{i}"),
                    i,
                    WorkflowPhase::Pending,
                );
                seen.party = party(&seen.workflow, |_| false);
                seen
            })
            .collect();
        all.push(seen_in("shared", Some("caller"), "mcp", 100, WorkflowPhase::Pending));
        let order: Vec<&str> =
            queue(&all).iter().map(|s| s.workflow.metadata.name.as_deref().unwrap()).collect();
        let place = order.iter().position(|n| *n == "mcp").unwrap();
        assert!(place <= 1, "the caller's workflow waits {place} turns");
    }

    #[test]
    fn what_this_operator_wrote_wins_over_a_lagging_cache() {
        let mut written = HashMap::new();
        written.insert("uid-b".to_string(), Standing { phase: WorkflowPhase::Mining, started: Some(at(7)) });
        written.insert("uid-a".to_string(), Standing { phase: WorkflowPhase::Succeeded, started: None });
        let cached =
            vec![seen("a", 0, WorkflowPhase::Mining).workflow, seen("b", 1, WorkflowPhase::Pending).workflow];
        let seen = freshest_phases(cached, &written, |_| String::new());
        let phases: Vec<_> = seen.iter().map(|s| s.phase).collect();
        // The fixtures carry no status, so the cache would say Pending for both.
        assert_eq!(phases, [WorkflowPhase::Succeeded, WorkflowPhase::Mining]);
        assert_eq!(seen[1].started, Some(at(7)), "an admission the cache has not seen yet counts");
    }

    #[test]
    fn a_deleted_workflow_kept_by_a_finalizer_holds_no_slot() {
        // Finding 4 of the tool boundary: mining, deleted, a finalizer keeps it.
        let mut written = HashMap::new();
        written.insert("uid-a".to_string(), Standing { phase: WorkflowPhase::Mining, started: Some(at(1)) });
        let mut deleted = (*seen("a", 0, WorkflowPhase::Mining).workflow).clone();
        deleted.metadata.deletion_timestamp = Some(Time(at(2)));
        deleted.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        let waiting = seen("b", 1, WorkflowPhase::Pending).workflow;
        let all = freshest_phases(vec![Arc::new(deleted), waiting.clone()], &written, |_| String::new());
        assert_eq!(all[0].phase, WorkflowPhase::Cancelled);
        assert_eq!(mining_others(&all, &waiting), 0, "no slot is held");
        assert_eq!(next_in_queue(&all, 1).len(), 1, "the one slot goes to the waiting workflow");
    }

    fn seen_in(
        namespace: &str,
        caller: Option<&str>,
        name: &str,
        created: i64,
        phase: WorkflowPhase,
    ) -> Seen {
        let mut seen = seen(name, created, phase);
        let workflow = Arc::make_mut(&mut seen.workflow);
        workflow.metadata.namespace = Some(namespace.into());
        workflow.metadata.uid = Some(format!("{namespace}/{name}"));
        if let Some(caller) = caller {
            workflow
                .metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(labels::CALLER.into(), caller.into());
            // As if its proof verified: what a party is, is decided in `party`.
            seen.party = caller.into();
        }
        seen
    }

    fn names(queue: &[&Seen]) -> Vec<String> {
        queue.iter().map(|s| s.workflow.metadata.name.clone().unwrap()).collect()
    }

    #[test]
    fn free_slots_go_to_the_oldest_waiting_workflows() {
        let mut cancelled = seen("x", -5, WorkflowPhase::Pending);
        Arc::make_mut(&mut cancelled.workflow).spec.cancel = true;
        let all = [
            seen("late", 9, WorkflowPhase::Pending),
            seen("busy", 0, WorkflowPhase::Mining),
            seen("early", 1, WorkflowPhase::Pending),
            cancelled,
            seen("middle", 5, WorkflowPhase::Pending),
        ];
        let names: Vec<_> = next_in_queue(&all, 3).iter().map(|w| w.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["early", "middle"]);
        assert!(next_in_queue(&all, 1).is_empty());
    }

    #[test]
    fn a_backlog_in_one_namespace_delays_another_by_at_most_one_turn() {
        let mut all: Vec<Seen> =
            (0..300).map(|i| seen_in("x", None, &format!("x{i}"), i, WorkflowPhase::Pending)).collect();
        all.push(seen_in("x", None, "x-busy", -1, WorkflowPhase::Mining));
        all.push(seen_in("y", None, "y0", 1_000, WorkflowPhase::Pending));
        all.push(seen_in("y", None, "y1", 1_001, WorkflowPhase::Pending));
        // x holds a slot, y none: y's oldest goes first, then they alternate.
        let order = names(&queue(&all));
        assert_eq!(order[..4], ["y0", "x0", "y1", "x1"]);
        let y0 = &all[301].workflow;
        assert_eq!(standing(&all, y0), (1, 0));
        // With no slot held and neither served yet, the older head goes first.
        all.retain(|s| s.phase != WorkflowPhase::Mining);
        assert_eq!(names(&queue(&all))[..3], ["x0", "y0", "x1"]);
        // The slot x held has just freed: x was served last, so y goes next.
        let mut done = seen_in("x", None, "x-done", -1, WorkflowPhase::Succeeded);
        done.started = Some(at(500));
        all.push(done);
        assert_eq!(names(&queue(&all))[..4], ["y0", "x0", "y1", "x1"]);
    }

    #[test]
    fn within_a_namespace_callers_take_turns_and_direct_creators_are_one_more() {
        let mut all: Vec<Seen> = (0..50)
            .map(|i| seen_in("ns", Some("greedy"), &format!("g{i}"), i, WorkflowPhase::Pending))
            .collect();
        all.push(seen_in("ns", Some("modest"), "m0", 100, WorkflowPhase::Pending));
        all.push(seen_in("ns", None, "direct0", 200, WorkflowPhase::Pending));
        all.push(seen_in("ns", Some("greedy"), "g-busy", -1, WorkflowPhase::Mining));
        let order = names(&queue(&all));
        assert_eq!(order[..4], ["m0", "direct0", "g0", "g1"]);
    }

    #[test]
    fn the_queue_holds_every_waiting_workflow_once() {
        let mut all = Vec::new();
        for i in 0..40i64 {
            let namespace = ["a", "b", "c"][i as usize % 3];
            let caller = [Some("p"), Some("q"), None][(i as usize / 3) % 3];
            let phase = if i % 7 == 0 { WorkflowPhase::Mining } else { WorkflowPhase::Pending };
            all.push(seen_in(namespace, caller, &format!("w{i}"), i * 13 % 17, phase));
        }
        let mut order = names(&queue(&all));
        let waiting = all.iter().filter(|s| waiting(s)).count();
        assert_eq!(order.len(), waiting);
        order.sort();
        order.dedup();
        assert_eq!(order.len(), waiting);
    }
}
