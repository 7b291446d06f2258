//! Slots taken back: who yields to the head of the queue, and when.

use super::*;

#[test]
fn a_long_block_gives_its_slot_back_once_the_head_has_waited_past_the_delay() {
    // Issue #47: another namespace's days-long blocks hold every slot.
    let mut all: Vec<Seen> =
        (0..2).map(|i| seen_in("busy", None, &format!("long-{i}"), i, Lifecycle::Active)).collect();
    all.push(seen_in("victim", Some("alice"), "short", 100, Lifecycle::Waiting));
    let me = all[0].work.clone();
    let preempting = budget(2).preempting_after(std::time::Duration::from_secs(60));
    assert_eq!(
        yield_for(&all, &me, &preempting, at(130)),
        Yield::AtBlockBoundary,
        "30 s: a boundary may come"
    );
    assert_eq!(yield_for(&all, &me, &preempting, at(160)), Yield::Now, "60 s: the slot comes back now");
    assert_eq!(
        yield_for(&all, &me, &budget(2), at(10_000)),
        Yield::AtBlockBoundary,
        "never mid-block unless set"
    );
    // When the head should look again.
    let head = &all[2].work;
    assert_eq!(preempt_in(head, &preempting, at(130)), Some(std::time::Duration::from_secs(30)));
    assert_eq!(preempt_in(head, &preempting, at(200)), Some(std::time::Duration::ZERO));
    assert_eq!(preempt_in(head, &budget(2), at(200)), None);
    // Whom the head wakes: both holders are over the victim's share of none.
    let woken: Vec<&str> =
        holders_over_share(&all, head, &preempting, at(10_000)).iter().map(|w| w.name.as_str()).collect();
    assert_eq!(woken, ["long-0", "long-1"]);
    // Once one gave its slot back and the victim mines, shares are 1 and 1:
    // nobody else is taken from, whatever the wait.
    all[0].phase = Lifecycle::Waiting;
    all[2].phase = Lifecycle::Active;
    assert_eq!(yield_for(&all, &all[1].work.clone(), &preempting, at(10_000)), Yield::Keep);
    let victim = all[2].work.clone();
    assert!(holders_over_share(&all, &victim, &preempting, at(10_000)).is_empty());
}

#[test]
fn only_a_preemptible_tool_run_is_asked_for_its_slot_back_mid_step() {
    // Issue #47: one caller's days-long tool runs hold both tool-run slots;
    // another caller's short run waits. Only a run whose tool said its steps
    // may run twice is woken to give its slot back, once the delay passed.
    let run = |name: &str, created: i64, phase, caller: &str| {
        let mut seen = seen_of(RUN, "tools", name, created, phase);
        seen.party = caller.into();
        seen
    };
    let mut all = vec![
        run("long-kept", 0, Lifecycle::Active, "alice"),
        run("long-stoppable", 1, Lifecycle::Active, "alice"),
        run("short", 100, Lifecycle::Waiting, "bob"),
    ];
    all[1].work.preemptible = true;
    let preempting = Budget::new(10).capping(RUN, 2).preempting_after(Duration::from_secs(60));
    let woken = |all: &[Seen]| -> Vec<String> {
        holders_over_share(all, &all[2].work, &preempting, at(10_000))
            .iter()
            .map(|w| w.name.clone())
            .collect()
    };
    assert_eq!(woken(&all), ["long-stoppable"], "the run that may not be stopped is never asked");
    // Both are over bob's share: which gives way is the tool's to say.
    assert_eq!(yield_for(&all, &all[1].work.clone(), &preempting, at(160)), Yield::Now);
    // Once it gave its slot back and bob's run holds one: 1 against 1, no more.
    all[1].phase = Lifecycle::Waiting;
    all[2].phase = Lifecycle::Active;
    assert!(woken(&all).is_empty());
    assert_eq!(yield_for(&all, &all[0].work.clone(), &preempting, at(10_000)), Yield::Keep);
}

#[test]
fn a_slot_taken_back_is_not_taken_back_again_by_the_work_that_gave_it() {
    // One slot, two parties' preemptible runs. Alice's ran from 0; bob's,
    // made at 100, took her slot at 170. Alice now heads the queue, made
    // long ago: counted from her creation she has "waited" past any delay,
    // and her group holds less — before this rule she preempted bob at
    // once, then bob her, each step stopped as soon as it started (seen on
    // the local cluster: 40 preemptions in two minutes, neither finished).
    let run = |name: &str, created: i64, phase, caller: &str| {
        let mut seen = seen_of(RUN, "tools", name, created, phase);
        seen.party = caller.into();
        seen.work.preemptible = true;
        seen
    };
    let mut alice = run("alice-long", 0, Lifecycle::Waiting, "alice");
    alice.work.admitted = Some(at(10));
    let mut bob = run("bob-short", 100, Lifecycle::Active, "bob");
    bob.work.admitted = Some(at(170));
    let mut all = vec![alice, bob];
    let preempting = Budget::new(10).capping(RUN, 1).preempting_after(Duration::from_secs(60));
    let (alice, bob) = (all[0].work.clone(), all[1].work.clone());
    assert!(!may_take_back(&alice, &bob), "bob took the slot while alice waited");
    assert_eq!(yield_for(&all, &bob, &preempting, at(10_000)), Yield::AtBlockBoundary);
    assert!(holders_over_share(&all, &alice, &preempting, at(10_000)).is_empty(), "nobody is woken for it");
    // Work made after bob took the slot still takes it back after the delay.
    all.push(run("carol", 200, Lifecycle::Waiting, "carol"));
    all[0].phase = Lifecycle::Succeeded;
    let carol = all[2].work.clone();
    assert!(may_take_back(&carol, &bob));
    assert_eq!(yield_for(&all, &bob, &preempting, at(230)), Yield::AtBlockBoundary, "30 s: not yet");
    assert_eq!(yield_for(&all, &bob, &preempting, at(260)), Yield::Now);
    assert_eq!(names_of(holders_over_share(&all, &carol, &preempting, at(260))), ["bob-short"]);
    // A holder that shows no admission yet was admitted a moment ago.
    all[1].work.admitted = None;
    assert!(!may_take_back(&carol, &all[1].work));
}

fn names_of(entries: Vec<&QueueEntry>) -> Vec<String> {
    entries.iter().map(|w| w.name.clone()).collect()
}

#[test]
fn a_workflow_at_its_kinds_cap_gives_way_to_a_tool_run_when_the_budget_binds_too() {
    // Both caps at the budget: the workflows fill both the budget and their
    // own cap, and a tool run of another party waits for the budget.
    let mut all: Vec<Seen> =
        (0..2).map(|i| seen_in("busy", None, &format!("long-{i}"), i, Lifecycle::Active)).collect();
    let mut run = seen_of(RUN, "busy", "run", 100, Lifecycle::Waiting);
    run.party = "alice".into();
    all.push(run);
    let budget = Budget::new(2)
        .capping(WORKFLOW, 2)
        .capping(RUN, 2)
        .preempting_after(std::time::Duration::from_secs(5));
    assert_eq!(yield_for(&all, &all[0].work, &budget, at(106)), Yield::Now, "its slot serves the run");
    // A run whose own cap is full could not take it: nobody gives way.
    let capped = budget.clone().capping(RUN, 0);
    assert_eq!(yield_for(&all, &all[0].work, &capped, at(106)), Yield::Keep);
}

/// Drives a stream of others' short work at `holder`, a preemptible piece
/// of work whose step takes `step` seconds holding the only slot: each
/// newcomer arrives a second after the holder (re)takes the slot, runs for
/// three seconds once it has it, and the holder takes the slot back at
/// once. Returns the holder's preemptions when it completed, `None` if it
/// did not within a day.
fn preemptions_under_a_stream(step: i64, delay_seconds: u64) -> Option<u32> {
    let preempting = budget(1).preempting_after(std::time::Duration::from_secs(delay_seconds));
    let mut holder = seen_in("a", Some("alice"), "long", 0, Lifecycle::Active);
    let mut held_since = 0;
    for second in 0..86_400 {
        if second - held_since >= step {
            return Some(holder.work.preemptions);
        }
        let newcomer = seen_in("b", Some("bob"), "short", held_since + 1, Lifecycle::Waiting);
        if second <= held_since {
            continue;
        }
        let all = [holder.clone(), newcomer];
        if yield_for(&all, &holder.work, &preempting, at(second)) == Yield::Now {
            // Taken back: the newcomer's call runs, then the holder resumes.
            holder.work.preemptions += 1;
            held_since = second + 3;
            holder.work.admitted = Some(at(held_since));
        }
    }
    None
}

#[test]
fn preemption_makes_progress_under_a_stream_of_short_work() {
    // Red team round 5: with a 10 s delay, a 30 s step was taken back each
    // time another caller's one-second call arrived, and never completed.
    assert_eq!(preemptions_under_a_stream(30, 10), Some(2), "10 s, then 10 s, then 30 s held");
    // The bound: at most ceil(log2(step / delay + 1)) preemptions.
    for (step, delay) in [(30, 10), (600, 60), (3_000, 5), (59, 60)] {
        let taken = preemptions_under_a_stream(step, delay).expect("completes");
        let bound = ((step as f64 / delay as f64) + 1.0).log2().ceil() as u32;
        assert!(taken <= bound, "step {step} s, delay {delay} s: {taken} preemptions > {bound}");
    }
}

#[test]
fn protection_doubles_with_each_preemption_and_runs_from_the_last_admission() {
    let after = std::time::Duration::from_secs(10);
    let mut work = seen_in("a", None, "w", 0, Lifecycle::Active).work;
    assert_eq!(protected_for(&work, after, at(0)), std::time::Duration::ZERO, "never preempted: none");
    work.preemptions = 1;
    work.admitted = Some(at(100));
    assert_eq!(protected_for(&work, after, at(100)), after);
    assert_eq!(protected_for(&work, after, at(104)), std::time::Duration::from_secs(6));
    work.preemptions = 3;
    assert_eq!(protected_for(&work, after, at(100)), after * 7);
    assert_eq!(protected_for(&work, after, at(200)), std::time::Duration::ZERO);
    work.preemptions = u32::MAX;
    assert!(protected_for(&work, after, at(100)) >= after * 1_000_000, "no overflow, still protected");
}

#[test]
fn a_head_made_in_the_second_a_holder_took_its_slot_may_take_it_back() {
    // The lost wake-up: creation times are whole seconds, admissions are
    // not. A head made at X.8 s (stored as X.0) after a holder took its
    // slot at X.3 s was taken to have waited first, and never got a slot.
    let holder_at = at(100).checked_add(jiff_millis(300)).unwrap();
    let mut holder = seen_in("busy", None, "long", 0, Lifecycle::Active);
    holder.work.admitted = Some(holder_at);
    let head = seen_in("newcomer", Some("alice"), "short", 100, Lifecycle::Waiting);
    assert!(may_take_back(&head.work, &holder.work));
    let preempting = budget(1).preempting_after(std::time::Duration::from_secs(5));
    let all = [holder.clone(), head];
    assert_eq!(yield_for(&all, &holder.work, &preempting, at(106)), Yield::Now);
    assert_eq!(names_of(holders_over_share(&all, &all[1].work, &preempting, at(106))), ["long"]);
}

#[test]
fn a_clock_behind_the_api_servers_never_counts_as_time_waited() {
    let preempting = budget(1).preempting_after(std::time::Duration::from_secs(60));
    let holder = seen_in("busy", None, "long", 0, Lifecycle::Active);
    let head = seen_in("newcomer", Some("alice"), "short", 1_000, Lifecycle::Waiting);
    let all = [holder.clone(), head.clone()];
    // `now` 500 s before the head's creation: it has waited nothing.
    assert_eq!(yield_for(&all, &holder.work, &preempting, at(500)), Yield::AtBlockBoundary);
    assert_eq!(preempt_in(&head.work, &preempting, at(500)), Some(std::time::Duration::from_secs(60)));
}

fn jiff_millis(ms: i64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_millis(ms)
}
