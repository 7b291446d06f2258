//! Proof-of-work mining of one block: the smallest nonce such that
//! SHA-256(`"{index}:{prev}:{nonce}"`) has `difficulty` leading zero bits.
//!
//! [`mine_block`] is the fast, parallel search; [`block_hash`] and
//! [`verify_result`] are the plain, independent check the operator runs on
//! every result it reads.

pub mod search;
mod shani;

use mining_api::{BlockResult, GENESIS, NoWinner, RangeReport};
// The plain check lives with the API, where every component reads it.
pub use mining_api::pow::{block_hash, hex_upper, leading_zero_bits};

pub use search::{BlockTemplate, Engine, Found};

/// The largest difficulty that can be asked for: a SHA-256 digest has 256 bits.
pub const MAX_DIFFICULTY: u32 = 256;

/// Why an input or a claimed result is not acceptable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("prev must be GENESIS or 64 hex digits, got {0:?}")]
    InvalidPrev(String),
    #[error("difficulty must be between 1 and {MAX_DIFFICULTY}, got {0}")]
    InvalidDifficulty(u32),
    #[error("block index must be at least 1")]
    InvalidIndex,
    #[error("no nonce in 0..=u64::MAX reaches difficulty {0}")]
    Exhausted(u32),
    #[error("result is for block {found}, expected block {expected}")]
    WrongIndex { expected: u64, found: u64 },
    #[error("result has prev {found}, expected {expected}")]
    WrongPrev { expected: String, found: String },
    #[error("result claims difficulty {found}, expected {expected}")]
    WrongDifficulty { expected: u32, found: u32 },
    #[error("result reports {found} attempts for nonce {nonce}, expected {}", nonce + 1)]
    WrongAttempts { nonce: u64, found: u64 },
    #[error("claimed hash {claimed} does not match the recomputed {actual}")]
    HashMismatch { claimed: String, actual: String },
    #[error("hash {hash} has {found} leading zero bits, fewer than the required {required}")]
    TooEasy { hash: String, found: u32, required: u32 },
}

/// Checks `prev`: GENESIS, or a previous block's hash as 64 hex digits.
pub fn validate_prev(prev: &str) -> Result<(), Error> {
    if prev == GENESIS || (prev.len() == 64 && prev.bytes().all(|b| b.is_ascii_hexdigit())) {
        Ok(())
    } else {
        Err(Error::InvalidPrev(prev.to_string()))
    }
}

pub fn validate_difficulty(difficulty: u32) -> Result<(), Error> {
    if (1..=MAX_DIFFICULTY).contains(&difficulty) {
        Ok(())
    } else {
        Err(Error::InvalidDifficulty(difficulty))
    }
}

/// Mines one block on `threads` threads with the fastest engine available.
pub fn mine_block(index: u64, prev: &str, difficulty: u32, threads: usize) -> Result<Found, Error> {
    if index == 0 {
        return Err(Error::InvalidIndex);
    }
    validate_prev(prev)?;
    validate_difficulty(difficulty)?;
    let template = BlockTemplate::new(index, prev);
    search::search(&template, difficulty, threads.max(1), Engine::best()).ok_or(Error::Exhausted(difficulty))
}

/// Mines the nonces `start..start + count` of one block (the end saturates
/// at `u64::MAX`): the smallest winner among them, or `None`.
pub fn mine_range(
    index: u64,
    prev: &str,
    difficulty: u32,
    threads: usize,
    start: u64,
    count: u64,
) -> Result<Option<Found>, Error> {
    if index == 0 {
        return Err(Error::InvalidIndex);
    }
    validate_prev(prev)?;
    validate_difficulty(difficulty)?;
    let template = BlockTemplate::new(index, prev);
    let nonces = start..start.saturating_add(count);
    Ok(search::search_range(&template, difficulty, threads.max(1), Engine::best(), nonces))
}

/// The result document for a winner of block `index` on `prev`.
pub fn block_result(index: u64, prev: &str, difficulty: u32, found: &Found, elapsed_ms: u64) -> BlockResult {
    BlockResult {
        index,
        prev: prev.to_string(),
        nonce: found.nonce,
        hash: hex_upper(&found.digest),
        attempts: found.nonce.saturating_add(1),
        difficulty,
        elapsed_ms,
    }
}

/// What mining `count` nonces from `start` found, as the document the
/// operator reads: the range's winner, or that it has none.
pub fn range_report(
    index: u64,
    prev: &str,
    difficulty: u32,
    (start, count): (u64, u64),
    found: Option<&Found>,
    elapsed_ms: u64,
) -> RangeReport {
    match found {
        Some(found) => RangeReport::Winner(block_result(index, prev, difficulty, found, elapsed_ms)),
        None => RangeReport::NoWinner(NoWinner {
            index,
            prev: prev.to_string(),
            difficulty,
            start,
            // The range ends at u64::MAX at the latest (see `mine_range`).
            count: count.min(u64::MAX - start),
            elapsed_ms,
        }),
    }
}

/// Checks a block: recomputes its hash and its leading zero bits.
/// Returns the hash as 64 uppercase hex digits.
pub fn verify_block(index: u64, prev: &str, nonce: u64, difficulty: u32) -> Result<String, Error> {
    mining_api::pow::verify_block(index, prev, nonce, difficulty).map_err(|too_easy| Error::TooEasy {
        hash: too_easy.hash,
        found: too_easy.found,
        required: too_easy.required,
    })
}

/// Checks a result document against what was asked: the same block, prev and
/// difficulty, `attempts = nonce + 1`, and a hash that recomputes and meets the
/// difficulty. Anything forged or garbled fails with the first reason found.
pub fn verify_result(result: &BlockResult, index: u64, prev: &str, difficulty: u32) -> Result<(), Error> {
    if result.index != index {
        return Err(Error::WrongIndex { expected: index, found: result.index });
    }
    if result.prev != prev {
        return Err(Error::WrongPrev { expected: prev.to_string(), found: result.prev.clone() });
    }
    if result.difficulty != difficulty {
        return Err(Error::WrongDifficulty { expected: difficulty, found: result.difficulty });
    }
    if result.attempts != result.nonce.wrapping_add(1) {
        return Err(Error::WrongAttempts { nonce: result.nonce, found: result.attempts });
    }
    let actual = verify_block(index, prev, result.nonce, difficulty)?;
    if actual != result.hash {
        return Err(Error::HashMismatch { claimed: result.hash.clone(), actual });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mined_result(index: u64, prev: &str, difficulty: u32) -> BlockResult {
        block_result(index, prev, difficulty, &mine_block(index, prev, difficulty, 2).unwrap(), 0)
    }

    #[test]
    fn a_genuine_result_verifies() {
        let result = mined_result(1, GENESIS, 10);
        assert_eq!(verify_result(&result, 1, GENESIS, 10), Ok(()));
    }

    #[test]
    fn a_tampered_nonce_is_rejected() {
        let mut result = mined_result(1, GENESIS, 10);
        result.nonce += 1;
        result.attempts += 1;
        assert!(matches!(
            verify_result(&result, 1, GENESIS, 10),
            Err(Error::TooEasy { .. } | Error::HashMismatch { .. })
        ));
    }

    #[test]
    fn a_tampered_hash_is_rejected() {
        let mut result = mined_result(1, GENESIS, 10);
        let last = result.hash.pop().unwrap();
        result.hash.push(if last == '0' { '1' } else { '0' });
        assert!(matches!(verify_result(&result, 1, GENESIS, 10), Err(Error::HashMismatch { .. })));
    }

    #[test]
    fn a_result_for_another_prev_or_difficulty_or_index_is_rejected() {
        let result = mined_result(1, GENESIS, 10);
        let other_prev = "A".repeat(64);
        assert!(matches!(verify_result(&result, 1, &other_prev, 10), Err(Error::WrongPrev { .. })));
        assert!(matches!(verify_result(&result, 1, GENESIS, 11), Err(Error::WrongDifficulty { .. })));
        assert!(matches!(verify_result(&result, 2, GENESIS, 10), Err(Error::WrongIndex { .. })));
    }

    #[test]
    fn a_result_claiming_a_higher_difficulty_than_its_hash_has_is_rejected() {
        // Mine at 4 bits, then claim 40: the recomputed hash cannot back that up.
        let mut result = mined_result(1, GENESIS, 4);
        result.difficulty = 40;
        assert!(matches!(verify_result(&result, 1, GENESIS, 40), Err(Error::TooEasy { .. })));
    }

    #[test]
    fn wrong_attempt_count_is_rejected() {
        let mut result = mined_result(1, GENESIS, 8);
        result.attempts = result.nonce;
        assert!(matches!(verify_result(&result, 1, GENESIS, 8), Err(Error::WrongAttempts { .. })));
    }

    #[test]
    fn prev_must_be_genesis_or_64_hex_digits() {
        assert!(validate_prev(GENESIS).is_ok());
        assert!(validate_prev(&"aB".repeat(32)).is_ok());
        for bad in ["", "genesis", "ABC", &"G".repeat(64), &"A".repeat(65)] {
            assert_eq!(validate_prev(bad), Err(Error::InvalidPrev(bad.to_string())));
        }
    }

    #[test]
    fn difficulty_outside_1_to_256_is_rejected() {
        assert!(validate_difficulty(0).is_err());
        assert!(validate_difficulty(257).is_err());
        assert!(validate_difficulty(1).is_ok() && validate_difficulty(256).is_ok());
        assert_eq!(mine_block(0, GENESIS, 4, 1), Err(Error::InvalidIndex));
    }

    #[test]
    fn leading_zero_bits_counts_across_bytes() {
        let mut digest = [0u8; 32];
        digest[2] = 0b0001_0000;
        assert_eq!(leading_zero_bits(&digest), 19);
        assert_eq!(leading_zero_bits(&[0; 32]), 256);
    }
}
