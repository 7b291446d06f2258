//! Tool runs' files beyond their 4 KiB result: stored while the tool runs,
//! listed into the run's status when it ends, read back by the frontend,
//! deleted with the run.
//!
//! Why uploads come to the operator (and not straight to the store, nor
//! through a helper container of ours): tool Pods run in namespaces whose
//! users are not trusted, so they hold no store or API credentials — only a
//! token that writes one run's files (see
//! [`mining_api::ownership::OwnershipKeys::outputs_upload_token`]), kept in
//! the run's arguments Secret; the operator checks each upload's name, media
//! type and size as it streams in, and records its SHA-256, which the
//! frontend checks again as it serves the bytes. No helper container means
//! the Pod runs exactly the tool author's containers (what provenance and
//! admission checks compare) on any Kubernetes (no native sidecars needed).

mod leader_pod;
pub mod mirror;
mod server;
mod store;
mod sweep;
#[cfg(test)]
mod tests;

pub use leader_pod::{LEADER_LABEL, mark as mark_leader_pod};
pub use server::serve;
pub use store::{Limits, Outputs, Refusal};
pub use sweep::sweep_every;

/// What a run's Job is handed to upload its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandOver {
    /// `MCP_OUTPUTS_URL`: where this run's files go (a name is appended).
    pub url: String,
    /// `MCP_OUTPUTS_TOKEN`: kept in the run's arguments Secret.
    pub token: String,
}

/// The path under the outputs server of one run's files.
pub fn run_path(namespace: &str, name: &str, uid: &str) -> String {
    format!("/v1/outputs/{namespace}/{name}/{uid}")
}
