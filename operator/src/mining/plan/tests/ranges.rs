//! Blocks mined in ranges (`parallelism` > 1): the same chain as one Job a
//! block would mine, and what a change of parallelism does.

use super::*;

/// A chain mined with `spec.parallelism` 2, every range's report computed
/// by the real miner: the same blocks as one Pod per block, range Jobs
/// cleaned up once each block is recorded, and the status telling how far
/// the ranges got.
#[test]
fn a_parallel_chain_is_mined_in_ranges_and_equals_the_sequential_one() {
    let mut limits = limits();
    limits.nonce_range_size = Some(300);
    let mut wf = workflow("w", 10, 2);
    wf.spec.parallelism = 2;
    let mut ranges: BTreeMap<u32, Vec<RangeJob>> = BTreeMap::new();
    let mut prev: String;
    let mut created_for_block_one = Vec::new();
    for _round in 0..200 {
        let plan = plan(&in_ranges(&wf, &ranges, Yield::Keep), &limits);
        for action in &plan.actions {
            if let Action::CreateRangeJob { block, prev: p, difficulty, start, .. } = action {
                let recorded = (*block > 1).then(|| plan.status.blocks[*block as usize - 2].hash.clone());
                assert_eq!((p.clone(), *difficulty), (recorded.unwrap_or(GENESIS.into()), 10));
                if *block == 1 {
                    created_for_block_one.push(*start);
                }
            }
        }
        apply_to_ranges(&plan, &mut ranges);
        wf = with_status(wf, &plan);
        let status = wf.status.as_ref().unwrap();
        if status.phase == Some(WorkflowPhase::Succeeded) {
            let want = [mined(1, GENESIS, 10), mined(2, &mined(1, GENESIS, 10).hash, 10)];
            let got: Vec<(u64, &str)> = status.blocks.iter().map(|b| (b.nonce, b.hash.as_str())).collect();
            assert_eq!(got, want.iter().map(|r| (r.nonce, r.hash.as_str())).collect::<Vec<_>>());
            assert!(status.blocks.iter().all(|b| b.minimality_checked && b.job_name.contains("-r")));
            assert!(ranges.values().flatten().count() <= 2, "only the winners' Jobs remain: {ranges:?}");
            assert_eq!(created_for_block_one[..2], [0, 300], "two ranges from nonce 0 at once");
            return;
        }
        prev = status.blocks.last().map_or(GENESIS.to_string(), |b| b.hash.clone());
        let running = ranges.values().flatten().filter(|j| j.state == BlockJob::Running).count();
        assert!(running <= 2, "{running} ranges at once");
        if status.message.as_deref().is_some_and(|m| m.contains("in 2 Pods")) {
            assert!(status.message.as_deref().unwrap().contains("no winner below nonce"));
        }
        // The highest running range finishes first: the worst order for a
        // naive "first winner wins".
        let block = status.current_block.unwrap();
        let Some(job) = ranges.get_mut(&block).and_then(|jobs| {
            jobs.iter_mut().filter(|j| j.state == BlockJob::Running).max_by_key(|j| j.start)
        }) else {
            continue;
        };
        let found = miner::mine_range(block.into(), &prev, 10, 1, job.start, job.count).unwrap();
        let report = miner::range_report(block.into(), &prev, 10, (job.start, job.count), found.as_ref(), 1);
        let message = report.to_json_line();
        job.state = BlockJob::Succeeded { message: Some(message), started: None, finished: None };
    }
    panic!("the chain did not finish");
}

#[test]
fn parallelism_above_the_operators_limit_is_capped_and_said_so() {
    let mut limits = limits();
    limits.max_parallelism = 3;
    let mut wf = workflow("w", 20, 1);
    wf.spec.parallelism = 64;
    let observed = Observed {
        workflow: &wf,
        jobs: BTreeMap::new(),
        ranges: BTreeMap::new(),
        slots: crate::admission::Slots {
            taken: 0,
            limit: 2,
            ahead: 0,
            binding: crate::admission::Limit::Kind,
        },
        yielding: Yield::Keep,
        waiting_for_node: None,
        give_way: None,
        now: at(0),
    };
    let plan = plan(&observed, &limits);
    let created = plan.actions.iter().filter(|a| matches!(a, Action::CreateRangeJob { .. })).count();
    assert_eq!(created, 3);
    let started = plan.events.iter().find(|e| e.reason == reasons::BLOCK_STARTED).unwrap();
    assert!(
        started.note.contains("in 3 Pods") && started.note.contains("above this operator's limit"),
        "{}",
        started.note
    );
}

#[test]
fn a_block_begun_in_ranges_stays_in_ranges_when_parallelism_drops_to_one() {
    let mut wf = workflow("w", 20, 1);
    wf.spec.parallelism = 2;
    let mut status = observe(&wf, &[], at(0)).status;
    // Every Job so far was cleaned up below the recorded prefix.
    status.no_winner_below = Some(1 << 22);
    wf.status = Some(status);
    wf.spec.parallelism = 1;
    let plan = observe(&wf, &[], at(1));
    assert_eq!(
        plan.actions,
        [Action::CreateRangeJob {
            block: 1,
            prev: GENESIS.into(),
            difficulty: 20,
            start: 1 << 22,
            count: 1 << 22
        }],
        "no whole-block Job from nonce 0, and no second BlockStarted"
    );
    assert!(plan.events.iter().all(|e| e.reason != reasons::BLOCK_STARTED), "{:?}", plan.events);
}
