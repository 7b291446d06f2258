//! The MCP frontend: an MCP server (Streamable HTTP, stateless) whose tools
//! start, poll, cancel and list durable work — `MiningWorkflow`s, and the
//! `ToolRun`s of every `McpTool` — kept only as custom resources: a
//! restarted or replaced frontend loses nothing.
//!
//! Layout: one `core` (find, start, wait, cancel, list, the caller check and
//! their metrics, written once over every kind of work: `core::Served`,
//! with the kinds registered in one place, `core::kinds`)
//! behind the protocol `faces` (the rmcp tools, the 2025-11-25 task layer,
//! the 2026-07-28 Tasks extension and its listen); the HTTP edge is `http`,
//! `serve` with `connections` and `proxies` (bounds before authentication),
//! `auth` and `host_guard`. Decisions are pure (`contract` maps a status to
//! an answer, `tasks` maps it to a task, `tools` checks arguments, `ids`
//! makes and checks ids); `cache` is the one watch per kind that every
//! waiting call shares; `workflows` holds the few API calls; `tool_runs`
//! turns the namespace's McpTools into tools.

pub mod auth;
pub mod cache;
pub mod config;
pub mod connections;
pub mod contract;
pub mod core;
pub mod faces;
pub mod host_guard;
pub mod http;
pub mod ids;
pub mod kube_calls;
pub mod metrics;
pub mod operator_presence;
pub mod ownership;
pub mod proxies;
pub mod quota;
pub mod reach_watch;
pub mod run_files;
pub mod serve;
pub mod slots;
pub mod tasks;
pub mod tool_runs;
pub mod tools;

/// Everything an API call of the frontend can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the Kubernetes API refused the {call}: {source}")]
    Api {
        call: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("the Kubernetes API did not answer the {call} within {after:?}")]
    ApiTimeout { call: &'static str, after: std::time::Duration },
    #[error("workflow {name} was deleted while it was being read")]
    Conflict { name: String },
}

impl Error {
    /// The API server refused a write made on a version that is no longer current.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Api { source: kube::Error::Api(status), .. } if status.code == 409)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
