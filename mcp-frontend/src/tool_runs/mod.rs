//! Any container as a tool: calling an `McpTool` makes a `ToolRun` (with
//! the same ownership proof, caller label and quota ledger as a workflow),
//! waits for it within the budget, and finds, cancels and lists the
//! caller's own runs. The protocol face is `faces::tool_calls`.

pub mod catalog;
pub mod contract;

use mining_api::Work as _;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::api::{Patch, PatchParams};
use mining_api::tool::MAX_ARGUMENTS_BYTES;
use mining_api::{ToolRun, ToolRunSpec, annotations, labels};
use rmcp::model::JsonObject;
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::cache::Entry;
use crate::contract::Progress;
use crate::core::start::TOOL_RUN_ATTEMPTS;
use crate::core::{Answer, Core, StartOptions, Unattended, WaitListener};
use crate::ids::{Caller, WorkflowId, check_idempotency_key};
use crate::metrics::ReasonLabels;
use crate::quota;
use crate::workflows::Created;
use crate::workflows::MANAGER;
use catalog::DefinedTool;

/// What a caller may see of one run.
pub enum RunView {
    /// Unknown, malformed, expired or another caller's: all look the same.
    Missing,
    Found(Box<ToolRun>),
}

/// What a task id stands for, as this caller may see it.
pub enum TaskView {
    Run(Box<ToolRun>),
    Workflow(crate::core::View),
}

impl Core {
    /// The caller's tool run or workflow behind a task id: a run the cache
    /// holds first, then a workflow, then a run the watch has not brought yet.
    pub async fn find_task(&self, caller: &Caller, id_text: &str) -> Result<TaskView, String> {
        if let Entry::Found(run) = self.runs.get(id_text)
            && self.owns(&*run, caller)
        {
            return Ok(TaskView::Run(run));
        }
        match self.find(caller, id_text).await? {
            crate::core::View::Missing => match self.find_run(caller, id_text).await? {
                RunView::Found(run) => Ok(TaskView::Run(run)),
                RunView::Missing => Ok(TaskView::Workflow(crate::core::View::Missing)),
            },
            view => Ok(TaskView::Workflow(view)),
        }
    }

    /// Every tool as `tools/list` answers: the mining tools, then the
    /// defined tools and, while any is defined, their companions.
    pub fn listed_tools(&self) -> Vec<rmcp::model::Tool> {
        let mut tools = self.tools.clone();
        let defined = self.catalog.listed();
        if !defined.is_empty() {
            tools.extend(defined);
            tools.extend(contract::companion_tools());
        }
        tools
    }

    /// Checks a call's arguments against the tool and makes its run (or
    /// finds the one `options.idempotency_key` already made). The error is
    /// the answer; nothing is created unless the call is valid and within
    /// the caller's limits. The call is one span of the caller's trace, and
    /// the run keeps its traceparent, so the operator's reconciles join it.
    pub async fn start_run(
        &self,
        caller: &Caller,
        name: &str,
        tool: &DefinedTool,
        arguments: Option<JsonObject>,
        options: StartOptions<'_>,
    ) -> Result<Box<ToolRun>, Answer> {
        let span = tracing::info_span!("call_tool", tool = name, trace_id = tracing::field::Empty);
        if let Some(parent) = &options.trace {
            telemetry::continue_trace(&span, parent);
        }
        let mut annotations = options.annotations.to_vec();
        if let Some(own) = telemetry::traceparent_of(&span) {
            span.record("trace_id", own.trace_id_hex());
            annotations.push((annotations::TRACEPARENT, own.to_string()));
        }
        self.start_run_traced(caller, name, tool, arguments, options.idempotency_key, &annotations)
            .instrument(span)
            .await
    }

    async fn start_run_traced(
        &self,
        caller: &Caller,
        name: &str,
        tool: &DefinedTool,
        arguments: Option<JsonObject>,
        idempotency_key: Option<&str>,
        annotations: &[(&str, String)],
    ) -> Result<Box<ToolRun>, Answer> {
        let arguments = Value::Object(arguments.unwrap_or_default());
        let text = arguments.to_string();
        if text.len() > MAX_ARGUMENTS_BYTES {
            return Err(Answer::InvalidArguments(format!(
                "the arguments are {} bytes of JSON; {name} takes at most {MAX_ARGUMENTS_BYTES}",
                text.len()
            )));
        }
        tool.input.check(&arguments).map_err(|why| {
            Answer::InvalidArguments(format!("the arguments do not match {name}'s inputSchema: {why}"))
        })?;
        let Some(key) = idempotency_key else {
            let id = WorkflowId::random(&self.keys, caller)
                .map_err(|err| Answer::Refused(format!("no random source for a run id: {err}")))?;
            return match self.create_run(caller, id, name, tool, &text, annotations).await? {
                Created::New(run) => Ok(run),
                // Only an 80-bit collision gets here; never hand over another run.
                Created::Existing(_) => Err(Answer::Refused("the new run's id is taken; try again".into())),
            };
        };
        check_idempotency_key(key).map_err(Answer::InvalidArguments)?;
        let text = &text;
        let create =
            move |id| async move { self.create_run(caller, id, name, tool, text, annotations).await };
        let (id, run) = self.start_idempotent(caller, key, &self.runs, TOOL_RUN_ATTEMPTS, create).await?;
        if run.spec.tool != name || run.spec.arguments != *text {
            return Err(Answer::InvalidArguments(format!(
                "idempotency key {key:?} already made run {id} of {} with other arguments; use a new key \
                 to call {name} with these",
                run.spec.tool
            )));
        }
        Ok(run)
    }

    /// Makes the run `id` within the tool's limit per caller and the
    /// caller's quotas, both decided in the caller's ledger.
    async fn create_run(
        &self,
        caller: &Caller,
        id: WorkflowId,
        name: &str,
        tool: &DefinedTool,
        text: &str,
        annotations: &[(&str, String)],
    ) -> Result<Created<ToolRun>, Answer> {
        if let Some(limit) = tool.spec.max_running_per_caller {
            let unfinished = self
                .keys
                .caller_labels(&caller.digest)
                .iter()
                .map(|label| {
                    self.runs.count_for(label, |run| {
                        run.spec.tool == name && run.holds_place() && self.owns(run, caller)
                    })
                })
                .sum::<usize>();
            if unfinished >= limit as usize {
                self.metrics.starts_refused.get_or_create(&ReasonLabels { reason: "tool_running" }).inc();
                return Err(Answer::Refused(format!(
                    "you already have {unfinished} unfinished calls of {name} (its limit is {limit}); retry \
                     when one has finished (wait for it with get_tool_result) or stop one with cancel_tool_run"
                )));
            }
        }
        let owned = |workflow: &mining_api::MiningWorkflow| self.owns(workflow, caller);
        // Exact under bursts: decided in the caller's ledger, under its write precondition.
        let limit = tool.spec.max_running_per_caller.map(|limit| quota::ToolLimit { tool: name, limit });
        let ledgers = quota::Ledgers {
            ledgers: &self.ledgers,
            workflows: &self.api,
            previous: self.previous.as_ref().map(|p| &p.api),
            keys: &self.keys,
            quotas: self.quotas,
        };
        let reserved =
            self.api_call("quota", quota::reserve(&ledgers, caller, id.as_str(), limit, self, owned)).await;
        if let Err(refusal) = reserved {
            self.metrics.starts_refused.get_or_create(&ReasonLabels { reason: refusal.metric_label() }).inc();
            return Err(Answer::Refused(refusal.to_string()));
        }
        let run = self.build_run(caller, &id, name, tool, text.to_string(), annotations);
        match self.api_call("create", crate::workflows::create(&self.run_api, &run)).await {
            Ok(created) => {
                if let Created::New(_) = &created {
                    tracing::info!(run = %id, tool = name, caller = %caller.name, "tool run started");
                }
                Ok(created)
            }
            Err(err) => {
                self.count_api_error("create");
                Err(Answer::Refused(format!("could not start {name}: {err}; nothing was created, try again")))
            }
        }
    }

    /// The run a call makes: the tool's definition as it is now, the
    /// arguments as validated, the caller's label, `annotations` (a trace,
    /// a task's progress token), and the proof of it all.
    fn build_run(
        &self,
        caller: &Caller,
        id: &WorkflowId,
        name: &str,
        tool: &DefinedTool,
        arguments: String,
        annotations: &[(&str, String)],
    ) -> ToolRun {
        let spec = ToolRunSpec {
            tool: name.to_string(),
            arguments,
            output_schema: tool.output_schema.clone(),
            job_template: tool.spec.job_template.clone(),
            ttl_seconds_after_finished: tool.spec.ttl_seconds_after_finished,
            cancel: false,
        };
        let mut run = ToolRun::new(id.as_str(), spec);
        run.metadata.namespace = Some(self.namespace.clone());
        run.metadata.labels = Some(
            [
                (labels::CALLER.to_string(), self.keys.caller_label(&caller.digest)),
                (labels::MANAGED_BY.to_string(), MANAGER.to_string()),
            ]
            .into(),
        );
        let kept = annotations.iter().map(|(key, value)| (key.to_string(), value.clone()));
        run.metadata.annotations = Some(kept.collect());
        // Last: the proof binds the annotations it covers (the progress token).
        let proof = self.keys.proof(&run);
        run.annotations_mut().insert(annotations::OWNER_PROOF.to_string(), proof);
        run
    }

    /// The run behind `id_text` as this caller may see it.
    pub async fn find_run(&self, caller: &Caller, id_text: &str) -> Result<RunView, String> {
        let Some(id) = WorkflowId::parse_for(&self.keys, caller, id_text) else {
            return Ok(RunView::Missing);
        };
        match self.runs.get(id.as_str()) {
            Entry::Found(run) if self.owns(&*run, caller) => Ok(RunView::Found(run)),
            Entry::Found(_) | Entry::Unreadable { .. } => Ok(RunView::Missing),
            Entry::Missing => match self.api_call("get", self.run_api.get_opt(id.as_str())).await {
                Ok(Some(run)) if self.owns(&run, caller) => Ok(RunView::Found(Box::new(run))),
                Ok(_) => Ok(RunView::Missing),
                Err(err) => {
                    self.count_api_error("get");
                    Err(format!("cannot read the tool run: {err}"))
                }
            },
        }
    }

    /// Waits until `deadline` for the caller's `latest` run to finish (or
    /// until the listener's client has gone); the run as last seen,
    /// `Missing` once deleted. Each new status line or part count of a
    /// running run goes to `listener` as progress (parts done of all).
    pub async fn wait_run(
        &self,
        caller: &Caller,
        mut latest: Box<ToolRun>,
        deadline: Instant,
        listener: &mut impl WaitListener,
    ) -> RunView {
        let name = latest.metadata.name.clone().unwrap_or_default();
        let Ok(_slot) = self.waits.take(&caller.digest) else { return RunView::Found(latest) };
        let mut subscription = self.runs.subscribe(&name);
        let mut seen_in_cache = false;
        let mut reported = None;
        loop {
            match self.runs.get(&name) {
                Entry::Found(run) => {
                    seen_in_cache = true;
                    latest = run;
                }
                Entry::Missing if seen_in_cache => return RunView::Missing,
                Entry::Missing | Entry::Unreadable { .. } => {}
            }
            if latest.is_finished() || Instant::now() >= deadline {
                return RunView::Found(latest);
            }
            if let Some((progress, message)) = running_progress(&latest)
                && reported.as_ref() != Some(&message)
            {
                if !listener.progress(progress, &message).await {
                    return RunView::Found(latest);
                }
                reported = Some(message);
            }
            tokio::select! {
                () = subscription.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = listener.gone() => return RunView::Found(latest),
            }
        }
    }

    /// Asks the operator to stop the caller's run `id_text`, and waits up
    /// to `confirm` for it to say so.
    pub async fn cancel_run(
        &self,
        caller: &Caller,
        id_text: &str,
        confirm: Duration,
    ) -> Result<RunView, String> {
        let run = match self.find_run(caller, id_text).await? {
            RunView::Found(run) => run,
            RunView::Missing => return Ok(RunView::Missing),
        };
        if run.is_finished() {
            return Ok(RunView::Found(run));
        }
        let name = run.metadata.name.clone().unwrap_or_default();
        if !run.spec.cancel {
            // `cancel` is no part of the proof: setting it keeps the run the caller's.
            let patch = serde_json::json!({"spec": {"cancel": true}});
            let params = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
            if let Err(err) =
                self.api_call("patch", self.run_api.patch(&name, &params, &Patch::Merge(&patch))).await
            {
                self.count_api_error("patch");
                return Err(format!("could not cancel: {err}"));
            }
            tracing::info!(run = %name, caller = %caller.name, "tool run cancel requested");
        }
        Ok(self.wait_run(caller, run, Instant::now() + confirm, &mut Unattended).await)
    }

    /// The caller's own runs, newest first (optionally of one tool).
    pub fn list_runs(&self, caller: &Caller, tool: Option<&str>) -> Vec<Box<ToolRun>> {
        let mut runs: Vec<Box<ToolRun>> = self
            .keys
            .caller_labels(&caller.digest)
            .iter()
            .flat_map(|label| self.runs.list_for(label))
            .filter_map(|entry| match entry {
                Entry::Found(run) if self.owns(&*run, caller) => Some(run),
                _ => None,
            })
            .filter(|run| tool.is_none_or(|tool| run.spec.tool == tool))
            .collect();
        let created =
            |run: &ToolRun| run.metadata.creation_timestamp.as_ref().map_or(Timestamp::MIN, |t| t.0);
        runs.sort_by(|a, b| created(b).cmp(&created(a)).then_with(|| a.metadata.name.cmp(&b.metadata.name)));
        runs
    }
}

/// A running run's progress (parts done of all) and the message a client
/// reads with it; `None` before it runs.
fn running_progress(run: &ToolRun) -> Option<(Progress, String)> {
    if run.phase() != mining_api::ToolRunPhase::Running {
        return None;
    }
    let parts = u32::try_from(run.parts()).unwrap_or(1);
    let done = run
        .status
        .as_ref()
        .and_then(|s| s.progress.as_deref())
        .and_then(|p| p.split_once('/'))
        .and_then(|(done, _)| done.parse().ok())
        .unwrap_or(0);
    let message = contract::run_outcome(run, Timestamp::now()).status_message;
    Some((Progress { blocks_done: done, blocks_total: parts }, message))
}
