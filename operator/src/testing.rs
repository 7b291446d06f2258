//! Fixtures for unit tests.

use k8s_openapi::jiff::Timestamp;
pub use mining_api::testing::workflow;

pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

/// The Job the operator builds for block 1 of a 2-block workflow `w` at
/// difficulty 8 (a CPU request of 100m, so resources are compared too).
pub fn built_block_job() -> k8s_openapi::api::batch::v1::Job {
    let job_settings = crate::config::JobSettings {
        backoff_limit: 2,
        active_deadline_seconds: None,
        cpu_request: Some("100m".into()),
        cpu_limit: None,
        memory_request: None,
        memory_limit: None,
    };
    let settings = crate::job::MinerSettings {
        image: "miner:1",
        image_pull_policy: "IfNotPresent",
        threads: 1,
        job: &job_settings,
        otlp: None,
    };
    crate::job::build_block_job(&workflow("w", 8, 2), 1, "GENESIS", 8, &settings)
}
