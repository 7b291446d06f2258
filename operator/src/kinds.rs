//! The kinds of work this operator runs: one line each. Everything about a
//! kind — its watches, its place in the one queue and in readiness, the
//! reconcile around its own — follows from its [`crate::work::WorkKind`];
//! its module (observe, plan, Job building) says the rest.

use mining_api::{MiningWorkflow, ToolRun};

use crate::config::Config;
use crate::work::Registry;

/// Registers every kind, in the order that breaks ties between kinds in the queue.
pub fn register(registry: &mut Registry, config: &Config) {
    let config = config.clone();
    registry.register::<MiningWorkflow>(move |_| crate::mining::Context { config });
    registry.register::<ToolRun>(|_| crate::tool_run::ToolContext::default());
}
