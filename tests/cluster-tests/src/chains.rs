//! Chains checked against the independent Python miner (hashlib): what a
//! mined result must equal, block for block.

use crate::repo_root;

/// The chain from the independent Python implementation (hashlib), one JSON
/// object per block: index, prev, nonce, hash, attempts, difficulty.
pub fn reference_chain(blocks: u32, difficulty: u32) -> Vec<serde_json::Value> {
    let output = std::process::Command::new("python3")
        .arg(repo_root().join("miner/tests/reference_miner.py"))
        .args([blocks.to_string(), difficulty.to_string()])
        .output()
        .expect("python3 runs the reference miner");
    assert!(output.status.success(), "reference miner: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A completed tool result (or task result) whose chain is exactly the
/// Python reference miner's: every block's index, prev, nonce, hash and
/// attempts, the difficulty, and progress at its end.
pub fn assert_reference_chain(outcome: &serde_json::Value, blocks: u32, difficulty: u32) {
    assert_matches_reference(outcome, &reference_chain(blocks, difficulty), difficulty);
}

/// [`assert_reference_chain`] against a reference computed once.
pub fn assert_matches_reference(
    outcome: &serde_json::Value,
    reference: &[serde_json::Value],
    difficulty: u32,
) {
    assert_eq!(outcome["status"], "completed", "{outcome:#}");
    let mined = outcome["result"]["blocks"].as_array().expect("a mined chain");
    assert_eq!(mined.len(), reference.len(), "{outcome:#}");
    for (got, want) in mined.iter().zip(reference) {
        for field in ["index", "prev", "nonce", "hash", "attempts"] {
            assert_eq!(got[field], want[field], "block {} field {field}", want["index"]);
        }
    }
    assert_eq!(outcome["result"]["difficulty"], difficulty, "{outcome:#}");
    let blocks = reference.len();
    assert_eq!(
        outcome["progress"],
        serde_json::json!({"blocks_done": blocks, "blocks_total": blocks}),
        "{outcome:#}"
    );
}

/// Asserts that a workflow's recorded chain verifies (hash, zero bits,
/// linkage, attempts) at `difficulty`.
pub fn assert_chain_verifies(workflow: &mining_api::MiningWorkflow, difficulty: u32) {
    if let Err(why) = mining_api::verify_chain(workflow.mined_blocks(), difficulty) {
        panic!("{}: {why}", workflow.metadata.name.as_deref().unwrap_or_default());
    }
}
