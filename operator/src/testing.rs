//! Fixtures for unit tests.

use k8s_openapi::jiff::Timestamp;
pub use mining_api::testing::workflow;

pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}
