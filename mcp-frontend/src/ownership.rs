//! Ownership proofs: made here, verified here and by the operator; the one
//! implementation lives in the API crate.

pub use mining_api::ownership::*;
