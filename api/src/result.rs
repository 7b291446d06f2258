use serde::{Deserialize, Serialize};

/// The result of mining one block: printed by `miner mine` on stdout and written
/// to the container's termination message, where the operator reads it.
///
/// Kept small on purpose: a termination message holds at most 4096 bytes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct BlockResult {
    /// 1-based position of the block in its chain.
    pub index: u64,
    /// The previous block's hash (64 uppercase hex digits), or `GENESIS`.
    pub prev: String,
    /// The smallest nonce whose digest has `difficulty` leading zero bits.
    pub nonce: u64,
    /// SHA-256 of `"{index}:{prev}:{nonce}"`, 64 uppercase hex digits.
    pub hash: String,
    /// `nonce + 1`: how many candidates a sequential scan tries.
    pub attempts: u64,
    /// Leading zero bits the hash was required to have.
    pub difficulty: u32,
    /// Wall-clock time the search took.
    pub elapsed_ms: u64,
}

impl BlockResult {
    /// Parses a termination message; whitespace around the document is ignored.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text.trim())
    }

    /// The single-line JSON form the miner prints.
    pub fn to_json_line(&self) -> String {
        // Serialising a struct of strings and integers cannot fail.
        serde_json::to_string(self).expect("BlockResult serialises")
    }
}

/// What `miner mine --start S --count C` found when its nonce range holds no
/// winner: a result too, so a block split into ranges knows which ranges
/// are done. Its fields name exactly the range that was searched.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct NoWinner {
    pub index: u64,
    pub prev: String,
    pub difficulty: u32,
    /// First nonce searched.
    pub start: u64,
    /// Nonces searched: `start..start + count`.
    pub count: u64,
    pub elapsed_ms: u64,
}

impl NoWinner {
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("NoWinner serialises")
    }
}

/// The result of mining one nonce range: its smallest winner, or none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeReport {
    Winner(BlockResult),
    NoWinner(NoWinner),
}

impl RangeReport {
    pub fn to_json_line(&self) -> String {
        match self {
            Self::Winner(result) => result.to_json_line(),
            Self::NoWinner(none) => none.to_json_line(),
        }
    }

    /// Parses a range's termination message: a document with a `nonce` is a
    /// winner, one without says the range has none. Errors name what is wrong.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        let value: serde_json::Value = serde_json::from_str(text.trim())?;
        if value.get("nonce").is_some() {
            serde_json::from_value(value).map(Self::Winner)
        } else {
            serde_json::from_value(value).map(Self::NoWinner)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_report_is_a_winner_when_it_has_a_nonce_and_none_otherwise() {
        let none = NoWinner {
            index: 3,
            prev: "GENESIS".into(),
            difficulty: 30,
            start: 1 << 27,
            count: 1 << 27,
            elapsed_ms: 9,
        };
        assert_eq!(RangeReport::from_json(&none.to_json_line()).unwrap(), RangeReport::NoWinner(none));
        let winner = BlockResult {
            index: 1,
            prev: "GENESIS".into(),
            nonce: 7,
            hash: "00".repeat(32),
            attempts: 8,
            difficulty: 4,
            elapsed_ms: 0,
        };
        let parsed = RangeReport::from_json(&winner.to_json_line()).unwrap();
        assert_eq!(parsed, RangeReport::Winner(winner));
        for garbage in ["", "[]", r#"{"nonce":"x"}"#, r#"{"index":1}"#, r#"{"index":1,"start":-1}"#] {
            assert!(RangeReport::from_json(garbage).is_err(), "{garbage}");
        }
    }

    #[test]
    fn result_round_trips_through_its_json_line() {
        let result = BlockResult {
            index: 2,
            prev: "AB".repeat(32),
            nonce: 41,
            hash: "00".repeat(32),
            attempts: 42,
            difficulty: 8,
            elapsed_ms: 3,
        };
        let line = result.to_json_line();
        assert!(!line.contains('\n'));
        assert_eq!(BlockResult::from_json(&format!("  {line}\n")).unwrap(), result);
    }

    #[test]
    fn result_missing_a_field_is_rejected() {
        let err = BlockResult::from_json(r#"{"index":1,"prev":"GENESIS","nonce":1}"#).unwrap_err();
        assert!(err.to_string().contains("missing field"), "{err}");
    }
}
