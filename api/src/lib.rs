//! The MiningWorkflow API, defined once and shared by the operator, the MCP
//! frontend and the CRD generator, plus the miner's per-block result document
//! (so the miner's writer and the operator's parser cannot drift apart).

pub mod bounds;
/// Names of the Jobs work runs and label values, within Kubernetes' limits.
pub mod naming;
pub mod pow;
mod result;
/// What the API server can do (features newer than the chart's floor).
pub mod server_features;
pub mod trace;
pub use result::{BlockResult, NoWinner, RangeReport};

#[cfg(feature = "kubernetes")]
mod accessors;
/// What admission controllers may add to a Pod without changing its work.
#[cfg(feature = "kubernetes")]
pub mod admitted;
/// Why a Job's Pods cannot start, and what the work then does, for every kind.
#[cfg(feature = "kubernetes")]
pub mod pod_start;
/// Whether a Pod is one its Job made, for every kind and every reader.
#[cfg(feature = "kubernetes")]
pub mod provenance;
#[cfg(feature = "kubernetes")]
pub use accessors::{is_our_key, trim_for_cache, trim_for_cache_keeping};
#[cfg(feature = "kubernetes")]
mod chain;
#[cfg(feature = "kubernetes")]
pub use chain::verify_chain;
#[cfg(feature = "kubernetes")]
mod work;
#[cfg(feature = "kubernetes")]
pub use work::{Lifecycle, ProofVersion, Proven, Work, differing_fields};
#[cfg(feature = "kubernetes")]
mod kinds;
#[cfg(feature = "kubernetes")]
pub use kinds::{ProvenSpec, ProvenToolRequest};
#[cfg(feature = "kubernetes")]
mod crds;
#[cfg(feature = "kubernetes")]
pub use crds::{CrdFile, crd_files};
#[cfg(feature = "kubernetes")]
mod ledger;
#[cfg(feature = "kubernetes")]
pub use ledger::{MAX_LEDGER_BYTES, MAX_LEDGER_PROOF_BYTES, MiningLedger, MiningLedgerSpec};
#[cfg(feature = "kubernetes")]
pub mod tool;
#[cfg(feature = "kubernetes")]
pub use tool::{McpTool, McpToolSpec, ToolRun, ToolRunPhase, ToolRunSpec, ToolRunStatus};
/// Restricted tools and the caller's identity handed to tools.
#[cfg(feature = "kubernetes")]
pub mod tool_caller;
/// A tool's result as MCP content blocks (`MCP_CONTENT`).
#[cfg(feature = "kubernetes")]
pub mod tool_content;
/// How a tool appears in MCP: its name, task support, needed client capabilities.
#[cfg(feature = "kubernetes")]
pub mod tool_face;
/// What a tool says it does (MCP tool annotations).
#[cfg(feature = "kubernetes")]
pub mod tool_hints;
#[cfg(feature = "kubernetes")]
pub mod tool_input;
/// A tool's files beyond its result: names, bounds, keys and URIs.
#[cfg(feature = "kubernetes")]
pub mod tool_outputs;
/// Documents a tool offers as MCP resources.
#[cfg(feature = "kubernetes")]
pub mod tool_resources;
#[cfg(feature = "schemas")]
pub mod tool_schema;
#[cfg(feature = "kubernetes")]
pub mod tool_template;
#[cfg(feature = "kubernetes")]
mod workflow;
#[cfg(feature = "kubernetes")]
pub use workflow::*;
#[cfg(feature = "proofs")]
pub mod ownership;
#[cfg(feature = "kubernetes")]
pub mod reach;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

/// The API group: a domain this project owns.
pub const GROUP: &str = "mining-operator.dev";

/// Label keys put on the objects the operator creates for a workflow.
pub mod labels {
    /// Names the workflow a Job or Pod belongs to.
    pub const WORKFLOW: &str = "mining-operator.dev/workflow";
    /// The 1-based block index a Job mines.
    pub const BLOCK: &str = "mining-operator.dev/block";
    /// Standard recommended label naming the managing component.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// On workflows started through MCP: a hash of the caller that started it
    /// (never the caller's name), so every caller sees only its own.
    pub const CALLER: &str = "mining-operator.dev/caller";
    /// Names the `ToolRun` a Job belongs to.
    pub const TOOL_RUN: &str = "mining-operator.dev/tool-run";
    /// Kueue's: the LocalQueue a Job waits in (set on every Job of ours when
    /// the operator runs with `--job-queue-name`). Never read back.
    pub const KUEUE_QUEUE_NAME: &str = "kueue.x-k8s.io/queue-name";

    /// Every label any component reads; caches keep no other.
    pub const ALL: [&str; 5] = [WORKFLOW, BLOCK, MANAGED_BY, CALLER, TOOL_RUN];
}

/// Annotation keys on the objects the operator and the frontend create.
pub mod annotations {
    /// On a Job that mines one nonce range of a block: the first nonce.
    pub const NONCE_START: &str = "mining-operator.dev/nonce-start";
    /// On the same Job: how many nonces it mines.
    pub const NONCE_COUNT: &str = "mining-operator.dev/nonce-count";
    /// On a workflow started as a 2025-11-25 task: the creating call's
    /// progress token (as JSON), so any replica's `tasks/result` can report
    /// progress against it.
    pub const PROGRESS_TOKEN: &str = "mining-operator.dev/progress-token";
    /// On a workflow started through MCP: the frontend's proof (an HMAC under
    /// its own key) that it made this workflow, as it is, for its caller.
    pub const OWNER_PROOF: &str = "mining-operator.dev/owner-proof";
    /// On a workflow started through MCP: the W3C `traceparent` of the
    /// frontend's span for the call, so the operator's spans and the block
    /// Jobs join the caller's trace (see [`crate::trace`]).
    pub const TRACEPARENT: &str = "mining-operator.dev/traceparent";

    /// Longest progress token kept with a task (JSON bytes).
    pub const MAX_PROGRESS_TOKEN_BYTES: usize = 256;

    /// The longest value each of our annotations may have (`None`: not one
    /// of ours). Caches keep only these, so whoever may edit an object
    /// cannot grow a component's memory through its annotations.
    pub fn max_bytes(key: &str) -> Option<usize> {
        match key {
            NONCE_START | NONCE_COUNT => Some(20),
            PROGRESS_TOKEN => Some(MAX_PROGRESS_TOKEN_BYTES),
            // "v2." and 64 hex digits, with room for one more version.
            OWNER_PROOF => Some(160),
            TRACEPARENT => Some(crate::trace::TRACEPARENT_BYTES),
            _ => None,
        }
    }
}

/// The permission the MCP frontend asks RBAC about (`--auth kubernetes`):
/// verb `use` on `miningworkflows/mcp`, a subresource no API server serves,
/// so granting it lets a caller use the MCP tools and grants no API access.
pub mod mcp_permission {
    pub const VERB: &str = "use";
    pub const RESOURCE: &str = "miningworkflows";
    pub const SUBRESOURCE: &str = "mcp";
}

/// `prev` of the first block of every chain.
pub const GENESIS: &str = "GENESIS";
