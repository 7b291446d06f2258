//! Fixtures for unit tests.

use k8s_openapi::jiff::Timestamp;
use mining_api::{MiningWorkflow, MiningWorkflowSpec};

pub fn workflow(name: &str, difficulty: u32, blocks: u32) -> MiningWorkflow {
    let mut wf = MiningWorkflow::new(
        name,
        MiningWorkflowSpec {
            difficulty,
            blocks,
            ttl_seconds_after_finished: None,
            active_deadline_seconds: None,
            cancel: false,
            parallelism: 1,
        },
    );
    wf.metadata.namespace = Some("ns".into());
    wf.metadata.uid = Some(format!("uid-{name}"));
    wf.metadata.generation = Some(1);
    wf
}

pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}
