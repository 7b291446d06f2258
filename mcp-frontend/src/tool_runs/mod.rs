//! Any container as a tool: the `McpTool`s of the namespace as tools
//! (`catalog`), and what a `ToolRun` means to the model that called it
//! (`contract`). A call's run is started by the core (`core::start_run`) and
//! found, waited for, cancelled and listed as any other work.

pub mod access;
pub mod catalog;
pub mod contract;
