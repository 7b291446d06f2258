//! The MCP tools: argument checks, the one create or patch each needs, the
//! budgeted wait, and the mapping to the result contract. One `MiningServer`
//! is made per request by rmcp's factory; it only clones an `Arc` of [`App`].

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use mining_api::{MiningWorkflow, labels};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock, GetTaskParams,
    GetTaskResult, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::time::Instant;

use crate::cache::{Cached, WorkflowCache};
use crate::contract::{MiningOutcome, OutcomeStatus, outcome};
use crate::ids::{Caller, WorkflowId};
use crate::metrics::{Metrics, ToolLabels, ToolNameLabels};
use crate::tools::{
    CANCEL_MINING, CancelMiningArgs, GET_MINING_RESULT, GetMiningResultArgs, LIST_MINING_WORKFLOWS, Limits,
    ListMiningWorkflowsArgs, ListedWorkflow, START_MINING, StartMiningArgs, StartRequest, WorkflowList,
    parse_args,
};
use crate::workflows::{self, Created};

/// How long `cancel_mining` waits for the operator to confirm the cancel.
const CANCEL_CONFIRM_WAIT: Duration = Duration::from_secs(5);

/// Shared by every request.
pub struct App {
    pub limits: Limits,
    pub max_running_per_caller: u32,
    pub api: Api<MiningWorkflow>,
    pub cache: Arc<WorkflowCache>,
    pub metrics: Arc<Metrics>,
    pub tools: Vec<Tool>,
    /// The operator's retention of finished workflows that set none (a task's `ttl`).
    pub default_ttl_seconds: u64,
    /// Longest a 2025-11-25 `tasks/result` waits before asking the client to call again.
    pub task_result_wait: Duration,
    /// Tasks per 2025-11-25 `tasks/list` page.
    pub task_list_page_size: usize,
}

#[derive(Clone)]
pub struct MiningServer {
    pub(crate) app: Arc<App>,
}

impl MiningServer {
    pub fn new(app: Arc<App>) -> Self {
        Self { app }
    }
}

/// What a tool answers, before it becomes a `CallToolResult`.
pub(crate) enum Answer {
    Outcome(MiningOutcome),
    List(WorkflowList),
    /// Arguments the model can fix: a tool error naming what is allowed.
    InvalidArguments(String),
    /// A valid request that cannot be served now (limit, API down): a tool error.
    Refused(String),
}

impl Answer {
    pub(crate) fn metric_outcome(&self) -> &'static str {
        match self {
            Self::Outcome(outcome) => outcome.status.as_str(),
            Self::List(_) => "listed",
            Self::InvalidArguments(_) => "invalid_arguments",
            Self::Refused(_) => "refused",
        }
    }

    pub(crate) fn into_result(self) -> CallToolResult {
        match self {
            Self::Outcome(outcome) => {
                structured(outcome.to_text(), &outcome, outcome.status == OutcomeStatus::Failed)
            }
            Self::List(list) => {
                let mut text = format!("{} of your mining workflows (newest first):", list.workflows.len());
                for row in &list.workflows {
                    text.push_str(&format!(
                        "\n{} [{}] {}",
                        row.workflow_id,
                        row.status.as_str(),
                        row.status_message
                    ));
                }
                structured(text, &list, false)
            }
            Self::InvalidArguments(text) | Self::Refused(text) => {
                CallToolResult::error(vec![ContentBlock::text(text)])
            }
        }
    }
}

/// A result with `structuredContent`, a short rendering and the JSON as text
/// (for clients that read text only).
fn structured(text: String, value: &impl serde::Serialize, is_error: bool) -> CallToolResult {
    let value = serde_json::to_value(value).unwrap_or_default();
    let content = vec![ContentBlock::text(text), ContentBlock::text(value.to_string())];
    let mut result = if is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
    result.structured_content = Some(value);
    result
}

/// What a caller may see of one workflow.
pub(crate) enum View {
    Missing,
    Unreadable(String),
    Found(Box<MiningWorkflow>),
}

pub(crate) fn belongs_to(workflow: &MiningWorkflow, caller: &Caller) -> bool {
    workflow.metadata.labels.as_ref().and_then(|l| l.get(labels::CALLER)) == Some(&caller.label)
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

impl MiningServer {
    /// The workflow as this caller may see it: from the cache, else (for a
    /// name the watch has not delivered yet) one read from the API server.
    pub(crate) async fn visible(&self, caller: &Caller, id: &WorkflowId) -> Result<View, String> {
        match self.app.cache.get(id.as_str()) {
            Cached::Found(workflow) if belongs_to(&workflow, caller) => Ok(View::Found(workflow)),
            Cached::Found(_) => Ok(View::Missing),
            Cached::Unreadable { caller_label, problem, .. }
                if caller_label.as_deref() == Some(&caller.label) =>
            {
                Ok(View::Unreadable(problem))
            }
            Cached::Unreadable { .. } => Ok(View::Missing),
            Cached::Missing => match workflows::get(&self.app.api, id.as_str()).await {
                Ok(Some(workflow)) if belongs_to(&workflow, caller) => Ok(View::Found(Box::new(workflow))),
                Ok(_) => Ok(View::Missing),
                Err(err) => {
                    self.app
                        .metrics
                        .api_errors
                        .get_or_create(&crate::metrics::ReasonLabels { reason: "get" })
                        .inc();
                    Err(format!("cannot read the workflow: {err}"))
                }
            },
        }
    }

    /// Waits until `deadline` for the workflow to finish, woken by the watch,
    /// sending progress notifications when the request asked for them.
    async fn wait(
        &self,
        caller: &Caller,
        id: &WorkflowId,
        mut latest: Box<MiningWorkflow>,
        deadline: Instant,
        ctx: &RequestContext<RoleServer>,
    ) -> View {
        let mut subscription = self.app.cache.subscribe(id.as_str());
        let progress_token = ctx.meta.get_progress_token();
        let mut reported: Option<u32> = None;
        let mut seen_in_cache = false;
        loop {
            match self.app.cache.get(id.as_str()) {
                Cached::Found(workflow) => {
                    seen_in_cache = true;
                    latest = workflow;
                }
                Cached::Unreadable { problem, .. } => return View::Unreadable(problem),
                // Deleted while we waited (e.g. its retention ran out).
                Cached::Missing if seen_in_cache => return View::Missing,
                // Created a moment ago and not delivered by the watch yet.
                Cached::Missing => {}
            }
            if !belongs_to(&latest, caller) {
                return View::Missing;
            }
            let answer = outcome(&latest, Timestamp::now());
            if let (Some(token), Some(progress)) = (&progress_token, answer.progress)
                && reported.is_none_or(|done| progress.blocks_done > done)
            {
                reported = Some(progress.blocks_done);
                let notification =
                    ProgressNotificationParam::new(token.clone(), f64::from(progress.blocks_done))
                        .with_total(f64::from(progress.blocks_total))
                        .with_message(answer.status_message.clone());
                if let Err(err) = ctx.peer.notify_progress(notification).await {
                    tracing::debug!(error = %err, "progress notification not delivered");
                }
            }
            if answer.status != OutcomeStatus::Running || Instant::now() >= deadline {
                return View::Found(latest);
            }
            tokio::select! {
                () = subscription.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = ctx.ct.cancelled() => return View::Found(latest),
            }
        }
    }

    pub(crate) fn answer(id: &WorkflowId, view: View) -> Answer {
        match view {
            View::Missing => Answer::Outcome(MiningOutcome::not_found(id.as_str())),
            View::Found(workflow) => Answer::Outcome(outcome(&workflow, Timestamp::now())),
            View::Unreadable(problem) => Answer::Outcome(MiningOutcome {
                status: OutcomeStatus::Failed,
                reason: Some("Unreadable".into()),
                status_message: "The workflow's stored state cannot be read".into(),
                error: Some(problem),
                next: None,
                ..MiningOutcome::not_found(id.as_str())
            }),
        }
    }

    fn running_count(&self, caller: &Caller) -> usize {
        self.app
            .cache
            .list_for(&caller.label)
            .iter()
            .filter(|cached| match cached {
                Cached::Found(workflow) => {
                    !workflow.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p.is_finished())
                }
                _ => false,
            })
            .count()
    }

    /// Checks `start_mining`'s arguments and creates its workflow (or finds
    /// the one an idempotency key already started). The error is the answer.
    pub(crate) async fn create_workflow(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
        annotations: &[(&str, String)],
    ) -> Result<(WorkflowId, Box<MiningWorkflow>, StartRequest), Answer> {
        let limits = &self.app.limits;
        let request = parse_args::<StartMiningArgs>(limits, START_MINING, arguments)
            .and_then(|args| limits.start_request(args))
            .map_err(Answer::InvalidArguments)?;
        let id = match &request.idempotency_key {
            Some(key) => WorkflowId::for_idempotency_key(caller, key),
            None => WorkflowId::random()
                .map_err(|err| Answer::Refused(format!("no random source for a workflow id: {err}")))?,
        };
        // A retry finds its workflow without counting against the limit.
        let existing = match self.app.cache.get(id.as_str()) {
            Cached::Found(workflow) if belongs_to(&workflow, caller) => Some(workflow),
            _ => None,
        };
        let workflow = match existing {
            Some(workflow) => workflow,
            None => {
                let running = self.running_count(caller);
                let limit = self.app.max_running_per_caller as usize;
                if running >= limit {
                    return Err(Answer::Refused(format!(
                        "you already have {running} unfinished mining workflows (the limit is {limit}); \
                         wait for them with get_mining_result or stop some with cancel_mining"
                    )));
                }
                let built = workflows::build_workflow(&id, caller, &request, annotations);
                match workflows::create(&self.app.api, &built).await {
                    Ok(Created::New(workflow)) => {
                        tracing::info!(workflow = %id, caller = %caller.name, difficulty = request.difficulty, blocks = request.blocks, "mining started");
                        workflow
                    }
                    Ok(Created::Existing(workflow)) if request.idempotency_key.is_some() => workflow,
                    // Only a 130-bit collision gets here; never hand over another workflow.
                    Ok(Created::Existing(_)) => {
                        return Err(Answer::Refused("the new workflow's id is taken; try again".into()));
                    }
                    Err(err) => {
                        self.app
                            .metrics
                            .api_errors
                            .get_or_create(&crate::metrics::ReasonLabels { reason: "create" })
                            .inc();
                        tracing::warn!(workflow = %id, error = %err, "creating a workflow failed");
                        return Err(Answer::Refused(format!(
                            "could not start mining: {err}; nothing was created, try again"
                        )));
                    }
                }
            }
        };
        if !belongs_to(&workflow, caller) {
            // The id derives from the caller, so only a hash collision gets here.
            return Err(Answer::Refused(
                "the workflow id for this idempotency_key is taken; use another key".into(),
            ));
        }
        if let Some(key) = &request.idempotency_key
            && (workflow.spec.difficulty, workflow.spec.blocks) != (request.difficulty, request.blocks)
        {
            return Err(Answer::InvalidArguments(format!(
                "idempotency_key {key:?} already started workflow {id} with difficulty {} and blocks {}; \
                 use a new key to mine with other arguments",
                workflow.spec.difficulty, workflow.spec.blocks
            )));
        }
        Ok((id, workflow, request))
    }

    async fn start_mining(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Answer {
        // The budget covers the whole call, API calls included.
        let started = Instant::now();
        let (id, workflow, request) = match self.create_workflow(caller, arguments, &[]).await {
            Ok(created) => created,
            Err(answer) => return answer,
        };
        let deadline = started + Duration::from_secs(u64::from(request.wait_seconds));
        let view = self.wait(caller, &id, workflow, deadline, ctx).await;
        Self::answer(&id, view)
    }

    async fn get_mining_result(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Answer {
        let limits = &self.app.limits;
        let (args, wait) = match parse_args::<GetMiningResultArgs>(limits, GET_MINING_RESULT, arguments)
            .and_then(|args| limits.wait_seconds(args.wait_seconds, 0).map(|wait| (args, wait)))
        {
            Ok(parsed) => parsed,
            Err(text) => return Answer::InvalidArguments(text),
        };
        let deadline = Instant::now() + Duration::from_secs(u64::from(wait));
        let Some(id) = WorkflowId::parse(&args.workflow_id) else {
            return Answer::Outcome(MiningOutcome::not_found(&args.workflow_id));
        };
        match self.visible(caller, &id).await {
            Ok(View::Found(workflow)) => {
                let view = self.wait(caller, &id, workflow, deadline, ctx).await;
                Self::answer(&id, view)
            }
            Ok(view) => Self::answer(&id, view),
            Err(problem) => Answer::Refused(problem),
        }
    }

    async fn cancel_mining(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
        ctx: &RequestContext<RoleServer>,
    ) -> Answer {
        let args = match parse_args::<CancelMiningArgs>(&self.app.limits, CANCEL_MINING, arguments) {
            Ok(args) => args,
            Err(text) => return Answer::InvalidArguments(text),
        };
        let Some(id) = WorkflowId::parse(&args.workflow_id) else {
            return Answer::Outcome(MiningOutcome::not_found(&args.workflow_id));
        };
        let workflow = match self.visible(caller, &id).await {
            Ok(View::Found(workflow)) => workflow,
            Ok(view) => return Self::answer(&id, view),
            Err(problem) => return Answer::Refused(problem),
        };
        if workflow.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p.is_finished()) {
            return Self::answer(&id, View::Found(workflow));
        }
        let patched = match workflows::request_cancel(&self.app.api, id.as_str()).await {
            Ok(patched) => Box::new(patched),
            Err(err) => {
                self.app
                    .metrics
                    .api_errors
                    .get_or_create(&crate::metrics::ReasonLabels { reason: "patch" })
                    .inc();
                return Answer::Refused(format!("could not cancel: {err}"));
            }
        };
        tracing::info!(workflow = %id, caller = %caller.name, "cancel requested");
        let wait =
            CANCEL_CONFIRM_WAIT.min(Duration::from_secs(u64::from(self.app.limits.wait_budget_seconds)));
        let view = self.wait(caller, &id, patched, Instant::now() + wait, ctx).await;
        Self::answer(&id, view)
    }

    fn list_mining_workflows(&self, caller: &Caller, arguments: Option<JsonObject>) -> Answer {
        let limits = &self.app.limits;
        let (args, limit) =
            match parse_args::<ListMiningWorkflowsArgs>(limits, LIST_MINING_WORKFLOWS, arguments)
                .and_then(|args| limits.list_limit(args.limit).map(|limit| (args, limit)))
            {
                Ok(parsed) => parsed,
                Err(text) => return Answer::InvalidArguments(text),
            };
        let now = Timestamp::now();
        let mut rows: Vec<(Option<Timestamp>, ListedWorkflow)> = self
            .app
            .cache
            .list_for(&caller.label)
            .into_iter()
            .filter_map(|cached| match cached {
                Cached::Found(workflow) => {
                    let created = workflow.metadata.creation_timestamp.as_ref().map(|t| t.0);
                    let answer = outcome(&workflow, now);
                    Some((
                        created,
                        ListedWorkflow {
                            workflow_id: answer.workflow_id,
                            status: answer.status,
                            progress: answer.progress?,
                            difficulty: workflow
                                .status
                                .as_ref()
                                .and_then(|s| s.admitted_difficulty)
                                .unwrap_or(workflow.spec.difficulty),
                            created: created.map(|t| t.to_string()).unwrap_or_default(),
                            status_message: answer.status_message,
                        },
                    ))
                }
                _ => None,
            })
            .filter(|(_, row)| args.status.is_none_or(|wanted| wanted.matches(row.status)))
            .collect();
        rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.workflow_id.cmp(&b.1.workflow_id)));
        let total = u32::try_from(rows.len()).unwrap_or(u32::MAX);
        let workflows = rows.into_iter().take(limit as usize).map(|(_, row)| row).collect();
        Answer::List(WorkflowList { workflows, total })
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
        Ok(ListToolsResult::with_all_items(self.app.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.app.tools.iter().find(|tool| tool.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = caller_of(&ctx)?;
        let started = Instant::now();
        let tool: &'static str = match request.name.as_ref() {
            START_MINING => START_MINING,
            GET_MINING_RESULT => GET_MINING_RESULT,
            CANCEL_MINING => CANCEL_MINING,
            LIST_MINING_WORKFLOWS => LIST_MINING_WORKFLOWS,
            other => {
                self.app
                    .metrics
                    .tool_calls
                    .get_or_create(&ToolLabels { tool: "unknown", outcome: "error" })
                    .inc();
                return Err(McpError::invalid_params(
                    format!(
                        "unknown tool {other:?}; this server has {START_MINING}, {GET_MINING_RESULT}, {CANCEL_MINING} and {LIST_MINING_WORKFLOWS}"
                    ),
                    None,
                ));
            }
        };
        let declares_tasks = ctx.client_capabilities().is_some_and(|caps| caps.supports_tasks());
        if tool == START_MINING && declares_tasks {
            let (response, outcome) = self.start_mining_task(&caller, request.arguments).await;
            self.app.metrics.tool_calls.get_or_create(&ToolLabels { tool, outcome }).inc();
            return Ok(response);
        }
        let answer = match tool {
            START_MINING => self.start_mining(&caller, request.arguments, &ctx).await,
            GET_MINING_RESULT => self.get_mining_result(&caller, request.arguments, &ctx).await,
            CANCEL_MINING => self.cancel_mining(&caller, request.arguments, &ctx).await,
            _ => self.list_mining_workflows(&caller, request.arguments),
        };
        let metrics = &self.app.metrics;
        metrics.tool_calls.get_or_create(&ToolLabels { tool, outcome: answer.metric_outcome() }).inc();
        metrics
            .tool_duration
            .get_or_create(&ToolNameLabels { tool })
            .observe(started.elapsed().as_secs_f64());
        tracing::debug!(tool, caller = %caller.name, outcome = answer.metric_outcome(), "tool answered");
        Ok(answer.into_result().into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let caller = caller_of(&ctx)?;
        self.extension_get_task(&caller, &request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = caller_of(&ctx)?;
        self.extension_cancel_task(&caller, &request.task_id).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = caller_of(&ctx)?;
        // Mining never asks for input: an existing task has nothing to update.
        self.extension_get_task(&caller, &request.task_id).await?;
        Err(McpError::invalid_params(
            format!("task {:?} never waits for input; there is nothing to update", request.task_id),
            None,
        ))
    }
}
