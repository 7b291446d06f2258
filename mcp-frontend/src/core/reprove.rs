//! Upgrading proofs: a workflow proven in an older accepted version gets the
//! current version written back, so the release after next — which accepts
//! one version fewer — still sees every workflow, including those nobody
//! cancels (a cancel re-proves on its own write).

use std::time::Duration;

use kube::api::Api;
use mining_api::Work;

use super::Core;
use crate::cache::{Entry, Kind, ObjectCache};

/// Proofs written per pass at most, so an upgrade with thousands of retained
/// workflows and runs spreads its writes instead of loading the API server at start.
pub const REPROVE_PER_PASS: usize = 50;
/// How often a pass runs.
pub const REPROVE_INTERVAL: Duration = Duration::from_secs(60);

/// Cached work of one kind that carries an older version's valid proof,
/// with its current proof (at most `limit`).
fn stale<K: Kind>(
    keys: &mining_api::ownership::OwnershipKeys,
    caches: &[&ObjectCache<K>],
    limit: usize,
) -> Vec<(Box<K>, String)> {
    caches
        .iter()
        .flat_map(|cache| cache.all())
        .filter_map(|cached| match cached {
            Entry::Found(work) => {
                let proof = keys.reproof(&*work)?;
                Some((work, proof))
            }
            _ => None,
        })
        .take(limit)
        .collect()
}

impl Core {
    /// Writes the current proof on up to [`REPROVE_PER_PASS`] cached
    /// workflows and tool runs that carry an older version's valid proof;
    /// returns how many.
    pub async fn reprove_some(&self) -> usize {
        let mut caches = vec![&*self.cache];
        caches.extend(self.previous.as_ref().map(|p| &*p.cache));
        let workflows = stale(&self.keys, &caches, REPROVE_PER_PASS);
        let runs = stale(&self.keys, &[&*self.runs], REPROVE_PER_PASS - workflows.len());
        let mut written = 0;
        for (workflow, proof) in workflows {
            written += self.reprove_one(self.api_of(&workflow), &*workflow, &proof).await;
        }
        for (run, proof) in runs {
            written += self.reprove_one(&self.run_api, &*run, &proof).await;
        }
        if written > 0 {
            tracing::info!(written, "wrote current ownership proofs over older versions");
        }
        written
    }

    /// 1 when `work`'s current proof was written, else 0 (logged; next pass).
    async fn reprove_one<K: Work>(&self, api: &Api<K>, work: &K, proof: &str) -> usize {
        let name = work.meta().name.clone().unwrap_or_default();
        match self.api_call("patch", crate::workflows::write_proof(api, &name, proof)).await {
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
        while !self.cache.is_ready() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        loop {
            self.reprove_some().await;
            tokio::time::sleep(REPROVE_INTERVAL).await;
        }
    }
}
