//! The nonce search: one SHA-256 compression per nonce on a prepared block.
//!
//! The hashed text is `"{index}:{prev}:{nonce}"`. Everything before the nonce is
//! constant for a block, so its whole 64-byte chunks are absorbed once into a
//! midstate ([`BlockTemplate`]); each nonce then costs one compression of a
//! final block whose decimal digits are advanced in place ([`NonceBlock`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::shani::ShaNi;

const SHA256_IV: [u32; 8] =
    [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// Nonces a thread claims at a time: large enough that claiming is rare, small
/// enough (a few ms of work) that threads stop soon after a winner is known.
const CHUNK: u64 = 1 << 16;

/// A u64 has at most 20 decimal digits.
const MAX_DIGITS: usize = 20;

/// The constant part of one block's input, pre-absorbed.
#[derive(Clone, Debug)]
pub struct BlockTemplate {
    midstate: [u32; 8],
    /// Prefix bytes after the last whole chunk (fewer than 64).
    tail: Vec<u8>,
    /// Length of the whole prefix in bytes.
    prefix_len: usize,
}

impl BlockTemplate {
    /// Absorbs `"{index}:{prev}:"`. With `prev` = GENESIS or 64 hex digits
    /// (what the CLI accepts) every nonce fits in one final block.
    pub fn new(index: u64, prev: &str) -> Self {
        let prefix = format!("{index}:{prev}:");
        let bytes = prefix.as_bytes();
        let whole = bytes.len() / 64 * 64;
        let mut midstate = SHA256_IV;
        let chunks: Vec<[u8; 64]> =
            bytes[..whole].chunks_exact(64).map(|c| c.try_into().expect("64-byte chunk")).collect();
        sha2::block_api::compress256(&mut midstate, &chunks);
        Self { midstate, tail: bytes[whole..].to_vec(), prefix_len: bytes.len() }
    }

    /// Whether every nonce up to `u64::MAX` fits in one final block.
    pub fn fits_single_block(&self) -> bool {
        self.tail.len() + MAX_DIGITS + 9 <= 64
    }
}

/// The final SHA-256 block for one nonce, with the nonce's decimal digits in
/// place so that the next nonce is a carry through a few bytes.
#[derive(Clone)]
struct NonceBlock {
    bytes: [u8; 64],
    nonce: u64,
    digits_start: usize,
    digits_end: usize,
}

impl NonceBlock {
    fn new(template: &BlockTemplate, nonce: u64) -> Self {
        let mut digits = [0u8; MAX_DIGITS];
        let mut n = nonce;
        let mut i = MAX_DIGITS;
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let digits = &digits[i..];
        let mut bytes = [0u8; 64];
        let start = template.tail.len();
        let end = start + digits.len();
        bytes[..start].copy_from_slice(&template.tail);
        bytes[start..end].copy_from_slice(digits);
        bytes[end] = 0x80;
        let bit_len = ((template.prefix_len + digits.len()) as u64) * 8;
        bytes[56..].copy_from_slice(&bit_len.to_be_bytes());
        Self { bytes, nonce, digits_start: start, digits_end: end }
    }

    /// Moves to `nonce + step` (step < 10) by a decimal carry in place; when the
    /// number of digits grows the block is laid out again.
    #[inline(always)]
    fn advance(&mut self, template: &BlockTemplate, step: u8) {
        self.nonce += step as u64;
        let mut carry = step;
        let mut i = self.digits_end;
        while i > self.digits_start {
            i -= 1;
            let digit = self.bytes[i] - b'0' + carry;
            if digit < 10 {
                self.bytes[i] = b'0' + digit;
                return;
            }
            self.bytes[i] = b'0' + digit - 10;
            carry = 1;
        }
        *self = Self::new(template, self.nonce);
    }
}

/// How compressions are computed.
#[derive(Clone, Copy, Debug)]
pub enum Engine {
    /// Two nonces at a time through SHA-NI (x86_64 with the SHA extensions).
    ShaNi2Way(ShaNi),
    /// The `sha2` crate's compression function, one nonce at a time.
    Portable,
}

impl Engine {
    /// The fastest engine this CPU supports.
    pub fn best() -> Self {
        ShaNi::detect().map_or(Self::Portable, Self::ShaNi2Way)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::ShaNi2Way(_) => "sha-ni-2way",
            Self::Portable => "sha2-compress",
        }
    }
}

/// Leading zero bits of a digest given as its eight big-endian words.
#[inline(always)]
pub fn leading_zero_bits_of_state(state: &[u32; 8]) -> u32 {
    let mut bits = 0;
    for word in state {
        bits += word.leading_zeros();
        if *word != 0 {
            break;
        }
    }
    bits
}

/// Whether a digest meets the difficulty. The first word alone decides for
/// difficulties up to 32; only its rare passes look further.
#[inline(always)]
fn meets(state: &[u32; 8], difficulty: u32, first_word_zeros: u32) -> bool {
    state[0].leading_zeros() >= first_word_zeros && leading_zero_bits_of_state(state) >= difficulty
}

/// Scans `start..end` in order and returns the first winning nonce with its
/// digest. Gives up early (returning `None`) once `best` holds a nonce below
/// the one being tried, since nothing here can beat it then.
fn scan_range(
    template: &BlockTemplate,
    difficulty: u32,
    start: u64,
    end: u64,
    best: &AtomicU64,
    engine: Engine,
) -> Option<(u64, [u32; 8])> {
    let first_word_zeros = difficulty.min(32);
    // Check for a better result found elsewhere every 1024 nonces.
    const POLL: u64 = 1024;
    match engine {
        Engine::ShaNi2Way(shani) => {
            let mut a = NonceBlock::new(template, start);
            let mut b = NonceBlock::new(template, start.saturating_add(1));
            while a.nonce < end {
                let (state_a, state_b) = shani.compress2(&template.midstate, &a.bytes, &b.bytes);
                if meets(&state_a, difficulty, first_word_zeros) {
                    return Some((a.nonce, state_a));
                }
                if b.nonce < end && meets(&state_b, difficulty, first_word_zeros) {
                    return Some((b.nonce, state_b));
                }
                if a.nonce.is_multiple_of(POLL) && best.load(Ordering::Relaxed) < a.nonce {
                    return None;
                }
                if end - a.nonce <= 2 {
                    break;
                }
                a.advance(template, 2);
                b.advance(template, 2);
            }
        }
        Engine::Portable => {
            let mut a = NonceBlock::new(template, start);
            while a.nonce < end {
                let mut state = template.midstate;
                sha2::block_api::compress256(&mut state, std::slice::from_ref(&a.bytes));
                if meets(&state, difficulty, first_word_zeros) {
                    return Some((a.nonce, state));
                }
                if a.nonce.is_multiple_of(POLL) && best.load(Ordering::Relaxed) < a.nonce {
                    return None;
                }
                if end - a.nonce <= 1 {
                    break;
                }
                a.advance(template, 1);
            }
        }
    }
    None
}

/// A winning nonce and its digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub nonce: u64,
    pub digest: [u8; 32],
}

/// Finds the smallest nonce whose digest has `difficulty` leading zero bits,
/// on `threads` threads. The answer equals a sequential scan's: threads claim
/// chunks in increasing order, and a chunk is abandoned only past a nonce that
/// already won, so every smaller nonce has been tried. `None` when the whole
/// nonce space holds no winner.
pub fn search(template: &BlockTemplate, difficulty: u32, threads: usize, engine: Engine) -> Option<Found> {
    search_range(template, difficulty, threads, engine, 0..u64::MAX)
}

/// [`search`] within `nonces` (end exclusive): the smallest winner in the
/// range, or `None` when the range holds none. A block split into ranges
/// gets the sequential answer from the smallest winner of the lowest range
/// that has one, once every range below it has reported none.
pub fn search_range(
    template: &BlockTemplate,
    difficulty: u32,
    threads: usize,
    engine: Engine,
    nonces: std::ops::Range<u64>,
) -> Option<Found> {
    assert!(template.fits_single_block(), "prefix too long for a single final block");
    let end = nonces.end;
    let next_chunk = AtomicU64::new(nonces.start);
    let best = AtomicU64::new(u64::MAX);
    let best_state = std::sync::Mutex::new(None::<(u64, [u32; 8])>);

    let worker = || loop {
        // Claimed with a checked step: the counter never passes `end`, so it
        // cannot wrap however many threads claim near the top of the space.
        let claim = next_chunk.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
            (c < end).then(|| c.saturating_add(CHUNK).min(end))
        });
        let Ok(start) = claim else { return };
        if start >= best.load(Ordering::Relaxed) {
            return;
        }
        let chunk_end = start.saturating_add(CHUNK).min(end);
        if let Some((nonce, state)) = scan_range(template, difficulty, start, chunk_end, &best, engine) {
            let mut slot = best_state.lock().expect("no panics while holding the lock");
            if slot.is_none_or(|(n, _)| nonce < n) {
                *slot = Some((nonce, state));
            }
            best.fetch_min(nonce, Ordering::Relaxed);
        }
    };
    if threads <= 1 {
        worker();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(worker);
            }
        });
    }
    let winner = best_state.into_inner().expect("no panics while holding the lock");
    winner.map(|(nonce, state)| {
        let mut digest = [0u8; 32];
        for (bytes, word) in digest.chunks_exact_mut(4).zip(state) {
            bytes.copy_from_slice(&word.to_be_bytes());
        }
        Found { nonce, digest }
    })
}

/// Hashes exactly `count` nonces from `start` without looking for a winner
/// (difficulty 256 never wins in practice). For benchmarks: attempts per second.
pub fn hash_range(template: &BlockTemplate, start: u64, count: u64, engine: Engine) {
    let never = AtomicU64::new(u64::MAX);
    let found = scan_range(template, 256, start, start + count, &never, engine);
    assert!(found.is_none());
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn digest_of(text: &str) -> [u8; 32] {
        Sha256::digest(text.as_bytes()).into()
    }

    fn engines() -> Vec<Engine> {
        let mut engines = vec![Engine::Portable];
        if let Some(shani) = ShaNi::detect() {
            engines.push(Engine::ShaNi2Way(shani));
        }
        engines
    }

    /// Sequential reference: format, hash, check. Deliberately naive.
    fn naive_search(index: u64, prev: &str, difficulty: u32) -> (u64, [u8; 32]) {
        (0u64..)
            .map(|nonce| (nonce, digest_of(&format!("{index}:{prev}:{nonce}"))))
            .find(|(_, d)| crate::leading_zero_bits(d) >= difficulty)
            .unwrap()
    }

    #[test]
    fn nonce_block_digits_carry_across_every_length() {
        let template = BlockTemplate::new(7, "GENESIS");
        for start in [0u64, 8, 98, 999, 99_999, u64::MAX - 30] {
            let mut block = NonceBlock::new(&template, start);
            for step in [1u8, 2, 1, 2, 2, 1, 9] {
                if block.nonce > u64::MAX - 10 {
                    break;
                }
                block.advance(&template, step);
                let fresh = NonceBlock::new(&template, block.nonce);
                assert_eq!(block.bytes, fresh.bytes, "after advancing to {}", block.nonce);
            }
        }
    }

    #[test]
    fn one_compression_of_the_prepared_block_equals_hashing_the_text() {
        let prev = "0000ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF012345";
        for (index, prev) in [(1, "GENESIS"), (2, prev), (12, prev), (u64::MAX, prev)] {
            let template = BlockTemplate::new(index, prev);
            for nonce in [0u64, 9, 10, 123_456_789, u64::MAX] {
                let block = NonceBlock::new(&template, nonce);
                let mut state = template.midstate;
                sha2::block_api::compress256(&mut state, &[block.bytes]);
                let want = digest_of(&format!("{index}:{prev}:{nonce}"));
                let got: Vec<u8> = state.iter().flat_map(|w| w.to_be_bytes()).collect();
                assert_eq!(got, want, "index {index} nonce {nonce}");
            }
        }
    }

    #[test]
    fn every_engine_and_thread_count_finds_the_sequential_answer() {
        let prev = "00A1B2C3D4E5F60718293A4B5C6D7E8F00A1B2C3D4E5F60718293A4B5C6D7E8F";
        for (index, prev, difficulty) in
            [(1, "GENESIS", 1), (1, "GENESIS", 12), (3, prev, 14), (40, prev, 17)]
        {
            let (want_nonce, want_digest) = naive_search(index, prev, difficulty);
            let template = BlockTemplate::new(index, prev);
            for engine in engines() {
                for threads in [1, 2, 3, 8] {
                    let found = search(&template, difficulty, threads, engine).unwrap();
                    assert_eq!(
                        (found.nonce, found.digest),
                        (want_nonce, want_digest),
                        "index {index} difficulty {difficulty} engine {} threads {threads}",
                        engine.name()
                    );
                }
            }
        }
    }

    #[test]
    fn parallel_search_returns_the_smallest_of_several_winners_in_one_chunk_race() {
        // At difficulty 4 about one nonce in 16 wins, so many threads find
        // winners at once; the smallest must still come out.
        let template = BlockTemplate::new(5, "GENESIS");
        let (want, _) = naive_search(5, "GENESIS", 4);
        for _ in 0..50 {
            assert_eq!(search(&template, 4, 4, Engine::best()).unwrap().nonce, want);
        }
    }

    #[test]
    fn a_range_yields_its_own_smallest_winner_or_none() {
        let template = BlockTemplate::new(2, "GENESIS");
        let difficulty = 8;
        // Every winner below 3000, by the naive definition.
        let winners: Vec<u64> = (0u64..3000)
            .filter(|n| crate::leading_zero_bits(&digest_of(&format!("2:GENESIS:{n}"))) >= difficulty)
            .collect();
        assert!(winners.len() >= 4, "{winners:?}");
        for engine in engines() {
            for threads in [1, 3] {
                for (start, end) in
                    [(0, 3000), (winners[1], 3000), (winners[1] + 1, 3000), (7, 8), (3000, 3000)]
                {
                    let want = winners.iter().copied().find(|n| (start..end).contains(n));
                    let got =
                        search_range(&template, difficulty, threads, engine, start..end).map(|f| f.nonce);
                    assert_eq!(got, want, "{start}..{end} engine {} threads {threads}", engine.name());
                }
                // A range that ends just before a winner does not see it.
                let before = winners[2];
                let got = search_range(&template, difficulty, threads, engine, winners[1] + 1..before);
                assert_eq!(got, None);
            }
        }
    }

    #[test]
    fn a_range_at_the_top_of_the_nonce_space_ends_without_wrapping() {
        let template = BlockTemplate::new(1, "GENESIS");
        // 256 bits never win: the whole range is scanned and nothing found.
        let top = u64::MAX - 5 * CHUNK / 2;
        assert_eq!(search_range(&template, 256, 4, Engine::best(), top..u64::MAX), None);
    }
}
