//! Asking on a plain call, protocol 2026-07-28 (SEP-2322, "MRTR"), and what
//! a defined tool refuses before anything is made.
//!
//! A defined tool's run that asks answers the waiting call with `resultType:
//! "input_required"`: the requests the client can answer (by the
//! capabilities it declared) and a `requestState` naming the run and its
//! round, bound by a MAC under the ownership key to the caller, the tool and
//! the call's arguments, and expiring with the run's input deadline. The
//! client's retry carries `inputResponses` and the state: any replica, after
//! any restart, opens the state, records the answers through the same core
//! as `tasks/update`, and waits the tool's budget again — for the result, the
//! next round's `input_required`, or the usual "still running" answer. The
//! run is the only store; the state is a handle, never trusted for more than
//! the MAC says.

use std::collections::BTreeSet;
use std::time::Duration;

use mining_api::tool_face::{ClientCapability, TaskSupport};
use mining_api::{ToolRun, ToolRunPhase};
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ErrorCode, InputRequiredResult, JsonObject,
};
use serde_json::{Map, Value, json};
use sha2::Digest as _;
use tokio::time::Instant;

use crate::core::{Answer, Any, Core, RespondError, Responded, StartOptions, View, WaitListener};
use crate::ids::Caller;
use crate::tool_runs::catalog::DefinedTool;

/// Why a call of `tool` is refused before anything is made, if it is
/// (pure): a client capability the tool needs and the client did not
/// declare (only when it declared any: a 2025 plain call carries none), or
/// a task the tool requires and the call did not ask for.
pub fn refusal(
    tool: &DefinedTool,
    capabilities: Option<&ClientCapabilities>,
    modern: bool,
    as_task: bool,
) -> Option<McpError> {
    if let Some(capabilities) = capabilities {
        let declared = |needed: ClientCapability| match needed {
            ClientCapability::Elicitation => capabilities.elicitation.is_some(),
            ClientCapability::Sampling => capabilities.sampling.is_some(),
            ClientCapability::Roots => capabilities.roots.is_some(),
        };
        let missing: Map<String, Value> = tool
            .spec
            .required_client_capabilities
            .iter()
            .filter(|needed| !declared(**needed))
            .map(|needed| (needed.as_str().to_string(), json!({})))
            .collect();
        if !missing.is_empty() {
            let needed = serde_json::from_value(Value::Object(missing)).unwrap_or_default();
            return Some(McpError::missing_required_client_capability(needed));
        }
    }
    if tool.spec.task_support == Some(TaskSupport::Required) && !as_task {
        let name = tool.listed.name.as_ref();
        return Some(if modern {
            McpError::missing_required_client_capability(ClientCapabilities::builder().enable_tasks().build())
        } else {
            McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "tool {name} runs only as a task (its taskSupport is \"required\"); call it with params.task"
                ),
                None,
            )
        });
    }
    None
}

/// A 2026-07-28 call of a defined tool that may ask on the call itself:
/// what both ways of answering it share.
pub struct AskingCall<'a> {
    pub core: &'a Core,
    pub caller: &'a Caller,
    pub tool: &'a DefinedTool,
    /// What the client declared it can answer.
    pub capabilities: Option<&'a ClientCapabilities>,
}

impl AskingCall<'_> {
    /// `request` answered as a plain call, or (`as_task`) as a task made
    /// after the run's first question; also the metric outcome.
    pub async fn answer(
        &self,
        request: CallToolRequestParams,
        options: StartOptions<'_>,
        listener: &mut impl WaitListener,
        as_task: bool,
    ) -> Result<(CallToolResponse, &'static str), McpError> {
        let started = Instant::now();
        let digest = arguments_digest(request.arguments.as_ref());
        let binding = [self.caller.digest.as_str(), self.tool.object.as_str(), digest.as_str()];
        if as_task {
            return self.before_task(request, options, listener, started, binding).await;
        }
        let response = self.plain(request, options, listener, started, binding).await?;
        let outcome = if matches!(response, CallToolResponse::InputRequired(_)) {
            "input_required"
        } else {
            "answered"
        };
        Ok((response, outcome))
    }

    /// The run a call names: made by a first call, or the one its
    /// `requestState` opens to; a tool error when neither can be had.
    async fn run_of(
        &self,
        request_state: Option<&str>,
        arguments: Option<JsonObject>,
        options: StartOptions<'_>,
        binding: [&str; 3],
    ) -> Result<Result<Box<ToolRun>, Answer>, McpError> {
        let (core, tool) = (self.core, self.tool);
        match request_state {
            None => Ok(core.start_run(self.caller, &tool.object, tool, arguments, options).await),
            Some(state) => resume(core, self.caller, state, binding).await,
        }
    }

    /// A plain call: started, or resumed from its `requestState` with the
    /// client's answers; waited for within the tool's budget; answered
    /// `input_required` when its run asks what the client can answer.
    async fn plain(
        &self,
        request: CallToolRequestParams,
        options: StartOptions<'_>,
        listener: &mut impl WaitListener,
        started: Instant,
        binding: [&str; 3],
    ) -> Result<CallToolResponse, McpError> {
        let (core, caller) = (self.core, self.caller);
        let answered = |answer: Answer| Ok(answer.into_result().into());
        // Answers on a first call (no state) are for what its run will ask:
        // taken once it asks, the keys it does not ask ignored.
        let mut carried: Map<String, Value> =
            request.input_responses.unwrap_or_default().into_iter().collect();
        let mut run =
            match self.run_of(request.request_state.as_deref(), request.arguments, options, binding).await? {
                Ok(run) => run,
                Err(answer) => return answered(answer),
            };
        let id = run.metadata.name.clone().unwrap_or_default();
        let deadline = started + Duration::from_secs(u64::from(tool_budget(core, self.tool)));
        loop {
            if !carried.is_empty() && run.phase() == ToolRunPhase::InputRequired {
                run = match record(core, caller, &id, &std::mem::take(&mut carried)).await? {
                    Ok(run) => run,
                    Err(answer) => return answered(answer),
                };
            }
            let mut asking = Asking { inner: &mut *listener, answered: answered_keys(core, &run) };
            match core.wait(caller, run, deadline, &mut asking).await {
                View::Found(asked) if !carried.is_empty() && asked.phase() == ToolRunPhase::InputRequired => {
                    run = asked
                }
                View::Found(run)
                    if let Some(result) = input_required(core, &run, binding, self.capabilities) =>
                {
                    return Ok(CallToolResponse::InputRequired(result));
                }
                view => return answered(Answer::of(&id, view, core.operator_presence())),
            }
        }
    }

    /// A call as a task, composed with asking (SEP-2663): a first call
    /// waits the tool's `askBeforeTaskSeconds` and, when its run asks what
    /// the client can answer, answers `input_required` with no task yet;
    /// the retry records the answers and is answered with the run's task,
    /// as is a first call whose run did not ask in time. Later questions
    /// are asked through the task (`tasks/get`, `tasks/update`).
    async fn before_task(
        &self,
        request: CallToolRequestParams,
        options: StartOptions<'_>,
        listener: &mut impl WaitListener,
        started: Instant,
        binding: [&str; 3],
    ) -> Result<(CallToolResponse, &'static str), McpError> {
        let core = self.core;
        let answered = |answer: Answer| Ok(super::tasks_2026::started_task(core, Err(answer)));
        let task = |run: Box<ToolRun>| Ok(super::tasks_2026::started_task(core, Ok(Any::Run(run))));
        let state = request.request_state.as_deref();
        let run = match self.run_of(state, request.arguments, options, binding).await? {
            Ok(run) => run,
            Err(answer) => return answered(answer),
        };
        let id = run.metadata.name.clone().unwrap_or_default();
        if state.is_none() {
            let window = started + Duration::from_secs(ask_before_task_seconds(core, self.tool).into());
            let mut asking = Asking { inner: &mut *listener, answered: answered_keys(core, &run) };
            return match core.wait(self.caller, run, window, &mut asking).await {
                View::Found(run) => match input_required(core, &run, binding, self.capabilities) {
                    Some(result) => Ok((CallToolResponse::InputRequired(result), "input_required")),
                    None => task(run),
                },
                view => answered(Answer::of(&id, view, core.operator_presence())),
            };
        }
        let responses: Map<String, Value> = request.input_responses.unwrap_or_default().into_iter().collect();
        if responses.is_empty() || run.phase() != ToolRunPhase::InputRequired {
            return task(run);
        }
        match record(core, self.caller, &id, &responses).await? {
            Ok(run) => task(run),
            Err(answer) => answered(answer),
        }
    }
}

/// How long a call of `tool` waits: its budget within the frontend's.
pub fn tool_budget(core: &Core, tool: &DefinedTool) -> u32 {
    let limit = core.limits.wait_budget_seconds;
    tool.spec.wait_budget_seconds.unwrap_or(limit).min(limit)
}

/// How long a call of `tool` made as a task waits for its first questions:
/// the tool's `askBeforeTaskSeconds` within the frontend's budget.
pub fn ask_before_task_seconds(core: &Core, tool: &DefinedTool) -> u32 {
    tool.spec.ask_before_task_seconds.unwrap_or(0).min(core.limits.wait_budget_seconds)
}

/// The run a retry's `state` names; a JSON-RPC error for a state that does
/// not open (tampered, expired, another caller's or call's), a tool error
/// when the run cannot be read.
async fn resume(
    core: &Core,
    caller: &Caller,
    state: &str,
    binding: [&str; 3],
) -> Result<Result<Box<ToolRun>, Answer>, McpError> {
    let now = k8s_openapi::jiff::Timestamp::now().as_second().max(0) as u64;
    let (name, uid) = core.keys.open_request_state(state, binding, now).map_err(refused_state)?;
    match core.find::<ToolRun>(caller, &name).await {
        Ok(View::Found(run)) if run.metadata.uid.as_deref() == Some(uid.as_str()) => Ok(Ok(run)),
        Ok(View::NotGranted(why)) => Ok(Err(Answer::NotGranted(why))),
        Ok(_) => Err(refused_state("its run is gone (expired, deleted or made again)")),
        Err(problem) => Ok(Err(Answer::Refused(problem))),
    }
}

fn refused_state(why: &str) -> McpError {
    McpError::invalid_params(
        format!("requestState cannot be used: {why}; call the tool again without it"),
        None,
    )
}

/// Records `responses` to the run `name` through the core `tasks/update`
/// uses; a JSON-RPC error for answers that do not fit what was asked.
async fn record(
    core: &Core,
    caller: &Caller,
    name: &str,
    responses: &Map<String, Value>,
) -> Result<Result<Box<ToolRun>, Answer>, McpError> {
    match core.respond(caller, name, responses).await {
        Ok(Responded::Recorded { run, .. } | Responded::NotWaiting(run)) => Ok(Ok(run)),
        Err(RespondError::Invalid(why)) => Err(McpError::invalid_params(why, None)),
        Err(RespondError::NotFound) => Err(refused_state("its run is gone")),
        Err(RespondError::Unavailable(why)) => Ok(Err(Answer::Refused(why))),
        Err(RespondError::NotGranted(why)) => Ok(Err(Answer::NotGranted(why))),
    }
}

/// The `input_required` answer for `run` when it asks something the client
/// declared it can answer (pure but for the key); `None` otherwise, and the
/// call answers as a tool call (whose `next` names `respond_tool_run`).
fn input_required(
    core: &Core,
    run: &ToolRun,
    binding: [&str; 3],
    capabilities: Option<&ClientCapabilities>,
) -> Option<InputRequiredResult> {
    if run.phase() != ToolRunPhase::InputRequired {
        return None;
    }
    let answered = answered_keys(core, run);
    let asked = run.status.as_ref()?.input_requests.clone()?;
    let outstanding: Map<String, Value> = asked
        .into_iter()
        .filter(|(key, request)| {
            !answered.contains(key) && capabilities.is_none_or(|caps| can_answer(caps, request))
        })
        .collect();
    if outstanding.is_empty() {
        return None;
    }
    let meta = &run.metadata;
    let name = meta.name.as_deref().unwrap_or_default();
    let round = run.step().to_string();
    let expires = k8s_openapi::jiff::Timestamp::now().as_second().max(0) as u64
        + run.input_deadline_seconds().max(1) as u64;
    let state =
        core.keys.request_state(binding, [name, meta.uid.as_deref().unwrap_or_default(), &round], expires);
    let result = json!({"resultType": "input_required", "inputRequests": outstanding, "requestState": state});
    serde_json::from_value(result)
        .inspect_err(
            |err| tracing::warn!(run = %name, error = %err, "a run's requests are not MCP input requests"),
        )
        .ok()
}

/// Whether a client that declared `caps` can answer `request`: URL-mode
/// elicitation needs `elicitation.url`; form mode `elicitation.form`, or
/// an empty `elicitation` (which means form, as 2025-06-18 declared it).
fn can_answer(caps: &ClientCapabilities, request: &Value) -> bool {
    match request.get("method").and_then(Value::as_str).unwrap_or_default() {
        mining_api::tool_input::ELICITATION => caps.elicitation.as_ref().is_some_and(|elicitation| {
            if mining_api::tool_input::is_url_elicitation(request) {
                elicitation.url.is_some()
            } else {
                elicitation.form.is_some() || elicitation.url.is_none()
            }
        }),
        mining_api::tool_input::SAMPLING => caps.sampling.is_some(),
        mining_api::tool_input::ROOTS => caps.roots.is_some(),
        _ => false,
    }
}

/// The keys of `run`'s requests its caller answered so far (with the
/// frontend's proof: an answer planted in the run hides no question).
fn answered_keys(core: &Core, run: &ToolRun) -> BTreeSet<String> {
    mining_api::tool_input::proven_answers(run, &core.keys).into_keys().collect()
}

/// The digest a `requestState` binds the call's arguments by: SHA-256 of
/// their JSON with keys sorted, so a retry's key order does not matter.
pub fn arguments_digest(arguments: Option<&Map<String, Value>>) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|key| (key.clone(), sorted(&map[key]))).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let text = sorted(&Value::Object(arguments.cloned().unwrap_or_default())).to_string();
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A plain call's wait: while every request of the run's round is answered
/// (the operator has yet to start the next step) it goes on; a request left
/// to answer ends it.
struct Asking<'a, L> {
    inner: &'a mut L,
    answered: BTreeSet<String>,
}

impl<L: WaitListener> WaitListener for Asking<'_, L> {
    fn progress(&mut self, progress: f64, total: u32, message: &str) -> impl Future<Output = bool> + Send {
        self.inner.progress(progress, total, message)
    }

    fn gone(&self) -> impl Future<Output = ()> + Send {
        self.inner.gone()
    }

    async fn asks(&mut self, requests: &Map<String, Value>) -> bool {
        requests.keys().all(|key| self.answered.contains(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_digest_ignores_key_order_and_nothing_else() {
        let a: Map<String, Value> = serde_json::from_str(r#"{"b": 1, "a": {"y": 2, "x": [1, 2]}}"#).unwrap();
        let b: Map<String, Value> = serde_json::from_str(r#"{"a": {"x": [1, 2], "y": 2}, "b": 1}"#).unwrap();
        let c: Map<String, Value> = serde_json::from_str(r#"{"a": {"x": [2, 1], "y": 2}, "b": 1}"#).unwrap();
        assert_eq!(arguments_digest(Some(&a)), arguments_digest(Some(&b)));
        assert_ne!(arguments_digest(Some(&a)), arguments_digest(Some(&c)));
        assert_eq!(
            arguments_digest(None),
            arguments_digest(Some(&Map::new())),
            "no arguments are an empty object"
        );
    }

    fn tool(spec: Value) -> DefinedTool {
        let mut spec = spec;
        spec["description"] = json!("d");
        spec["inputSchema"] = json!({"type": "object"});
        spec["jobTemplate"] =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "i"}]}}}});
        crate::tool_runs::catalog::define("t", &serde_json::from_value(spec).unwrap()).unwrap()
    }

    #[test]
    fn a_client_is_asked_only_the_elicitation_modes_it_declared() {
        let form = json!({"method": "elicitation/create", "params": {"message": "m", "requestedSchema": {}}});
        let url = json!({"method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": "https://a"}});
        let declared = |caps: Value| serde_json::from_value::<ClientCapabilities>(caps).unwrap();
        let legacy = declared(json!({"elicitation": {}}));
        assert!(can_answer(&legacy, &form) && !can_answer(&legacy, &url), "{{}} is form only");
        let url_only = declared(json!({"elicitation": {"url": {}}}));
        assert!(!can_answer(&url_only, &form) && can_answer(&url_only, &url));
        let both = declared(json!({"elicitation": {"form": {}, "url": {}}}));
        assert!(can_answer(&both, &form) && can_answer(&both, &url));
        assert!(!can_answer(&declared(json!({"sampling": {}})), &form), "no elicitation at all");
    }

    #[test]
    fn a_call_missing_a_needed_capability_or_a_required_task_is_refused_before_anything_is_made() {
        let sampling = tool(json!({"requiredClientCapabilities": ["sampling"]}));
        let none = ClientCapabilities::default();
        let refused = refusal(&sampling, Some(&none), true, false).expect("sampling is needed");
        assert_eq!(refused.code.0, -32021);
        assert_eq!(refused.data.unwrap()["requiredCapabilities"], json!({"sampling": {}}));
        let declared: ClientCapabilities = serde_json::from_value(json!({"sampling": {}})).unwrap();
        assert!(refusal(&sampling, Some(&declared), true, false).is_none());
        assert!(refusal(&sampling, None, false, false).is_none(), "unknown capabilities are not refused");
        let required = tool(json!({"taskSupport": "required"}));
        let modern = refusal(&required, Some(&none), true, false).unwrap();
        assert_eq!(modern.code.0, -32021);
        assert!(
            modern.data.unwrap()["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"]
                .is_object()
        );
        assert_eq!(refusal(&required, None, false, false).unwrap().code.0, -32601, "2025-11-25 says -32601");
        assert!(refusal(&required, Some(&none), true, true).is_none(), "as a task it runs");
        assert!(refusal(&tool(json!({"taskSupport": "forbidden"})), Some(&none), true, false).is_none());
    }
}
