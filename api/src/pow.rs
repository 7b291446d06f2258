//! The proof of work itself, the plain way: one SHA-256 of
//! `"{index}:{prev}:{nonce}"` and its leading zero bits. The miner searches
//! fast (see the `miner` crate); every component checks with these.

use sha2::{Digest, Sha256};

/// SHA-256 of `"{index}:{prev}:{nonce}"`.
pub fn block_hash(index: u64, prev: &str, nonce: u64) -> [u8; 32] {
    Sha256::digest(format!("{index}:{prev}:{nonce}").as_bytes()).into()
}

pub fn leading_zero_bits(digest: &[u8; 32]) -> u32 {
    let mut bits = 0;
    for byte in digest {
        bits += byte.leading_zeros();
        if *byte != 0 {
            break;
        }
    }
    bits
}

/// 64 uppercase hex digits: the form a hash takes as the next block's `prev`.
pub fn hex_upper(digest: &[u8; 32]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push(HEX[(byte >> 4) as usize] as char);
        out.push(HEX[(byte & 0xF) as usize] as char);
    }
    out
}

/// A nonce whose hash has fewer leading zero bits than the difficulty asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooEasy {
    pub hash: String,
    pub found: u32,
    pub required: u32,
}

impl std::fmt::Display for TooEasy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hash {} has {} leading zero bits, fewer than the required {}",
            self.hash, self.found, self.required
        )
    }
}

/// Recomputes a block's hash and checks its leading zero bits; the hash as
/// 64 uppercase hex digits.
pub fn verify_block(index: u64, prev: &str, nonce: u64, difficulty: u32) -> Result<String, TooEasy> {
    let digest = block_hash(index, prev, nonce);
    let hash = hex_upper(&digest);
    let found = leading_zero_bits(&digest);
    if found < difficulty {
        return Err(TooEasy { hash, found, required: difficulty });
    }
    Ok(hash)
}

/// Clips `text` to at most `max` bytes at a character boundary.
pub fn clip(text: &str, max: usize) -> &str {
    let end = (0..=max.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_never_splits_a_character() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("héllo", 3), "hé");
        assert_eq!(clip("abc", 10), "abc");
        assert_eq!(clip("abc", 0), "");
    }
}
