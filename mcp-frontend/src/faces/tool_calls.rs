//! The rmcp face of defined tools: a call of an McpTool, and the companion
//! tools `get_tool_result`, `cancel_tool_run` and `list_tool_runs`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use tokio::time::Instant;

use crate::core::{Answer, Core, StartOptions, WaitListener};
use crate::ids::Caller;
use crate::operator_presence::Presence;
use crate::tool_runs::RunView;
use crate::tool_runs::contract::{
    CANCEL_TOOL_RUN, CancelToolRunArgs, GET_TOOL_RESULT, GetToolResultArgs, LIST_TOOL_RUNS, ListToolRunsArgs,
    ListedRun, RunList, ToolOutcome, run_outcome,
};
use crate::tools::parse_args;

/// How long `cancel_tool_run` waits for the operator to confirm.
const CANCEL_CONFIRM_WAIT: Duration = Duration::from_secs(5);
/// Rows `list_tool_runs` gives without a limit, and at most.
const DEFAULT_LIST_LIMIT: u32 = 20;
const MAX_LIST_LIMIT: u32 = 200;

/// A defined tool's or a companion's answer.
pub enum ToolAnswer {
    Outcome(ToolOutcome),
    List(RunList),
    Error(Answer),
}

impl ToolAnswer {
    fn of(id: &str, view: RunView, presence: Presence) -> Self {
        match view {
            RunView::Found(run) => {
                Self::Outcome(run_outcome(&run, k8s_openapi::jiff::Timestamp::now()).with_operator(presence))
            }
            RunView::Missing => Self::Outcome(ToolOutcome::not_found(id)),
        }
    }

    pub fn metric_outcome(&self) -> &'static str {
        match self {
            Self::Outcome(outcome) => outcome.status.as_str(),
            Self::List(_) => "listed",
            Self::Error(answer) => answer.metric_outcome(),
        }
    }

    pub fn into_result(self) -> CallToolResult {
        match self {
            Self::Outcome(outcome) => outcome.into_result(),
            Self::List(list) => {
                let mut text = format!("{} of your tool runs (newest first):", list.runs.len());
                for row in &list.runs {
                    text.push_str(&format!(
                        "\n{} {} [{}] {}",
                        row.workflow_id,
                        row.tool,
                        row.status.as_str(),
                        row.status_message
                    ));
                }
                structured(text, &list, false)
            }
            Self::Error(answer) => answer.into_result(),
        }
    }
}

fn structured(text: String, value: &impl serde::Serialize, is_error: bool) -> CallToolResult {
    let value = serde_json::to_value(value).unwrap_or_default();
    let content = vec![ContentBlock::text(text)];
    let mut result = if is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
    result.structured_content = Some(value);
    result
}

/// Calls the defined tool `name`: a run within the caller's limits, waited
/// for within the tool's budget, its progress told to `listener`. `None`
/// when no such tool is defined.
pub async fn call_defined(
    core: &Arc<Core>,
    caller: &Caller,
    name: &str,
    arguments: Option<JsonObject>,
    options: StartOptions<'_>,
    listener: &mut impl WaitListener,
) -> Option<ToolAnswer> {
    let started = Instant::now();
    let tool = core.catalog.get(name)?;
    let run = match core.start_run(caller, name, &tool, arguments, options).await {
        Ok(run) => run,
        Err(answer) => return Some(ToolAnswer::Error(answer)),
    };
    let budget = tool
        .spec
        .wait_budget_seconds
        .unwrap_or(core.limits.wait_budget_seconds)
        .min(core.limits.wait_budget_seconds);
    let deadline = started + Duration::from_secs(u64::from(budget));
    let id = run.metadata.name.clone().unwrap_or_default();
    Some(ToolAnswer::of(&id, core.wait_run(caller, run, deadline, listener).await, core.operator_presence()))
}

/// Answers a companion tool, or `None` for another name.
pub async fn call_companion(
    core: &Arc<Core>,
    caller: &Caller,
    name: &str,
    arguments: Option<JsonObject>,
    listener: &mut impl WaitListener,
) -> Option<ToolAnswer> {
    let limits = &core.limits;
    let invalid = |text: String| ToolAnswer::Error(Answer::InvalidArguments(text));
    Some(match name {
        GET_TOOL_RESULT => {
            let (args, wait) = match parse_args::<GetToolResultArgs>(limits, GET_TOOL_RESULT, arguments)
                .and_then(|args| {
                    let wait = limits.wait().check(args.wait_seconds.unwrap_or(0));
                    wait.map(|wait| (args, wait))
                        .map_err(|err| format!("{err}; poll with get_tool_result for longer"))
                }) {
                Ok(parsed) => parsed,
                Err(text) => return Some(invalid(text)),
            };
            let deadline = Instant::now() + Duration::from_secs(u64::from(wait));
            match core.find_run(caller, &args.workflow_id).await {
                Ok(RunView::Found(run)) => ToolAnswer::of(
                    &args.workflow_id,
                    core.wait_run(caller, run, deadline, listener).await,
                    core.operator_presence(),
                ),
                Ok(RunView::Missing) => {
                    ToolAnswer::of(&args.workflow_id, RunView::Missing, core.operator_presence())
                }
                Err(problem) => ToolAnswer::Error(Answer::Refused(problem)),
            }
        }
        CANCEL_TOOL_RUN => {
            let args = match parse_args::<CancelToolRunArgs>(limits, CANCEL_TOOL_RUN, arguments) {
                Ok(args) => args,
                Err(text) => return Some(invalid(text)),
            };
            let confirm = CANCEL_CONFIRM_WAIT.min(Duration::from_secs(u64::from(limits.wait_budget_seconds)));
            match core.cancel_run(caller, &args.workflow_id, confirm).await {
                Ok(view) => ToolAnswer::of(&args.workflow_id, view, core.operator_presence()),
                Err(problem) => ToolAnswer::Error(Answer::Refused(problem)),
            }
        }
        LIST_TOOL_RUNS => {
            let args = match parse_args::<ListToolRunsArgs>(limits, LIST_TOOL_RUNS, arguments) {
                Ok(args) => args,
                Err(text) => return Some(invalid(text)),
            };
            let limit = args.limit.unwrap_or(DEFAULT_LIST_LIMIT);
            if !(1..=MAX_LIST_LIMIT).contains(&limit) {
                return Some(invalid(format!(
                    "limit must be an integer from 1 to {MAX_LIST_LIMIT} (got {limit})"
                )));
            }
            let now = k8s_openapi::jiff::Timestamp::now();
            let rows: Vec<ListedRun> = core
                .list_runs(caller, args.tool.as_deref())
                .iter()
                .map(|run| {
                    let outcome = run_outcome(run, now);
                    ListedRun {
                        workflow_id: outcome.workflow_id,
                        tool: run.spec.tool.clone(),
                        status: outcome.status,
                        progress: outcome.details.progress,
                        created: run
                            .metadata
                            .creation_timestamp
                            .as_ref()
                            .map(|t| t.0.to_string())
                            .unwrap_or_default(),
                        status_message: outcome.status_message,
                    }
                })
                .collect();
            let total = u32::try_from(rows.len()).unwrap_or(u32::MAX);
            ToolAnswer::List(RunList { runs: rows.into_iter().take(limit as usize).collect(), total })
        }
        _ => return None,
    })
}
