//! `MiningLedger`: one MCP caller's quota ledger, which the frontend keeps in
//! the release namespace, where only cluster admins and the frontend may
//! write. A type of its own (not a Lease) so that RBAC can give the frontend
//! exactly its ledgers, and never the operator's leader Lease beside them.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest ledger text: 1,000 starts and 1,000 held names (the frontend's
/// highest quotas), each a call of a tool with the longest name, fit with
/// room to spare, and etcd's 1.5 MiB object limit is far away.
pub const MAX_LEDGER_BYTES: u32 = 262_144;
/// Longest proof: a version prefix and 64 hex digits, with room for one more version.
pub const MAX_LEDGER_PROOF_BYTES: u32 = 160;

/// A caller's starts of the last minute and the workflows it holds, as the
/// frontend wrote them, with the frontend's MAC over them.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "mining-operator.dev",
    version = "v1alpha1",
    kind = "MiningLedger",
    doc = "One MCP caller's quota ledger, written only by the MCP frontend (the name is a digest, never the caller's name).",
    plural = "miningledgers",
    namespaced,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MiningLedgerSpec {
    /// The ledger, as JSON.
    #[schemars(length(max = MAX_LEDGER_BYTES))]
    pub ledger: String,
    /// The frontend's MAC over the namespace, the name and the ledger: a
    /// ledger that anybody else wrote, or moved from another caller's, counts
    /// as empty (and is seeded again from the caller's workflows).
    #[schemars(length(max = MAX_LEDGER_PROOF_BYTES))]
    pub proof: String,
}
