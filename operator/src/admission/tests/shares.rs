//! The fair-share gauges, and the cost of sorting a long queue.

use super::*;

/// docs/BENCHMARKS.md, "Queue standings with 20,000 waiting workflows":
/// run in release with `--ignored --nocapture`; prints, side by side, one
/// sort of the queue and one waiting reconcile's standing, with and
/// without the per-party and per-namespace caps.
#[test]
#[ignore = "a measurement, not a check: docs/BENCHMARKS.md"]
fn bench_queue_standings_with_twenty_thousand_waiting() {
    let mut all: Vec<Seen> = (0..20_000)
        .map(|i| {
            let namespace = format!("ns-{}", i % 5);
            let caller = (i % 13 != 0).then(|| format!("caller-{}", i % 12));
            let kind = if i % 4 == 0 { RUN } else { WORKFLOW };
            let mut seen = seen_of(kind, &namespace, &format!("w{i}"), i, Lifecycle::Waiting);
            seen.party = caller.unwrap_or_default();
            seen
        })
        .collect();
    for seen in all.iter_mut().take(50) {
        seen.phase = Lifecycle::Active;
    }
    let plain = Budget::new(70).capping(WORKFLOW, 50).capping(RUN, 20);
    let capped = plain.clone().capping_per_party(RUN, 5).capping_per_namespace(30);
    let me = all[10_001].work.clone();
    for (name, budget) in [("without caps", &plain), ("with party and namespace caps", &capped)] {
        let mut sorts = Vec::new();
        let mut standings = Vec::new();
        for _ in 0..20 {
            let started = std::time::Instant::now();
            let positions = queue_positions(&all, budget);
            sorts.push(started.elapsed());
            let started = std::time::Instant::now();
            let slots = slots_for(&me, taken_by_others(&all, &me), &positions, budget);
            standings.push(started.elapsed());
            assert!(!slots.admits());
        }
        let range = |times: &mut Vec<std::time::Duration>| {
            times.sort();
            format!("{:.2}–{:.2} ms", times[1].as_secs_f64() * 1e3, times[18].as_secs_f64() * 1e3)
        };
        println!("{name}: one sort {}, one standing {}", range(&mut sorts), range(&mut standings));
    }
}

/// Work of `party` in `namespace`, as [`seen_of`] makes it.
fn seen_party(
    kind: WorkKind,
    namespace: &str,
    party: &str,
    name: &str,
    created: i64,
    phase: Lifecycle,
) -> Seen {
    let mut seen = seen_of(kind, namespace, name, created, phase);
    seen.party = party.into();
    seen
}

#[test]
fn shares_count_classes_rank_namespaces_and_time_only_parties_left_with_nothing() {
    let all = [
        seen_party(WORKFLOW, "busy", "", "w0", 0, Lifecycle::Active),
        seen_party(WORKFLOW, "busy", "", "w1", 1, Lifecycle::Active),
        seen_party(RUN, "team", "alice", "r0", 2, Lifecycle::Active),
        seen_party(RUN, "team", "alice", "r1", 3, Lifecycle::Waiting),
        seen_party(WORKFLOW, "victim", "bob", "v0", 10, Lifecycle::Waiting),
        seen_party(RUN, "victim", "bob", "v1", 40, Lifecycle::Waiting),
        seen_party(WORKFLOW, "busy", "", "w2", 5, Lifecycle::Waiting),
        seen_party(WORKFLOW, "gone", "", "g0", 0, Lifecycle::Succeeded),
    ];
    let budget = Budget::new(3).capping_per_party(RUN, 1);
    let shares = crate::admission::shares::shares(&all, &budget, at(100), 1);
    assert_eq!(shares.held[&(WORKFLOW, PartyClass::Direct)], 2);
    assert_eq!(shares.held[&(RUN, PartyClass::Caller)], 1);
    assert_eq!(shares.waiting[&(WORKFLOW, PartyClass::Caller)], 1);
    assert_eq!(shares.waiting[&(WORKFLOW, PartyClass::Direct)], 1);
    assert_eq!(shares.by_namespace, [("busy".to_string(), 2), (OTHER_NAMESPACES.to_string(), 1)]);
    // bob holds nothing: 90 s for his workflow, 60 s for his run;
    // busy's and alice's waiting work is not counted (they hold slots).
    assert_eq!(shares.unserved_wait[&WORKFLOW], Duration::from_secs(90));
    assert_eq!(shares.unserved_wait[&RUN], Duration::from_secs(60));
    // A party kept waiting by its own cap is not unserved.
    let capped = [seen_party(RUN, "team", "carol", "c0", 0, Lifecycle::Waiting)];
    let none = Budget::new(3).capping_per_party(RUN, 0);
    assert!(crate::admission::shares::shares(&capped, &none, at(100), 5).unserved_wait.is_empty());
    assert_eq!(
        crate::admission::shares::shares(&capped, &budget, at(100), 5).unserved_wait[&RUN],
        Duration::from_secs(100)
    );
}
