//! A recorded chain, walked once the one way: what the frontend checks
//! before calling a chain mined, and what every test and bench asserts.

use crate::GENESIS;
use crate::pow::verify_block;
use crate::workflow::MinedBlock;

/// Re-verifies `blocks` as a chain from GENESIS: indexes 1, 2, … in order,
/// each hash recomputed and meeting `difficulty`, each linked to the one
/// before, and `attempts` = nonce + 1. Returns each block's `prev`.
pub fn verify_chain(blocks: &[MinedBlock], difficulty: u32) -> Result<Vec<String>, String> {
    let mut prev = GENESIS.to_string();
    let mut prevs = Vec::with_capacity(blocks.len());
    for (position, block) in blocks.iter().enumerate() {
        let expected_index = u32::try_from(position).map_or(u32::MAX, |p| p.saturating_add(1));
        if block.index != expected_index {
            return Err(format!("block {expected_index} is recorded as block {}", block.index));
        }
        let hash = verify_block(u64::from(block.index), &prev, block.nonce, difficulty)
            .map_err(|err| format!("block {}: {err}", block.index))?;
        if hash != block.hash {
            return Err(format!("block {}: recorded hash {} is not {hash}", block.index, block.hash));
        }
        if Some(block.attempts) != block.nonce.checked_add(1) {
            return Err(format!(
                "block {}: {} attempts recorded for nonce {} (one attempt a nonce from 0)",
                block.index, block.attempts, block.nonce
            ));
        }
        prevs.push(std::mem::replace(&mut prev, hash));
    }
    Ok(prevs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mines a chain the slow way (difficulty 4: a few dozen hashes a block).
    fn chain(blocks: u32) -> Vec<MinedBlock> {
        let mut prev = GENESIS.to_string();
        (1..=blocks)
            .map(|index| {
                let nonce = (0..).find(|n| verify_block(u64::from(index), &prev, *n, 4).is_ok()).unwrap();
                let hash = verify_block(u64::from(index), &prev, nonce, 4).unwrap();
                prev = hash.clone();
                MinedBlock {
                    index,
                    nonce,
                    hash,
                    attempts: nonce + 1,
                    minimality_checked: true,
                    job_name: format!("j{index}"),
                    started_at: None,
                    finished_at: None,
                }
            })
            .collect()
    }

    #[test]
    fn a_mined_chain_verifies_and_names_each_blocks_prev() {
        let blocks = chain(3);
        let prevs = verify_chain(&blocks, 4).unwrap();
        assert_eq!(prevs, [GENESIS.to_string(), blocks[0].hash.clone(), blocks[1].hash.clone()]);
    }

    #[test]
    fn every_forgery_is_named() {
        type Forge = fn(&mut Vec<MinedBlock>);
        let forgeries: [(Forge, &str); 5] = [
            (|c| c.swap(0, 1), "block 1 is recorded as block 2"),
            (|c| c[1].hash = "0".repeat(64), "block 2: recorded hash"),
            (|c| c[0].attempts += 1, "attempts recorded for nonce"),
            (|c| c.remove(0).index = 0, "block 1 is recorded as block 2"),
            (|c| c[2].nonce = u64::MAX, "block 3: "),
        ];
        for (forge, expected) in forgeries {
            let mut blocks = chain(3);
            forge(&mut blocks);
            let err = verify_chain(&blocks, 4).unwrap_err();
            assert!(err.contains(expected), "{expected}: {err}");
        }
        assert!(verify_chain(&chain(2), 60).unwrap_err().contains("fewer than the required 60"));
    }
}
