//! Upgrading proofs: a workflow proven in an older accepted version gets the
//! current version written back, so the release after next — which accepts
//! one version fewer — still sees every workflow, including those nobody
//! cancels (a cancel re-proves on its own write).

use std::time::Duration;

use super::Core;
use crate::cache::Cached;
use crate::workflows;

/// Proofs written per pass at most, so an upgrade with thousands of retained
/// workflows spreads its writes instead of loading the API server at start.
pub const REPROVE_PER_PASS: usize = 50;
/// How often a pass runs.
pub const REPROVE_INTERVAL: Duration = Duration::from_secs(60);

impl Core {
    /// Writes the current proof on up to [`REPROVE_PER_PASS`] cached
    /// workflows that carry an older version's valid proof; returns how many.
    pub async fn reprove_some(&self) -> usize {
        let caches = std::iter::once(&self.cache).chain(self.previous.as_ref().map(|p| &p.cache));
        let stale: Vec<(Box<mining_api::MiningWorkflow>, String)> = caches
            .flat_map(|cache| cache.all())
            .filter_map(|cached| match cached {
                Cached::Found(workflow) => {
                    let proof = self.keys.reproof(&workflow)?;
                    Some((workflow, proof))
                }
                _ => None,
            })
            .take(REPROVE_PER_PASS)
            .collect();
        let mut written = 0;
        for (workflow, proof) in stale {
            let name = workflow.metadata.name.clone().unwrap_or_default();
            match self.api_call("patch", workflows::write_proof(self.api_of(&workflow), &name, &proof)).await
            {
                Ok(_) => written += 1,
                Err(err) => {
                    self.count_api_error("patch");
                    tracing::warn!(workflow = %name, error = %err, "writing the current proof failed; next pass");
                }
            }
        }
        if written > 0 {
            tracing::info!(written, "wrote current ownership proofs over older versions");
        }
        written
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
