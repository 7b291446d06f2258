//! The rmcp face: the four tools, and the 2026-07-28 task hooks rmcp calls.
//! Each tool parses its arguments, calls the core, and renders its answer.
//! One `MiningServer` is made per request by rmcp's factory; it only clones
//! an `Arc` of the [`Core`].

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, GetTaskResult, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{tasks_2026, tool_calls};
use crate::contract::{Progress, outcome};
use crate::core::{Answer, CancelOutcome, Core, StartOptions, View, WaitListener};
use crate::ids::Caller;
use crate::tools::{
    CANCEL_MINING, CancelMiningArgs, GET_MINING_RESULT, GetMiningResultArgs, LIST_MINING_WORKFLOWS,
    ListMiningWorkflowsArgs, ListedWorkflow, MiningTool, WorkflowList, parse_args,
};

/// How long `cancel_mining` waits for the operator to confirm the cancel.
const CANCEL_CONFIRM_WAIT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct MiningServer {
    pub(crate) core: Arc<Core>,
}

impl MiningServer {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
}

pub(crate) fn caller_of(ctx: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| {
            McpError::internal_error("the request reached the tools without an authenticated caller", None)
        })
}

/// The caller's trace context, from the request's `_meta` or its HTTP header.
fn trace_of(ctx: &RequestContext<RoleServer>) -> Option<mining_api::trace::TraceParent> {
    let headers = ctx.extensions.get::<http::request::Parts>().map(|parts| &parts.headers);
    super::incoming_trace(Some(&**ctx.meta), headers)
}

/// A tool call's wait: progress goes out as `notifications/progress` when
/// the request carried a progress token; the call's cancellation ends it.
struct ToolCallListener {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    cancelled: CancellationToken,
}

impl ToolCallListener {
    fn of(ctx: &RequestContext<RoleServer>) -> Self {
        Self { peer: ctx.peer.clone(), token: ctx.meta.get_progress_token(), cancelled: ctx.ct.clone() }
    }
}

impl WaitListener for ToolCallListener {
    async fn progress(&mut self, progress: Progress, message: &str) -> bool {
        let Some(token) = &self.token else { return true };
        let notification = ProgressNotificationParam::new(token.clone(), f64::from(progress.blocks_done))
            .with_total(f64::from(progress.blocks_total))
            .with_message(message.to_string());
        if let Err(err) = self.peer.notify_progress(notification).await {
            // A lost notification is no reason to end the wait; the cancellation is.
            tracing::debug!(error = %err, "progress notification not delivered");
        }
        true
    }

    async fn gone(&self) {
        self.cancelled.cancelled().await;
    }
}

impl MiningServer {
    async fn start_mining(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Answer {
        // The budget covers the whole call, API calls included.
        let started = Instant::now();
        let options = StartOptions { trace: trace_of(ctx), ..StartOptions::default() };
        let created = match self.core.start(caller, arguments, options).await {
            Ok(created) => created,
            Err(answer) => return answer,
        };
        let deadline = started + Duration::from_secs(u64::from(created.request.wait_seconds));
        let view = self.core.wait(caller, created.workflow, deadline, &mut ToolCallListener::of(ctx)).await;
        Answer::of(created.id.as_str(), view, self.core.operator_presence())
    }

    async fn get_mining_result(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Answer {
        let limits = &self.core.limits;
        let (args, wait) = match parse_args::<GetMiningResultArgs>(limits, GET_MINING_RESULT, arguments)
            .and_then(|args| limits.wait_seconds(args.wait_seconds, 0).map(|wait| (args, wait)))
        {
            Ok(parsed) => parsed,
            Err(text) => return Answer::InvalidArguments(text),
        };
        let deadline = Instant::now() + Duration::from_secs(u64::from(wait));
        match self.core.find(caller, &args.workflow_id).await {
            Ok(View::Found(workflow)) => {
                let view = self.core.wait(caller, workflow, deadline, &mut ToolCallListener::of(ctx)).await;
                Answer::of(&args.workflow_id, view, self.core.operator_presence())
            }
            Ok(view) => Answer::of(&args.workflow_id, view, self.core.operator_presence()),
            Err(problem) => Answer::Refused(problem),
        }
    }

    async fn cancel_mining(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Answer {
        let args = match parse_args::<CancelMiningArgs>(&self.core.limits, CANCEL_MINING, arguments) {
            Ok(args) => args,
            Err(text) => return Answer::InvalidArguments(text),
        };
        let id = &args.workflow_id;
        let workflow = match self.core.cancel(caller, id).await {
            Ok(CancelOutcome::NotCancelled(view)) => {
                return Answer::of(id, view, self.core.operator_presence());
            }
            Ok(CancelOutcome::AlreadyFinished(workflow)) => {
                return Answer::of(id, View::Found(workflow), self.core.operator_presence());
            }
            Ok(CancelOutcome::AlreadyRequested(workflow) | CancelOutcome::Requested(workflow)) => workflow,
            Err(problem) => return Answer::Refused(problem),
        };
        let wait =
            CANCEL_CONFIRM_WAIT.min(Duration::from_secs(u64::from(self.core.limits.wait_budget_seconds)));
        let view =
            self.core.wait(caller, workflow, Instant::now() + wait, &mut ToolCallListener::of(ctx)).await;
        Answer::of(id, view, self.core.operator_presence())
    }

    fn list_mining_workflows(&self, caller: &Caller, arguments: Option<JsonObject>) -> Answer {
        let limits = &self.core.limits;
        let (args, limit) =
            match parse_args::<ListMiningWorkflowsArgs>(limits, LIST_MINING_WORKFLOWS, arguments)
                .and_then(|args| limits.list_limit(args.limit).map(|limit| (args, limit)))
            {
                Ok(parsed) => parsed,
                Err(text) => return Answer::InvalidArguments(text),
            };
        let now = k8s_openapi::jiff::Timestamp::now();
        let rows: Vec<ListedWorkflow> = self
            .core
            .list(caller)
            .into_iter()
            .filter_map(|listed| {
                let workflow = listed.workflow;
                let answer = outcome(&workflow, now).with_operator(self.core.operator_presence());
                Some(ListedWorkflow {
                    workflow_id: answer.workflow_id,
                    status: answer.status,
                    progress: answer.details.progress?,
                    difficulty: workflow.mined_difficulty(),
                    created: workflow
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.to_string())
                        .unwrap_or_default(),
                    status_message: answer.status_message,
                })
            })
            .filter(|row| args.status.is_none_or(|wanted| wanted.matches(row.status)))
            .collect();
        let total = u32::try_from(rows.len()).unwrap_or(u32::MAX);
        let workflows = rows.into_iter().take(limit as usize).collect();
        Answer::List(WorkflowList { workflows, total })
    }
}

/// A companion tool's name as a metric label (a fixed set).
fn companion_label(name: &str) -> &'static str {
    use crate::tool_runs::contract::{CANCEL_TOOL_RUN, GET_TOOL_RESULT};
    match name {
        GET_TOOL_RESULT => GET_TOOL_RESULT,
        CANCEL_TOOL_RUN => CANCEL_TOOL_RUN,
        _ => crate::tool_runs::contract::LIST_TOOL_RUNS,
    }
}

impl ServerHandler for MiningServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build())
            .with_server_info(
                Implementation::new("mining-operator", env!("CARGO_PKG_VERSION")).with_title("Mining operator"),
            )
            .with_instructions(
                "Mines proof-of-work chains on Kubernetes. Call start_mining; if it answers status \"running\", \
                 keep its workflow_id and call get_mining_result with it after poll_after_seconds until the \
                 status is completed, failed or cancelled. list_mining_workflows finds lost ids.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.core.listed_tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.core
            .tools
            .iter()
            .find(|tool| tool.name == name)
            .cloned()
            .or_else(|| self.core.catalog.get(name).map(|tool| tool.listed.clone()))
            .or_else(|| {
                crate::tool_runs::contract::companion_tools().into_iter().find(|tool| tool.name == name)
            })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = caller_of(&ctx)?;
        let started = Instant::now();
        let declares_tasks = ctx.client_capabilities().is_some_and(|caps| caps.supports_tasks());
        let Some(tool) = MiningTool::named(&request.name) else {
            let name = request.name.to_string();
            let options = StartOptions {
                trace: trace_of(&ctx),
                idempotency_key: super::idempotency_key_of(Some(&**ctx.meta)),
                ..StartOptions::default()
            };
            if declares_tasks
                && let Some((response, outcome)) = tasks_2026::start_tool_task(
                    &self.core,
                    &caller,
                    &name,
                    request.arguments.clone(),
                    options.clone(),
                )
                .await
            {
                self.core.record_call("defined_tool", outcome, None);
                return Ok(response);
            }
            let mut listener = ToolCallListener::of(&ctx);
            let companion = tool_calls::call_companion(
                &self.core,
                &caller,
                &name,
                request.arguments.clone(),
                &mut listener,
            )
            .await;
            let answer = match companion {
                Some(answer) => Some((answer, "companion")),
                None => tool_calls::call_defined(
                    &self.core,
                    &caller,
                    &name,
                    request.arguments,
                    options,
                    &mut listener,
                )
                .await
                .map(|answer| (answer, "defined")),
            };
            if let Some((answer, kind)) = answer {
                // Metric labels stay bounded: defined tools are counted as one.
                let label = if kind == "defined" { "defined_tool" } else { companion_label(&name) };
                self.core.record_call(label, answer.metric_outcome(), Some(started.elapsed()));
                return Ok(answer.into_result().into());
            }
            self.core.record_call("unknown", "error", None);
            return Err(McpError::invalid_params(
                format!("unknown tool {:?}; this server has {}", request.name, MiningTool::names_in_words()),
                None,
            ));
        };
        if tool == MiningTool::StartMining && declares_tasks {
            let (response, outcome) =
                tasks_2026::start_mining_task(&self.core, &caller, request.arguments, trace_of(&ctx)).await;
            self.core.record_call(tool.name(), outcome, None);
            return Ok(response);
        }
        let answer = match tool {
            MiningTool::StartMining => self.start_mining(&caller, request.arguments, &ctx).await,
            MiningTool::GetMiningResult => self.get_mining_result(&caller, request.arguments, &ctx).await,
            MiningTool::CancelMining => self.cancel_mining(&caller, request.arguments, &ctx).await,
            MiningTool::ListMiningWorkflows => self.list_mining_workflows(&caller, request.arguments),
        };
        let tool = tool.name();
        let outcome = answer.metric_outcome();
        self.core.record_call(tool, outcome, Some(started.elapsed()));
        tracing::debug!(tool, caller = %caller.name, outcome, "tool answered");
        Ok(answer.into_result().into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let caller = caller_of(&ctx)?;
        tasks_2026::get_task(&self.core, &caller, &request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = caller_of(&ctx)?;
        tasks_2026::cancel_task(&self.core, &caller, &request.task_id).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = caller_of(&ctx)?;
        // Mining never asks for input: an existing task has nothing to update.
        tasks_2026::get_task(&self.core, &caller, &request.task_id).await?;
        Err(McpError::invalid_params(
            format!("task {:?} never waits for input; there is nothing to update", request.task_id),
            None,
        ))
    }
}
