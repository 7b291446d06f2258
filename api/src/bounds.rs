//! Every bound of the MiningWorkflow API, written once. The CRD schema (the
//! schemars attributes), the MCP tool schemas, the argument checks and their
//! error texts, and the flags of both components read them from here.

/// An inclusive range an integer must lie in, with the name it is known by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub name: &'static str,
    pub min: u32,
    pub max: u32,
}

impl Bound {
    pub const fn new(name: &'static str, min: u32, max: u32) -> Self {
        Self { name, min, max }
    }

    /// The same bound with a lower ceiling (e.g. a configured limit); never
    /// above this bound's own maximum nor below its minimum.
    pub const fn capped_at(self, max: u32) -> Self {
        let max = if max < self.max { max } else { self.max };
        let max = if max < self.min { self.min } else { max };
        Self { max, ..self }
    }

    pub const fn contains(&self, value: u32) -> bool {
        self.min <= value && value <= self.max
    }

    /// `value` if it lies within the bound, else the error a caller reads.
    pub fn check(&self, value: u32) -> Result<u32, String> {
        if self.contains(value) {
            Ok(value)
        } else {
            Err(format!("{} must be an integer from {} to {} (got {value})", self.name, self.min, self.max))
        }
    }

    /// The bound in words, e.g. `integer 1-64, default 4`.
    pub fn describe(&self, default: Option<u32>) -> String {
        match default {
            Some(default) => format!("integer {}-{}, default {default}", self.min, self.max),
            None => format!("integer {}-{}", self.min, self.max),
        }
    }

    /// The bound as a clap range, for flags that set a value within it.
    pub fn clap_range(&self) -> std::ops::RangeInclusive<i64> {
        i64::from(self.min)..=i64::from(self.max)
    }
}

/// `spec.difficulty`: leading zero bits a block's hash must have.
pub const DIFFICULTY: Bound = Bound::new("difficulty", 1, 64);
/// `spec.blocks`: the chain's length.
pub const BLOCKS: Bound = Bound::new("blocks", 1, 64);
/// `spec.parallelism`: Pods mining one block at once.
pub const PARALLELISM: Bound = Bound::new("parallelism", 1, 64);

/// Chain length when `spec.blocks` is not given.
pub const DEFAULT_BLOCKS: u32 = 4;
/// Pods per block when `spec.parallelism` is not given.
pub const DEFAULT_PARALLELISM: u32 = 1;

/// Longest deadline or retention a workflow may ask for: ten years. Bounded so
/// that time arithmetic on it can never overflow.
pub const MAX_DURATION_SECONDS: i64 = 315_360_000;
/// Largest nonce, attempt count or generation in a status: the API server
/// stores integers as int64, and a CRD states bounds as float64, so this is
/// the largest float64 below 2^63 (= 2^63 - 1024).
pub const MAX_STORED_INTEGER: u64 = (1 << 63) - 1024;
/// Most blocks whose result was lost and that were mined again, as recorded.
pub const MAX_RESULTS_LOST: u32 = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_the_field_the_range_and_the_value() {
        assert_eq!(BLOCKS.check(64), Ok(64));
        assert_eq!(BLOCKS.check(65), Err("blocks must be an integer from 1 to 64 (got 65)".into()));
        assert_eq!(PARALLELISM.check(0), Err("parallelism must be an integer from 1 to 64 (got 0)".into()));
    }

    #[test]
    fn a_cap_lowers_the_ceiling_but_never_widens_or_inverts_the_bound() {
        assert_eq!(DIFFICULTY.capped_at(32).max, 32);
        assert_eq!(DIFFICULTY.capped_at(1000).max, 64);
        assert_eq!(DIFFICULTY.capped_at(0).max, 1);
        assert_eq!(DIFFICULTY.capped_at(32).describe(Some(21)), "integer 1-32, default 21");
    }
}
