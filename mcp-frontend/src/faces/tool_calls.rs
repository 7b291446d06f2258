//! The rmcp face of defined tools: a call of an McpTool, and the companion
//! tools `get_tool_result`, `cancel_tool_run` and `list_tool_runs`; the
//! core answers each as it answers the mining tools.

use std::time::Duration;

use mining_api::ToolRun;
use rmcp::model::JsonObject;
use tokio::time::Instant;

use crate::core::{Answer, Core, Served as _, StartOptions, WaitListener};
use crate::core::{RespondError, Responded};
use crate::ids::Caller;
use crate::tool_runs::catalog::DefinedTool;
use crate::tool_runs::contract::{
    CANCEL_TOOL_RUN, CancelToolRunArgs, GET_TOOL_RESULT, GetToolResultArgs, LIST_TOOL_RUNS, ListToolRunsArgs,
    ListedRun, RESPOND_TOOL_RUN, RespondToolRunArgs, RunList, ToolOutcome, responded_outcome,
};
use crate::tools::parse_args;

/// How long `cancel_tool_run` waits for the operator to confirm.
const CANCEL_CONFIRM_WAIT: Duration = Duration::from_secs(5);

/// Calls the defined tool `name`: a run within the caller's limits, waited
/// for within the tool's budget, its progress told to `listener`.
pub async fn call_defined(
    core: &Core,
    caller: &Caller,
    name: &str,
    tool: &DefinedTool,
    arguments: Option<JsonObject>,
    options: StartOptions<'_>,
    listener: &mut impl WaitListener,
) -> Answer {
    let started = Instant::now();
    let run = match core.start_run(caller, name, tool, arguments, options).await {
        Ok(run) => run,
        Err(answer) => return answer,
    };
    let budget = tool
        .spec
        .wait_budget_seconds
        .unwrap_or(core.limits.wait_budget_seconds)
        .min(core.limits.wait_budget_seconds);
    let deadline = started + Duration::from_secs(u64::from(budget));
    let id = run.metadata.name.clone().unwrap_or_default();
    Answer::of(&id, core.wait(caller, run, deadline, listener).await, core.operator_presence())
}

/// Answers the companion tool `name` (one of `COMPANIONS`).
pub async fn call_companion(
    core: &Core,
    caller: &Caller,
    name: &str,
    arguments: Option<JsonObject>,
    listener: &mut impl WaitListener,
) -> Answer {
    let limits = &core.limits;
    match name {
        GET_TOOL_RESULT => {
            let parsed =
                parse_args::<GetToolResultArgs>(limits, GET_TOOL_RESULT, arguments).and_then(|args| {
                    let wait = limits.wait().check(args.wait_seconds.unwrap_or(0));
                    wait.map(|wait| (args, wait))
                        .map_err(|err| format!("{err}; poll with get_tool_result for longer"))
                });
            let (args, wait) = match parsed {
                Ok(parsed) => parsed,
                Err(text) => return Answer::InvalidArguments(text),
            };
            let deadline = Instant::now() + Duration::from_secs(u64::from(wait));
            core.get_result::<ToolRun>(caller, &args.workflow_id, deadline, listener).await
        }
        CANCEL_TOOL_RUN => {
            let args = match parse_args::<CancelToolRunArgs>(limits, CANCEL_TOOL_RUN, arguments) {
                Ok(args) => args,
                Err(text) => return Answer::InvalidArguments(text),
            };
            let confirm = CANCEL_CONFIRM_WAIT.min(Duration::from_secs(u64::from(limits.wait_budget_seconds)));
            core.cancel_confirmed::<ToolRun>(caller, &args.workflow_id, confirm, listener).await
        }
        RESPOND_TOOL_RUN => {
            let args = match parse_args::<RespondToolRunArgs>(limits, RESPOND_TOOL_RUN, arguments) {
                Ok(args) => args,
                Err(text) => return Answer::InvalidArguments(text),
            };
            let now = k8s_openapi::jiff::Timestamp::now();
            let operator = core.operator_presence();
            match core.respond(caller, &args.workflow_id, &args.responses).await {
                Ok(Responded::Recorded { run, recorded, ignored }) => {
                    Answer::outcome(responded_outcome(&run, &recorded, &ignored, now).with_operator(operator))
                }
                Ok(Responded::NotWaiting(run)) => Answer::outcome(run.outcome(now).with_operator(operator)),
                Err(RespondError::NotFound) => Answer::outcome(ToolOutcome::not_found(&args.workflow_id)),
                Err(RespondError::Invalid(why)) => Answer::InvalidArguments(why),
                Err(RespondError::Unavailable(why)) => Answer::Refused(why),
                Err(RespondError::NotGranted(why)) => Answer::NotGranted(why),
            }
        }
        _ => {
            let args = match parse_args::<ListToolRunsArgs>(limits, LIST_TOOL_RUNS, arguments)
                .and_then(|args| limits.list_limit(args.limit).map(|limit| (args, limit)))
            {
                Ok(parsed) => parsed,
                Err(text) => return Answer::InvalidArguments(text),
            };
            list_runs(core, caller, args)
        }
    }
}

fn list_runs(core: &Core, caller: &Caller, (args, limit): (ListToolRunsArgs, u32)) -> Answer {
    let now = k8s_openapi::jiff::Timestamp::now();
    let rows: Vec<ListedRun> = core
        .list::<ToolRun>(caller)
        .into_iter()
        .filter(|listed| args.tool.as_deref().is_none_or(|tool| listed.work.spec.tool == tool))
        .map(|listed| {
            let outcome = listed.work.outcome(now).with_operator(core.operator_presence());
            ListedRun {
                workflow_id: outcome.workflow_id,
                tool: listed.work.spec.tool.clone(),
                status: outcome.status,
                progress: outcome.details.progress,
                created: listed
                    .work
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
    let list = RunList { runs: rows.into_iter().take(limit as usize).collect(), total };
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
    Answer::list(text, &list)
}
