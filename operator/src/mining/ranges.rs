//! One block mined by several Pods, each scanning a range of its nonces
//! (pure: no client).
//!
//! The block's answer is the smallest winning nonce, exactly what one
//! sequential scan finds. Ranges are handed out lowest first, at most
//! `parallelism` running at once. The smallest verified winner `w` decides
//! the block once every nonce below it is known to hold no winner: covered
//! by ranges that reported none, or by the winner's own range, whose miner
//! returns the smallest winner within it. Ranges entirely above `w` are not
//! needed and are stopped; ranges below it must finish.

use std::ops::Range;

use mining_api::{BlockResult, RangeReport, reasons};

use crate::mining::observe::{BlockJob, RangeJob};

/// Smallest range the operator hands out on its own: about 0.1 s of one
/// core, so a Pod's start-up is not most of its work.
pub const MIN_RANGE_SIZE: u64 = 1 << 22;
/// Largest range it hands out on its own (hours of a core).
pub const MAX_RANGE_SIZE: u64 = 1 << 40;
/// Ranges per Pod the expected work is cut into: the block's last ranges
/// below the winner run while nothing else can, so smaller ranges waste
/// less there, and larger ones pay a Pod start less often.
const RANGES_PER_POD: u64 = 4;

/// Nonces per range: `configured` when set, else the expected work of the
/// block (2^difficulty nonces) cut into [`RANGES_PER_POD`] ranges per Pod.
pub fn range_size(difficulty: u32, parallelism: u32, configured: Option<u64>) -> u64 {
    configured.map_or_else(
        || {
            let expected = 1u64.checked_shl(difficulty).unwrap_or(u64::MAX);
            let cuts = RANGES_PER_POD.saturating_mul(u64::from(parallelism.max(1)));
            (expected / cuts).clamp(MIN_RANGE_SIZE, MAX_RANGE_SIZE)
        },
        |size| size.max(1),
    )
}

/// What a block mined in ranges needs next.
#[derive(Debug, Clone, PartialEq)]
pub enum RangeStep {
    /// Every nonce below the winner holds none: the block's answer.
    Decided {
        result: BlockResult,
        job: String,
        ranges: usize,
    },
    /// Keep mining: create these ranges, stop these Jobs.
    Mining {
        create: Vec<Range<u64>>,
        stop: Vec<String>,
        /// Ranges created again because their Job vanished before finishing.
        refilled: usize,
        /// Nonces from 0 known to hold no winner.
        cleared: u64,
        running: usize,
    },
    /// A finished range's result is gone with its Pod: delete its Job, and
    /// the range is mined again.
    Lost {
        job: String,
        why: String,
    },
    Failed {
        reason: &'static str,
        message: String,
    },
}

/// Decides a block mined in ranges from its range Jobs (any order) and
/// `cleared_before`: nonces below it are known to hold no winner (recorded
/// in the status, so that the Jobs that found that out can go).
pub fn decide(
    jobs: &[RangeJob],
    cleared_before: u64,
    block: u32,
    prev: &str,
    difficulty: u32,
    parallelism: u32,
    size: u64,
) -> RangeStep {
    let mut cleared: Vec<Range<u64>> = std::iter::once(0..cleared_before).collect();
    let mut winner: Option<(&RangeJob, BlockResult)> = None;
    for job in jobs {
        match &job.state {
            BlockJob::Running | BlockJob::Blocked(_) => {}
            BlockJob::Failed { reason, message } => {
                let message = format!("block {block}: Job {} failed ({reason}): {message}", job.name);
                return RangeStep::Failed { reason: reasons::JOB_FAILED, message };
            }
            BlockJob::Succeeded { message, .. } => {
                let Some(text) = message.as_deref().filter(|m| !m.trim().is_empty()) else {
                    let why = format!("range {} of block {block} completed without a result", describe(job));
                    return RangeStep::Lost { job: job.name.clone(), why };
                };
                match verify_report(text, job, block, prev, difficulty) {
                    Err(message) => return RangeStep::Failed { reason: reasons::INVALID_RESULT, message },
                    Ok(None) => cleared.push(job.nonces()),
                    Ok(Some(result)) => {
                        // The winner's own range holds none below it.
                        cleared.push(job.start..result.nonce);
                        if winner.as_ref().is_none_or(|(_, best)| result.nonce < best.nonce) {
                            winner = Some((job, result));
                        }
                    }
                }
            }
        }
    }
    let bound = winner.as_ref().map_or(u64::MAX, |(_, result)| result.nonce);
    // A range that reported none although a verified winner lies in it lied.
    if let Some(liar) = jobs.iter().find(|j| {
        j.nonces().contains(&bound)
            && matches!(&j.state, BlockJob::Succeeded { message: Some(m), .. }
                if matches!(RangeReport::from_json(m), Ok(RangeReport::NoWinner(_))))
    }) {
        let message = format!(
            "block {block}: result rejected: range {} reported no winner, but nonce {bound} in it has \
             {difficulty} leading zero bits",
            describe(liar)
        );
        return RangeStep::Failed { reason: reasons::INVALID_RESULT, message };
    }
    let clear_prefix = covered_prefix(cleared);
    if let Some((job, result)) = winner
        && clear_prefix >= result.nonce
    {
        return RangeStep::Decided { result, job: job.name.clone(), ranges: jobs.len() };
    }
    // Not decided: stop what lies wholly above the winner, fill what is
    // missing below it, then extend lowest first up to `parallelism`.
    let stop: Vec<String> =
        (jobs.iter()).filter(|j| j.state.is_running() && j.start > bound).map(|j| j.name.clone()).collect();
    let kept: Vec<Range<u64>> = (jobs.iter().filter(|j| !stop.contains(&j.name)).map(RangeJob::nonces))
        .chain(std::iter::once(0..cleared_before))
        .collect();
    let running = jobs.iter().filter(|j| j.state.is_running() && !stop.contains(&j.name)).count();
    let frontier = kept.iter().map(|r| r.end).max().unwrap_or(0);
    let holes = gaps(kept, frontier.min(bound));
    let refilled = holes.len();
    let fresh = (0..).scan(frontier, |next, _| {
        let start = *next;
        (start < bound && start < u64::MAX).then(|| {
            *next = start.saturating_add(size).min(bound);
            start..*next
        })
    });
    let slots = (parallelism.max(1) as usize).saturating_sub(running);
    let create: Vec<Range<u64>> =
        holes.into_iter().flat_map(|hole| split(hole, size)).chain(fresh).take(slots).collect();
    if running == 0 && create.is_empty() && jobs.iter().all(|j| !j.state.is_running()) {
        let message = format!("block {block}: no nonce below {bound} reaches difficulty {difficulty}");
        return RangeStep::Failed { reason: reasons::INVALID_RESULT, message };
    }
    RangeStep::Mining { create, stop, refilled: refilled.min(slots), cleared: clear_prefix, running }
}

/// Checks a range's report: a winner must verify and lie in the range; a
/// no-winner report must name exactly this block and range.
fn verify_report(
    text: &str,
    job: &RangeJob,
    block: u32,
    prev: &str,
    difficulty: u32,
) -> Result<Option<BlockResult>, String> {
    let reject = |why: String| format!("block {block}: result rejected: range {}: {why}", describe(job));
    let report = RangeReport::from_json(text).map_err(|e| reject(format!("unreadable result ({e})")))?;
    match report {
        RangeReport::Winner(result) => {
            miner::verify_result(&result, u64::from(block), prev, difficulty)
                .map_err(|e| reject(e.to_string()))?;
            if !job.nonces().contains(&result.nonce) {
                return Err(reject(format!("nonce {} is outside the range", result.nonce)));
            }
            if result.nonce > mining_api::bounds::MAX_STORED_INTEGER {
                return Err(reject(format!("nonce {} is too large for a status", result.nonce)));
            }
            Ok(Some(result))
        }
        RangeReport::NoWinner(none) => {
            let asked = (u64::from(block), prev, difficulty, job.start, job.count);
            let told = (none.index, none.prev.as_str(), none.difficulty, none.start, none.count);
            if asked != told {
                return Err(reject(format!(
                    "the no-winner report is for block {}, prev {}, difficulty {}, nonces {}+{}",
                    told.0, told.1, told.2, told.3, told.4
                )));
            }
            Ok(None)
        }
    }
}

fn describe(job: &RangeJob) -> String {
    format!("{}..{} ({})", job.start, job.start.saturating_add(job.count), job.name)
}

/// The end of the longest prefix `0..end` the ranges cover together.
fn covered_prefix(mut ranges: Vec<Range<u64>>) -> u64 {
    ranges.sort_by_key(|r| r.start);
    let mut end = 0;
    for range in ranges {
        if range.start > end {
            break;
        }
        end = end.max(range.end);
    }
    end
}

/// The parts of `0..limit` no range covers, lowest first.
fn gaps(mut ranges: Vec<Range<u64>>, limit: u64) -> Vec<Range<u64>> {
    ranges.sort_by_key(|r| r.start);
    let mut holes = Vec::new();
    let mut end = 0;
    for range in ranges {
        if range.start >= limit {
            break;
        }
        if range.start > end {
            holes.push(end..range.start);
        }
        end = end.max(range.end);
    }
    if end < limit {
        holes.push(end..limit);
    }
    holes
}

fn split(range: Range<u64>, size: u64) -> impl Iterator<Item = Range<u64>> {
    let size = size.max(1);
    (0..).scan(range.start, move |next, _| {
        let start = *next;
        (start < range.end).then(|| {
            *next = start.saturating_add(size).min(range.end);
            start..*next
        })
    })
}

#[cfg(test)]
mod tests;
