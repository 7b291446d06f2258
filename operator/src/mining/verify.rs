//! Checks on what miners report: a block's result against what was asked,
//! and that its nonce is the smallest (pure: no client).

use mining_api::bounds::MAX_STORED_INTEGER;
pub use mining_api::pow::clip;
use mining_api::{BlockResult, reasons};

/// Parses and verifies a block's termination message, and — when the nonce
/// is at most `minimality_budget` — that no smaller nonce meets the
/// difficulty (a sequential scan up to it: at most that many hashes).
/// Returns the result and whether minimality was checked. Errors carry the
/// reason for the condition and a sentence for people.
pub fn verify_block_result(
    message: Option<&str>,
    block: u32,
    prev: &str,
    difficulty: u32,
    minimality_budget: u64,
) -> Result<(BlockResult, bool), (&'static str, String)> {
    let Some(text) = message.filter(|m| !m.trim().is_empty()) else {
        return Err((reasons::MISSING_RESULT, "the miner's Pod completed without a result".into()));
    };
    let result = BlockResult::from_json(text)
        .map_err(|e| (reasons::INVALID_RESULT, format!("unreadable result ({e}): {}", clip(text, 200))))?;
    // A status holds int64 integers; a larger nonce could be verified but never recorded.
    if result.nonce > MAX_STORED_INTEGER || result.attempts > MAX_STORED_INTEGER {
        return Err((
            reasons::INVALID_RESULT,
            format!(
                "result rejected: nonce {} is above {MAX_STORED_INTEGER}, the largest a status can hold",
                result.nonce
            ),
        ));
    }
    miner::verify_result(&result, block as u64, prev, difficulty)
        .map_err(|e| (reasons::INVALID_RESULT, format!("result rejected: {e}")))?;
    let minimal = check_minimality(&result, block, prev, difficulty, minimality_budget)?;
    Ok((result, minimal))
}

/// When a verified result's nonce is at most `minimality_budget`, checks
/// that no smaller nonce meets the difficulty (a sequential scan up to it:
/// at most that many hashes). Returns whether it checked.
pub fn check_minimality(
    result: &BlockResult,
    block: u32,
    prev: &str,
    difficulty: u32,
    minimality_budget: u64,
) -> Result<bool, (&'static str, String)> {
    if result.nonce > minimality_budget {
        return Ok(false);
    }
    // The claimed nonce is valid, so the scan stops at it at the latest.
    let smallest = miner::mine_block(u64::from(block), prev, difficulty, 1)
        .map_err(|e| (reasons::INVALID_RESULT, format!("result rejected: {e}")))?;
    if smallest.nonce != result.nonce {
        return Err((
            reasons::INVALID_RESULT,
            format!(
                "result rejected: nonce {} is not the smallest; nonce {} already has {difficulty} leading zero bits",
                result.nonce, smallest.nonce
            ),
        ));
    }
    Ok(true)
}
