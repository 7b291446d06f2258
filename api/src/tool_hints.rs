//! What a tool says it does, for hosts deciding how to call it (MCP's tool
//! annotations: `readOnlyHint`, `destructiveHint`, `idempotentHint`,
//! `openWorldHint`). Hints, written by the tool's author: a host shows them
//! and may ask before a destructive call; nothing here enforces them (who
//! may call a tool is `restricted`'s business, see `tool_caller`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolHints {
    /// It changes nothing outside its run (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// What it changes may be destroyed or overwritten (default true when
    /// not read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// Calling it again with the same arguments changes nothing more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// It reaches beyond the cluster (default true: a container may call anything).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}
