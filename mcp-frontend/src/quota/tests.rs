use super::*;
use proptest::prelude::*;

const QUOTAS: Quotas = Quotas { max_running: 3, max_starts_per_minute: 5 };

fn all(state: Held) -> impl Fn(&str) -> Held {
    move |_| state
}

#[test]
fn a_start_under_both_quotas_is_recorded_as_a_start_and_a_held_workflow() {
    let next = admit(&Ledger::default(), all(Held::NotSeen), "mw-a", 1_000, QUOTAS).unwrap();
    assert_eq!(next.starts, [1_000]);
    assert_eq!(next.reserved.get("mw-a"), Some(&1_000));
}

#[test]
fn held_workflows_count_until_they_finish() {
    let mut ledger = Ledger::default();
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        ledger = admit(&ledger, all(Held::NotSeen), name, 1_000 + i as i64, QUOTAS).unwrap();
    }
    // Not seen yet (creates in flight) or mining: the fourth waits.
    for state in [Held::NotSeen, Held::Unfinished] {
        let refused = admit(&ledger, all(state), "d", 1_003, QUOTAS).unwrap_err();
        assert_eq!(refused, QuotaRefusal::Running { unfinished: 3, limit: 3 });
        assert!(refused.to_string().contains("the limit is 3"), "{refused}");
    }
    // Once one has finished, it is released and the start goes.
    let next = admit(
        &ledger,
        |name| if name == "b" { Held::Released } else { Held::Unfinished },
        "d",
        1_004,
        QUOTAS,
    )
    .unwrap();
    assert_eq!(next.reserved.keys().collect::<Vec<_>>(), ["a", "c", "d"]);
}

#[test]
fn a_held_workflow_that_never_appeared_stops_counting() {
    let ledger =
        Ledger { starts: vec![], reserved: [("lost".to_string(), 1_000)].into(), ..Ledger::default() };
    let quotas = Quotas { max_running: 1, ..QUOTAS };
    assert!(admit(&ledger, all(Held::NotSeen), "x", 1_000 + RESERVATION_SECONDS - 1, quotas).is_err());
    assert!(admit(&ledger, all(Held::NotSeen), "x", 1_000 + RESERVATION_SECONDS, quotas).is_ok());
    // One that is mining counts however old it is.
    assert!(admit(&ledger, all(Held::Unfinished), "x", 1_000_000, quotas).is_err());
}

#[test]
fn the_rate_quota_says_when_to_retry() {
    let ledger =
        Ledger { starts: vec![100, 110, 120, 130, 140], reserved: Default::default(), ..Ledger::default() };
    let refused = admit(&ledger, all(Held::NotSeen), "x", 150, QUOTAS).unwrap_err();
    assert_eq!(refused, QuotaRefusal::Rate { limit: 5, retry_after_seconds: 10 });
    assert!(refused.to_string().contains("retry in 10 seconds"), "{refused}");
    // A minute after the oldest start, one more may go.
    let next = admit(&ledger, all(Held::NotSeen), "x", 160, QUOTAS).unwrap();
    assert_eq!(next.starts, [110, 120, 130, 140, 160]);
}

#[test]
fn only_the_frontends_own_ledger_counts() {
    let keys = OwnershipKeys::new(vec![7; 32], None).unwrap();
    let mut object = MiningLedger::new("mcp-quota-x", MiningLedgerSpec::default());
    let full = Ledger { starts: vec![1; 50], reserved: [("a".to_string(), 1)].into(), ..Ledger::default() };
    write_ledger(&keys, "ns", &mut object, &full);
    assert_eq!(read_ledger(&keys, "ns", &object), Some(full.clone()));
    // The same ledger read for another namespace or name is not ours.
    assert_eq!(read_ledger(&keys, "other", &object), None);
    let mut moved = object.clone();
    moved.metadata.name = Some("mcp-quota-y".into());
    assert_eq!(read_ledger(&keys, "ns", &moved), None);
    // A ledger somebody else filled to lock the caller out is not taken.
    object.spec.ledger = serde_json::to_string(&Ledger { starts: vec![1; 99], ..full.clone() }).unwrap();
    assert_eq!(read_ledger(&keys, "ns", &object), None);
    let other_keys = OwnershipKeys::new(vec![8; 32], None).unwrap();
    write_ledger(&other_keys, "ns", &mut object, &full);
    assert_eq!(read_ledger(&keys, "ns", &object), None);
}

#[test]
fn the_fullest_ledger_fits_its_schema_bound() {
    // The highest quotas the flags allow, every start this second and every
    // held name as long as a Kubernetes name can be.
    let fullest = Ledger {
        starts: vec![i64::MAX; 1_000],
        reserved: (0..1_000).map(|i| (format!("{i:0>63}"), i64::MAX)).collect(),
        // Every one a call of a tool whose name is as long as it can be.
        tools: (0..1_000).map(|i| (format!("{i:0>63}"), "t".repeat(63))).collect(),
    };
    let text = serde_json::to_string(&fullest).unwrap();
    assert!(text.len() <= mining_api::MAX_LEDGER_BYTES as usize, "{} bytes", text.len());
    let keys = OwnershipKeys::new(vec![7; 32], None).unwrap();
    assert!(keys.ledger_proof("ns", "n", &text).len() <= mining_api::MAX_LEDGER_PROOF_BYTES as usize);
}

fn held_state() -> impl Strategy<Value = Held> {
    prop_oneof![Just(Held::Unfinished), Just(Held::Released), Just(Held::NotSeen)]
}

proptest! {
    /// Whatever the ledger, what became of its workflows and the time, an
    /// admitted start never takes the caller over either quota, everything
    /// still mining stays held, and the ledger stays bounded.
    #[test]
    fn an_admitted_start_never_exceeds_a_quota(
        starts in proptest::collection::vec(-10_000i64..10_000, 0..40),
        reserved in proptest::collection::btree_map("[a-h]", -10_000i64..10_000, 0..8),
        states in proptest::collection::vec(held_state(), 8),
        now in -10_000i64..10_000,
        max_running in 1u32..8,
        max_starts_per_minute in 1u32..8,
    ) {
        let quotas = Quotas { max_running, max_starts_per_minute };
        let state = |name: &str| states[(name.as_bytes()[0] - b'a') as usize % states.len()];
        let ledger = Ledger { starts, reserved, ..Ledger::default() };
        if let Ok(next) = admit(&ledger, state, "new", now, quotas) {
            let recent = next.starts.iter().filter(|at| now - **at < RATE_WINDOW_SECONDS).count();
            prop_assert!(recent <= max_starts_per_minute as usize);
            prop_assert!(next.reserved.len() <= max_running as usize);
            prop_assert!(next.reserved.contains_key("new"));
            for name in ledger.reserved.keys() {
                if state(name) == Held::Unfinished {
                    prop_assert!(next.reserved.contains_key(name), "{name} is mining and was released");
                }
            }
        }
    }
}

#[test]
fn a_tools_own_limit_holds_under_a_burst_and_counts_only_its_calls() {
    // Finding 12 of the tool boundary: three calls at once of a tool whose limit is 1.
    let limit = Some(ToolLimit { tool: "deploy", limit: 1 });
    let first = admit_call(&Ledger::default(), all(Held::NotSeen), "mw-a", limit, 1_000, QUOTAS).unwrap();
    // The two racing writers re-read the ledger the first one wrote.
    for name in ["mw-b", "mw-c"] {
        let refused = admit_call(&first, all(Held::NotSeen), name, limit, 1_000, QUOTAS).unwrap_err();
        assert_eq!(refused, QuotaRefusal::ToolRunning { tool: "deploy".into(), unfinished: 1, limit: 1 });
        assert!(refused.to_string().contains("its limit is 1"), "{refused}");
    }
    // Another tool and mining are not limited by it.
    let other = Some(ToolLimit { tool: "sum", limit: 1 });
    let next = admit_call(&first, all(Held::NotSeen), "mw-d", other, 1_000, QUOTAS).unwrap();
    assert!(admit(&next, all(Held::NotSeen), "mw-e", 1_000, QUOTAS).is_ok());
    // Once the call finished, the next one goes; the finished call is forgotten.
    let released = |name: &str| if name == "mw-a" { Held::Released } else { Held::NotSeen };
    let again = admit_call(&first, released, "mw-f", limit, 1_001, QUOTAS).unwrap();
    assert_eq!(again.tools.get("mw-a"), None);
    assert_eq!(again.tools.get("mw-f").map(String::as_str), Some("deploy"));
}

#[test]
fn a_ledger_of_the_previous_release_reads() {
    let old: Ledger = serde_json::from_str(r#"{"starts":[1],"reserved":{"mw-a":1}}"#).unwrap();
    assert!(old.tools.is_empty());
    assert!(
        !serde_json::to_string(&Ledger::default()).unwrap().contains("tools"),
        "old readers see no change"
    );
}
