//! The range decision against a simulated cluster: ranges finish in any
//! order, vanish, or lie, and the block's answer must still be exactly the
//! sequential scan's.

use mining_api::{BlockResult, GENESIS, NoWinner};
use proptest::prelude::*;

use super::*;

/// What the miner would report for this range.
fn report(block: u32, prev: &str, difficulty: u32, range: &Range<u64>) -> String {
    let count = range.end - range.start;
    let found = miner::mine_range(u64::from(block), prev, difficulty, 1, range.start, count).unwrap();
    miner::range_report(u64::from(block), prev, difficulty, (range.start, count), found.as_ref(), 1)
        .to_json_line()
}

fn done(message: String) -> BlockJob {
    BlockJob::Succeeded { message: Some(message), started: None, finished: None }
}

/// Runs the decision loop to the end. `pick` chooses which running range
/// finishes next (by position among the running ones); `vanish` says
/// whether that range's Job disappears instead of finishing.
fn simulate(
    block: u32,
    difficulty: u32,
    parallelism: u32,
    size: u64,
    mut pick: impl FnMut(usize) -> (usize, bool),
) -> (BlockResult, usize) {
    let mut jobs: Vec<RangeJob> = Vec::new();
    let mut cleared_before = 0;
    for _round in 0..10_000 {
        match decide(&jobs, cleared_before, block, GENESIS, difficulty, parallelism, size) {
            RangeStep::Decided { result, ranges, .. } => return (result, ranges),
            RangeStep::Mining { create, stop, cleared, .. } => {
                // What the operator does: record the cleared prefix, then
                // delete the finished ranges wholly below it.
                assert!(cleared >= cleared_before, "the cleared prefix never shrinks");
                cleared_before = cleared;
                jobs.retain(|j| !stop.contains(&j.name));
                jobs.retain(|j| j.state == BlockJob::Running || j.nonces().end > cleared_before);
                for range in create {
                    let name = format!("r{:x}", range.start);
                    assert!(jobs.iter().all(|j| j.name != name), "range {name} created twice");
                    let (start, count) = (range.start, range.end - range.start);
                    jobs.push(RangeJob { name, start, count, state: BlockJob::Running });
                }
                let running: Vec<usize> =
                    (0..jobs.len()).filter(|&i| jobs[i].state == BlockJob::Running).collect();
                assert!(running.len() <= parallelism as usize, "{} running", running.len());
                assert!(!running.is_empty(), "mining with nothing running");
                let (which, vanish) = pick(running.len());
                let index = running[which % running.len()];
                if vanish {
                    jobs.remove(index);
                } else {
                    let range = jobs[index].nonces();
                    jobs[index].state = done(report(block, GENESIS, difficulty, &range));
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    panic!("no decision after 10000 rounds");
}

#[test]
fn range_size_cuts_the_expected_work_and_stays_within_bounds() {
    assert_eq!(range_size(30, 2, None), 1 << 27);
    assert_eq!(range_size(10, 2, None), MIN_RANGE_SIZE);
    assert_eq!(range_size(64, 1, None), MAX_RANGE_SIZE);
    assert_eq!(range_size(30, 64, Some(1000)), 1000);
    assert_eq!(range_size(30, 0, Some(0)), 1);
}

#[test]
fn the_winner_in_the_first_range_stops_every_range_above_it() {
    let want = miner::mine_block(1, GENESIS, 8, 1).unwrap().nonce;
    let size = want + 10;
    let jobs = vec![
        RangeJob { name: "a".into(), start: 0, count: size, state: done(report(1, GENESIS, 8, &(0..size))) },
        RangeJob { name: "b".into(), start: size, count: size, state: BlockJob::Running },
    ];
    match decide(&jobs, 0, 1, GENESIS, 8, 2, size) {
        RangeStep::Decided { result, job, ranges } => {
            assert_eq!((result.nonce, job.as_str(), ranges), (want, "a", 2));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_winner_above_an_unfinished_range_waits_and_stops_only_what_lies_above_it() {
    let want = miner::mine_block(1, GENESIS, 8, 1).unwrap().nonce;
    assert!(want >= 2, "the fixture needs room below the winner");
    let size = want / 2 + 1;
    let (second, third) = (size..2 * size, 2 * size..3 * size);
    let jobs = vec![
        RangeJob { name: "first".into(), start: 0, count: size, state: BlockJob::Running },
        RangeJob {
            name: "second".into(),
            start: size,
            count: size,
            state: done(report(1, GENESIS, 8, &second)),
        },
        RangeJob { name: "third".into(), start: third.start, count: size, state: BlockJob::Running },
    ];
    match decide(&jobs, 0, 1, GENESIS, 8, 3, size) {
        RangeStep::Mining { create, stop, running, .. } => {
            assert!(create.is_empty(), "{create:?}");
            assert_eq!(stop, ["third"]);
            assert_eq!(running, 1);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_range_claiming_no_winner_where_a_verified_one_lies_is_rejected() {
    let want = miner::mine_block(1, GENESIS, 8, 1).unwrap().nonce;
    let size = want + 1;
    let lie =
        NoWinner { index: 1, prev: GENESIS.into(), difficulty: 8, start: 0, count: size, elapsed_ms: 0 };
    let overlapping = report(1, GENESIS, 8, &(want..want + 1));
    let jobs = vec![
        RangeJob { name: "liar".into(), start: 0, count: size, state: done(lie.to_json_line()) },
        RangeJob { name: "honest".into(), start: want, count: 1, state: done(overlapping) },
    ];
    let step = decide(&jobs, 0, 1, GENESIS, 8, 2, size);
    assert!(
        matches!(&step, RangeStep::Failed { reason, message } if *reason == reasons::INVALID_RESULT && message.contains("liar")),
        "{step:?}"
    );
}

#[test]
fn reports_for_another_range_or_block_or_outside_the_range_are_rejected() {
    let size = 1000;
    let wrong_range =
        NoWinner { index: 1, prev: GENESIS.into(), difficulty: 8, start: 5, count: size, elapsed_ms: 0 };
    let wrong_block =
        NoWinner { index: 2, prev: GENESIS.into(), difficulty: 8, start: 0, count: size, elapsed_ms: 0 };
    let want = miner::mine_block(1, GENESIS, 8, 1).unwrap().nonce;
    let outside = report(1, GENESIS, 8, &(want..want + 1));
    for message in [wrong_range.to_json_line(), wrong_block.to_json_line(), "{]".into()] {
        let jobs = [RangeJob { name: "r0".into(), start: 0, count: size, state: done(message.clone()) }];
        let step = decide(&jobs, 0, 1, GENESIS, 8, 1, size);
        assert!(
            matches!(step, RangeStep::Failed { reason: reasons::INVALID_RESULT, .. }),
            "{message}: {step:?}"
        );
    }
    let jobs = [RangeJob { name: "r".into(), start: want + 1, count: size, state: done(outside) }];
    let step = decide(&jobs, 0, 1, GENESIS, 8, 1, size);
    assert!(matches!(&step, RangeStep::Failed { message, .. } if message.contains("outside")), "{step:?}");
}

#[test]
fn a_finished_range_without_a_result_is_lost_and_a_failed_one_fails_the_block() {
    let lost = [RangeJob {
        name: "r0".into(),
        start: 0,
        count: 10,
        state: BlockJob::Succeeded { message: None, started: None, finished: None },
    }];
    assert!(matches!(decide(&lost, 0, 1, GENESIS, 8, 2, 10), RangeStep::Lost { job, .. } if job == "r0"));
    let failed = [RangeJob {
        name: "r0".into(),
        start: 0,
        count: 10,
        state: BlockJob::Failed { reason: "BackoffLimitExceeded".into(), message: "oom".into() },
    }];
    assert!(matches!(
        decide(&failed, 0, 1, GENESIS, 8, 2, 10),
        RangeStep::Failed { reason: reasons::JOB_FAILED, .. }
    ));
}

#[test]
fn a_block_starts_with_parallelism_ranges_from_zero() {
    match decide(&[], 0, 1, GENESIS, 8, 3, 100) {
        RangeStep::Mining { create, stop, running, cleared, refilled } => {
            assert_eq!(create, [0..100, 100..200, 200..300]);
            assert!(stop.is_empty());
            assert_eq!((running, cleared, refilled), (0, 0, 0));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_top_of_the_nonce_space_ends_the_search_instead_of_wrapping() {
    let start = u64::MAX - 10;
    let none = NoWinner { index: 1, prev: GENESIS.into(), difficulty: 64, start, count: 10, elapsed_ms: 0 };
    let jobs = [RangeJob { name: "top".into(), start, count: 10, state: done(none.to_json_line()) }];
    match decide(&jobs, 0, 1, GENESIS, 64, 2, 10) {
        RangeStep::Mining { create, .. } => {
            // Below `start` is a hole to fill; nothing is created past the top.
            assert!(create.iter().all(|r| r.end <= start), "{create:?}");
        }
        other => panic!("{other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any finishing order, any Job vanishing, any parallelism and range
    /// size: the same nonce as one sequential scan.
    #[test]
    fn ranges_in_any_order_find_the_sequential_answer(
        block in 1u32..=64,
        difficulty in 1u32..=10,
        parallelism in 1u32..=6,
        size in 1u64..=700,
        choices in proptest::collection::vec((0usize..8, 0u8..10), 1..64),
    ) {
        let want = miner::mine_block(u64::from(block), GENESIS, difficulty, 1).unwrap();
        let mut next = 0;
        let (result, _) = simulate(block, difficulty, parallelism, size, |_| {
            let (which, vanish) = choices[next % choices.len()];
            next += 1;
            // Vanishing at most a few times keeps the run finite.
            (which, vanish == 0 && next < 40)
        });
        prop_assert_eq!(result.nonce, want.nonce);
        prop_assert_eq!(result.hash, miner::hex_upper(&want.digest));
    }
}

#[test]
fn a_cleared_prefix_from_the_status_stands_in_for_deleted_ranges() {
    let want = miner::mine_block(1, GENESIS, 8, 1).unwrap().nonce;
    assert!(want >= 2, "the fixture needs room below the winner");
    let cut = want / 2;
    // The ranges below `cut` are gone; the status says they held no winner.
    let rest = report(1, GENESIS, 8, &(cut..want + 1));
    let jobs = [RangeJob { name: "upper".into(), start: cut, count: want + 1 - cut, state: done(rest) }];
    match decide(&jobs, cut, 1, GENESIS, 8, 2, 1000) {
        RangeStep::Decided { result, .. } => assert_eq!(result.nonce, want),
        other => panic!("{other:?}"),
    }
    // Without it, the same Jobs leave a hole that is mined again.
    match decide(&jobs, 0, 1, GENESIS, 8, 2, 1000) {
        RangeStep::Mining { create, refilled, .. } => {
            assert_eq!(create.len(), 1);
            assert_eq!((create[0].clone(), refilled), (0..cut, 1));
        }
        other => panic!("{other:?}"),
    }
}
