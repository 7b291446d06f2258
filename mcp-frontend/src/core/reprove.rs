//! Upgrading proofs: a workflow proven in an older accepted version gets the
//! current version written back, so the release after next — which accepts
//! one version fewer — still sees every workflow, including those nobody
//! cancels (a cancel re-proves on its own write).

use std::time::Duration;

use kube::api::Api;
use mining_api::Work;

use super::{Core, KindId, Served};
use crate::cache::Entry;
use crate::with_kind;

/// Proofs written per pass at most, so an upgrade with thousands of retained
/// workflows and runs spreads its writes instead of loading the API server at start.
pub const REPROVE_PER_PASS: usize = 50;
/// How often a pass runs.
pub const REPROVE_INTERVAL: Duration = Duration::from_secs(60);

/// Cached work of kind `K` that carries an older version's valid proof,
/// with its current proof and the API of its namespace (at most `limit`).
fn stale<K: Served>(core: &Core, limit: usize) -> Vec<(Box<K>, String, &Api<K>)> {
    let homes = core.homes::<K>();
    homes
        .all()
        .flat_map(|home| home.cache.all().into_iter().map(move |cached| (home, cached)))
        .filter_map(|(home, cached)| match cached {
            Entry::Found(work) => {
                let proof = core.keys.reproof(&*work)?;
                Some((work, proof, home.api))
            }
            _ => None,
        })
        .take(limit)
        .collect()
}

impl Core {
    /// Writes the current proof on up to [`REPROVE_PER_PASS`] cached
    /// pieces of work (of every kind) that carry an older version's valid
    /// proof; returns how many.
    pub async fn reprove_some(&self) -> usize {
        let mut left = REPROVE_PER_PASS;
        let mut written = 0;
        for kind in KindId::ALL {
            written += with_kind!(kind, K => self.reprove_kind::<K>(&mut left).await);
        }
        if written > 0 {
            tracing::info!(written, "wrote current ownership proofs over older versions");
        }
        written
    }

    async fn reprove_kind<K: Served>(&self, left: &mut usize) -> usize {
        let stale = stale::<K>(self, *left);
        *left -= stale.len();
        let mut written = 0;
        for (work, proof, api) in stale {
            written += self.reprove_one(api, &*work, &proof).await;
        }
        written
    }

    /// 1 when `work`'s current proof was written, else 0 (logged; next pass).
    async fn reprove_one<K: Work>(&self, api: &Api<K>, work: &K, proof: &str) -> usize {
        let name = work.meta().name.clone().unwrap_or_default();
        match self.api_call("patch", crate::kube_calls::write_proof(api, &name, proof)).await {
            Ok(_) => 1,
            Err(err) => {
                self.count_api_error("patch");
                tracing::warn!(kind = K::NOUN, name = %name, error = %err, "writing the current proof failed; next pass");
                0
            }
        }
    }

    /// Runs [`Core::reprove_some`] as soon as the cache is ready, then every
    /// [`REPROVE_INTERVAL`].
    pub async fn reprove_forever(&self) {
        while self.kinds.unsynced().is_some() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        loop {
            self.reprove_some().await;
            tokio::time::sleep(REPROVE_INTERVAL).await;
        }
    }
}
