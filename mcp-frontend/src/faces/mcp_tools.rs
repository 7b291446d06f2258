//! The rmcp face: the four tools, and the 2026-07-28 task hooks rmcp calls.
//! Each tool parses its arguments, calls the core, and renders its answer.
//! One `McpServer` is made per request by rmcp's factory; it only clones
//! an `Arc` of the [`Core`].

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, Implementation, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ResourceTemplate, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use mining_api::MiningWorkflow;

use super::{Called, asking_2026, tasks_2026, tool_calls};
use crate::contract::outcome;
use crate::core::{Answer, Core, StartOptions, WaitListener};
use crate::ids::Caller;
use crate::tools::{
    CANCEL_MINING, CancelMiningArgs, GET_MINING_RESULT, GetMiningResultArgs, LIST_MINING_WORKFLOWS,
    ListMiningWorkflowsArgs, ListedWorkflow, MiningTool, WorkflowList, parse_args,
};
use mining_api::tool_face::TaskSupport;
use rmcp::model::ProtocolVersion;

/// How long `cancel_mining` waits for the operator to confirm the cancel.
const CANCEL_CONFIRM_WAIT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct McpServer {
    pub(crate) core: Arc<Core>,
}

impl McpServer {
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
    async fn progress(&mut self, progress: f64, total: u32, message: &str) -> bool {
        let Some(token) = &self.token else { return true };
        let notification = ProgressNotificationParam::new(token.clone(), progress)
            .with_total(f64::from(total))
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

impl McpServer {
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
        let listener = &mut ToolCallListener::of(ctx);
        self.core.get_result::<MiningWorkflow>(caller, &args.workflow_id, deadline, listener).await
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
        let confirm =
            CANCEL_CONFIRM_WAIT.min(Duration::from_secs(u64::from(self.core.limits.wait_budget_seconds)));
        let listener = &mut ToolCallListener::of(ctx);
        self.core.cancel_confirmed::<MiningWorkflow>(caller, &args.workflow_id, confirm, listener).await
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
            .list::<MiningWorkflow>(caller)
            .into_iter()
            .filter_map(|listed| {
                let workflow = listed.work;
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
        let list = WorkflowList { workflows: rows.into_iter().take(limit as usize).collect(), total };
        let mut text = format!("{} of your mining workflows (newest first):", list.workflows.len());
        for row in &list.workflows {
            text.push_str(&format!("\n{} [{}] {}", row.workflow_id, row.status.as_str(), row.status_message));
        }
        Answer::list(text, &list)
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            // Prompts are declared with none offered: a prompt has no long-running
            // work to make durable, but an empty list (with its cache hints) is
            // what a client that asks should get, not -32601.
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(
            Implementation::new("mining-operator", env!("CARGO_PKG_VERSION")).with_title("Mining operator"),
        )
        .with_instructions(
            "Mines proof-of-work chains on Kubernetes. Call start_mining; if it answers status \"running\", \
                 keep its workflow_id and call get_mining_result with it after poll_after_seconds until the \
                 status is completed, failed or cancelled. list_mining_workflows finds lost ids.",
        )
    }

    /// A run's files are linked from its result (`resource_link`) and
    /// not listed: the list would be every caller's alike. The template
    /// says what their URIs look like.
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let files = ResourceTemplate::new(mining_api::tool_outputs::URI_TEMPLATE, "tool-run-file")
            .with_title("A file a tool run handed over")
            .with_description(
                "A file of one of your tool runs, linked from its result; readable by you alone until the run \
                 expires.",
            );
        let caller = caller_of(&ctx)?;
        let (_, mut templates) = super::documents::listed(&self.core, &caller).await;
        templates.insert(0, files);
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(Vec::new()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        Err(McpError::invalid_params(
            format!(
                "no prompt named {:?}: this server offers none (its tools are in tools/list)",
                request.name
            ),
            None,
        ))
    }

    /// What the tools the caller may call offer (a run's files are linked
    /// from its result, never listed across callers).
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let caller = caller_of(&ctx)?;
        let (resources, _) = super::documents::listed(&self.core, &caller).await;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let caller = caller_of(&ctx)?;
        Ok(ListToolsResult::with_all_items(self.core.listed_tools(&caller).await))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        match super::called(&self.core, name)? {
            Called::Mining(tool) => self.core.tools.iter().find(|listed| listed.name == tool.name()).cloned(),
            Called::Companion(companion) => {
                crate::tool_runs::contract::companion_tools().into_iter().find(|tool| tool.name == companion)
            }
            Called::Defined(tool) => Some(tool.listed.clone()),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = caller_of(&ctx)?;
        let started = Instant::now();
        let declares_tasks = ctx.client_capabilities().is_some_and(|caps| caps.supports_tasks());
        let Some(called) = super::called(&self.core, &request.name) else {
            self.core.record_call("unknown", "error", None);
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {:?}: not one of {}, nor a companion or defined tool offered to you; \
                     tools/list names them (an McpTool is offered once its Accepted condition is True)",
                    request.name,
                    MiningTool::names_in_words()
                ),
                None,
            ));
        };
        let options = StartOptions {
            trace: trace_of(&ctx),
            idempotency_key: super::idempotency_key_of(Some(&**ctx.meta)),
            ..StartOptions::default()
        };
        let modern = ctx.protocol_version().is_some_and(|version| version >= ProtocolVersion::V_2026_07_28);
        let capabilities = ctx.client_capabilities().filter(|_| modern);
        if let Called::Defined(tool) = &called {
            let as_task = declares_tasks && tool.spec.task_support != Some(TaskSupport::Forbidden);
            if let Some(refused) = asking_2026::refusal(tool, capabilities.as_ref(), modern, as_task) {
                self.core.record_call(called.label(), "refused", None);
                return Err(refused);
            }
            // Asked on the call itself: every plain call, and a task call of a
            // tool that asks before its task is made (or the retry that answers).
            let before_task = as_task
                && (request.request_state.is_some()
                    || asking_2026::ask_before_task_seconds(&self.core, tool) > 0);
            if modern && (!as_task || before_task) {
                let call = asking_2026::AskingCall {
                    core: &self.core,
                    caller: &caller,
                    tool,
                    capabilities: capabilities.as_ref(),
                };
                let response = call.answer(request, options, &mut ToolCallListener::of(&ctx), as_task).await;
                let outcome = response.as_ref().map_or("error", |(_, outcome)| *outcome);
                self.core.record_call(called.label(), outcome, Some(started.elapsed()));
                return response.map(|(response, _)| response);
            }
        }
        let forbidden = matches!(&called, Called::Defined(tool) if tool.spec.task_support == Some(TaskSupport::Forbidden));
        if declares_tasks
            && !forbidden
            && let Some(starter) = called.starter()
        {
            let (response, outcome) =
                tasks_2026::start_task(&self.core, &caller, starter, request.arguments, options).await;
            self.core.record_call(called.label(), outcome, None);
            return Ok(response);
        }
        let mut listener = ToolCallListener::of(&ctx);
        let answer = match &called {
            Called::Mining(tool) => match tool {
                MiningTool::StartMining => self.start_mining(&caller, request.arguments, &ctx).await,
                MiningTool::GetMiningResult => self.get_mining_result(&caller, request.arguments, &ctx).await,
                MiningTool::CancelMining => self.cancel_mining(&caller, request.arguments, &ctx).await,
                MiningTool::ListMiningWorkflows => self.list_mining_workflows(&caller, request.arguments),
            },
            Called::Companion(companion) => {
                tool_calls::call_companion(&self.core, &caller, companion, request.arguments, &mut listener)
                    .await
            }
            Called::Defined(tool) => {
                let arguments = request.arguments;
                tool_calls::call_defined(
                    &self.core,
                    &caller,
                    &tool.object,
                    tool,
                    arguments,
                    options,
                    &mut listener,
                )
                .await
            }
        };
        let label = called.label();
        let outcome = answer.metric_outcome();
        self.core.record_call(label, outcome, Some(started.elapsed()));
        tracing::debug!(tool = label, caller = %caller.name, outcome, "tool answered");
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
        tasks_2026::update_task(&self.core, &caller, &request.task_id, &request.input_responses).await
    }
}
