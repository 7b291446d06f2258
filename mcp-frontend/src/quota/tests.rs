use super::*;
use proptest::prelude::*;

const QUOTAS: Quotas = Quotas { max_running: 3, max_starts_per_minute: 5 };

fn names(list: &[&str]) -> HashSet<String> {
    list.iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_start_under_both_quotas_is_recorded_as_a_start_and_a_reservation() {
    let next = admit(&Ledger::default(), &names(&[]), 0, "mw-a", 1_000, QUOTAS).unwrap();
    assert_eq!(next.starts, [1_000]);
    assert_eq!(next.reserved.get("mw-a"), Some(&1_000));
}

#[test]
fn reservations_not_yet_listed_count_against_the_running_quota() {
    let mut ledger = Ledger::default();
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        ledger = admit(&ledger, &names(&[]), 0, name, 1_000 + i as i64, QUOTAS).unwrap();
    }
    // Nothing is listed yet (the creates are in flight): the fourth waits.
    let refused = admit(&ledger, &names(&[]), 0, "d", 1_003, QUOTAS).unwrap_err();
    assert_eq!(refused, QuotaRefusal::Running { unfinished: 3, limit: 3 });
    assert!(refused.to_string().contains("the limit is 3"), "{refused}");
    // Once listed, a workflow counts by its phase: two finished, one not.
    let next = admit(&ledger, &names(&["a", "b", "c"]), 1, "d", 1_004, QUOTAS).unwrap();
    assert_eq!(next.reserved.keys().collect::<Vec<_>>(), ["d"]);
}

#[test]
fn a_reservation_whose_create_failed_expires() {
    let ledger = Ledger { starts: vec![], reserved: [("lost".to_string(), 1_000)].into() };
    let quotas = Quotas { max_running: 1, ..QUOTAS };
    assert!(admit(&ledger, &names(&[]), 0, "x", 1_000 + RESERVATION_SECONDS - 1, quotas).is_err());
    assert!(admit(&ledger, &names(&[]), 0, "x", 1_000 + RESERVATION_SECONDS, quotas).is_ok());
}

#[test]
fn the_rate_quota_says_when_to_retry() {
    let ledger = Ledger { starts: vec![100, 110, 120, 130, 140], reserved: Default::default() };
    let refused = admit(&ledger, &names(&[]), 0, "x", 150, QUOTAS).unwrap_err();
    assert_eq!(refused, QuotaRefusal::Rate { limit: 5, retry_after_seconds: 10 });
    assert!(refused.to_string().contains("retry in 10 seconds"), "{refused}");
    // A minute after the oldest start, one more may go.
    let next = admit(&ledger, &names(&[]), 0, "x", 160, QUOTAS).unwrap();
    assert_eq!(next.starts, [110, 120, 130, 140, 160]);
}

#[test]
fn only_the_frontends_own_ledger_counts() {
    let keys = OwnershipKeys::new(vec![7; 32], None).unwrap();
    let mut lease = Lease::default();
    lease.metadata.name = Some("mcp-quota-x".into());
    let full = Ledger { starts: vec![1; 50], reserved: [("a".to_string(), 1)].into() };
    write_ledger(&keys, "ns", &mut lease, &full);
    assert_eq!(read_ledger(&keys, "ns", &lease), full);
    // The same ledger read for another namespace or Lease is not ours.
    assert_eq!(read_ledger(&keys, "other", &lease), Ledger::default());
    // A ledger somebody else filled to lock the caller out counts as empty.
    let forged = serde_json::to_string(&Ledger { starts: vec![1; 99], ..full.clone() }).unwrap();
    lease.metadata.annotations.as_mut().unwrap().insert(LEDGER.into(), forged);
    assert_eq!(read_ledger(&keys, "ns", &lease), Ledger::default());
    let other_keys = OwnershipKeys::new(vec![8; 32], None).unwrap();
    write_ledger(&other_keys, "ns", &mut lease, &full);
    assert_eq!(read_ledger(&keys, "ns", &lease), Ledger::default());
}

proptest! {
    /// Whatever the ledger, the list and the time, an admitted start never
    /// takes the caller over either quota, and the ledger stays bounded.
    #[test]
    fn an_admitted_start_never_exceeds_a_quota(
        starts in proptest::collection::vec(-10_000i64..10_000, 0..40),
        reserved in proptest::collection::btree_map("[a-e]", -10_000i64..10_000, 0..5),
        listed in proptest::collection::hash_set("[a-e]", 0..5),
        unfinished in 0usize..10,
        now in -10_000i64..10_000,
        max_running in 1u32..8,
        max_starts_per_minute in 1u32..8,
    ) {
        let quotas = Quotas { max_running, max_starts_per_minute };
        let ledger = Ledger { starts, reserved };
        if let Ok(next) = admit(&ledger, &listed, unfinished, "new", now, quotas) {
            let recent = next.starts.iter().filter(|at| now - **at < RATE_WINDOW_SECONDS).count();
            prop_assert!(recent <= max_starts_per_minute as usize);
            prop_assert!(unfinished + next.reserved.len() <= max_running as usize);
            prop_assert!(next.reserved.contains_key("new"));
        }
    }
}
