//! Starting a tool run: the call's arguments checked against its tool, the
//! tool's limit per caller and the caller's quotas held in the caller's
//! ledger, the run made (or found by its idempotency key) with the same
//! ownership proof and caller label as a workflow. Everything after the
//! start is the core's, as for any kind of work.

use kube::ResourceExt as _;
use mining_api::Work as _;
use mining_api::tool::MAX_ARGUMENTS_BYTES;
use mining_api::tool_caller::ToolCaller;
use mining_api::{ToolRun, ToolRunSpec, annotations, labels};
use rmcp::model::JsonObject;
use serde_json::Value;
use tracing::Instrument as _;

use super::{Answer, Core, StartOptions};
use crate::ids::{Caller, WorkId, check_idempotency_key};
use crate::kube_calls::{Created, MANAGER};
use crate::metrics::ReasonLabels;
use crate::quota;
use crate::tool_runs::access::Denied;
use crate::tool_runs::catalog::DefinedTool;
use crate::tool_runs::contract;

/// What a run keeps from its call besides the arguments: annotations (a
/// trace, a task's progress token) and a task's requested retention.
type Kept<'a> = (&'a [(&'a str, String)], Option<i64>);

impl Core {
    /// Every tool as `tools/list` answers `caller`: the mining tools, then
    /// the defined tools it may call and, while any is, their companions.
    /// A restricted tool is checked one at a time (reviews are bounded, and
    /// each verdict is remembered), so a caller without it never sees it.
    pub async fn listed_tools(&self, caller: &Caller) -> Vec<rmcp::model::Tool> {
        let mut tools = self.tools.clone();
        let mut defined = Vec::new();
        for tool in self.catalog.defined() {
            if self.access.check(caller, &tool.object, tool.spec.restricted).await.is_ok() {
                defined.push(tool.listed.clone());
            }
        }
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
        let retention = options.retention_seconds;
        self.start_run_traced(
            caller,
            name,
            tool,
            arguments,
            options.idempotency_key,
            (&annotations, retention),
        )
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
        kept: Kept<'_>,
    ) -> Result<Box<ToolRun>, Answer> {
        self.access.check(caller, name, tool.spec.restricted).await.map_err(|denied| match denied {
            Denied::NotGranted(why) => Answer::NotGranted(why),
            Denied::CannotCheck(why) => Answer::Refused(why),
        })?;
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
            let id = WorkId::random(&self.keys, caller)
                .map_err(|err| Answer::Refused(format!("no random source for a run id: {err}")))?;
            return match self.create_run(caller, id, name, tool, &text, kept).await? {
                Created::New(run) => Ok(run),
                // Only an 80-bit collision gets here; never hand over another run.
                Created::Existing(_) => Err(Answer::Refused("the new run's id is taken; try again".into())),
            };
        };
        check_idempotency_key(key).map_err(Answer::InvalidArguments)?;
        let text = &text;
        let create = move |id| async move { self.create_run(caller, id, name, tool, text, kept).await };
        let (id, run) = self.start_idempotent::<ToolRun, _>(caller, key, create).await?;
        // What the caller asked for: the tool and its arguments (the tool's
        // definition may have changed since; a retry still finds its run).
        let stored = serde_json::json!({"tool": run.spec.tool, "arguments": run.spec.arguments});
        let asked = serde_json::json!({"tool": name, "arguments": text});
        let differing = mining_api::differing_fields(&stored, &asked);
        if !differing.is_empty() {
            return Err(Answer::InvalidArguments(format!(
                "idempotency key {key:?} already made run {id} with other arguments: {}; use a new key to \
                 call {name} with these",
                differing.join(", ")
            )));
        }
        Ok(run)
    }

    /// Makes the run `id` within the tool's limit per caller and the
    /// caller's quotas, both decided in the caller's ledger.
    async fn create_run(
        &self,
        caller: &Caller,
        id: WorkId,
        name: &str,
        tool: &DefinedTool,
        text: &str,
        kept: Kept<'_>,
    ) -> Result<Created<ToolRun>, Answer> {
        if let Some(limit) = tool.spec.max_running_per_caller {
            let unfinished = self
                .keys
                .caller_labels(&caller.digest)
                .iter()
                .map(|label| {
                    self.homes::<ToolRun>().current.cache.count_for(label, |run| {
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
        let limit = tool.spec.max_running_per_caller.map(|limit| quota::ToolLimit { tool: name, limit });
        self.reserve_place(caller, &id, limit).await?;
        let run = self.build_run(caller, &id, name, tool, text.to_string(), kept).map_err(Answer::Refused)?;
        match self
            .api_call("create", crate::kube_calls::create(self.homes::<ToolRun>().current.api, &run))
            .await
        {
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
    /// arguments as validated, the caller's label (and, for a tool that
    /// asked, who called), `annotations` (a trace, a task's progress
    /// token), and the proof of it all. `Err` when who called exceeds what
    /// a run may record.
    fn build_run(
        &self,
        caller: &Caller,
        id: &WorkId,
        name: &str,
        tool: &DefinedTool,
        arguments: String,
        (annotations, retention_seconds): Kept<'_>,
    ) -> Result<ToolRun, String> {
        let who_called = match &tool.spec.caller_identity {
            Some(wanted) => Some(ToolCaller::of(&caller.name, &caller.identity.claims, wanted)?),
            None => None,
        };
        let spec = ToolRunSpec {
            tool: name.to_string(),
            arguments,
            output_schema: tool.output_schema.clone(),
            job_template: tool.spec.job_template.clone(),
            // A task's requested ttl, else the tool's own retention.
            ttl_seconds_after_finished: retention_seconds.or(tool.spec.ttl_seconds_after_finished),
            cancel: false,
            input_deadline_seconds: tool.spec.input_deadline_seconds,
            input_responses: Default::default(),
            caller: who_called,
            preemptible: tool.spec.preemptible,
            pod_start_timeout_seconds: tool.spec.pod_start_timeout_seconds,
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
        Ok(run)
    }
}
