//! The four tools: argument types, their checks, and the tool definitions a
//! client lists. Schemas are generated from these types; only the bounds that
//! come from configuration are filled in at start-up.

use std::sync::Arc;

use rmcp::handler::server::common::{schema_for_input, schema_for_output};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::contract::{MiningOutcome, OutcomeStatus, Progress};
use crate::ids::{MAX_IDEMPOTENCY_KEY_LEN, check_idempotency_key};
use mining_api::MiningWorkflowSpec;
use mining_api::bounds::{BLOCKS, Bound, DEFAULT_PARALLELISM, DIFFICULTY, PARALLELISM};

/// The tools, each named once: dispatch, listings and messages read these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MiningTool {
    StartMining,
    GetMiningResult,
    CancelMining,
    ListMiningWorkflows,
}

impl MiningTool {
    /// Every tool, in the order clients list them.
    pub const ALL: [Self; 4] =
        [Self::StartMining, Self::GetMiningResult, Self::CancelMining, Self::ListMiningWorkflows];

    pub const fn name(self) -> &'static str {
        match self {
            Self::StartMining => "start_mining",
            Self::GetMiningResult => "get_mining_result",
            Self::CancelMining => "cancel_mining",
            Self::ListMiningWorkflows => "list_mining_workflows",
        }
    }

    /// The tool called `name`, if this server has one.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// Every tool's name, for messages: `a, b, c and d`.
    pub fn names_in_words() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|tool| tool.name()).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }
}

pub const START_MINING: &str = MiningTool::StartMining.name();
pub const GET_MINING_RESULT: &str = MiningTool::GetMiningResult.name();
pub const CANCEL_MINING: &str = MiningTool::CancelMining.name();
pub const LIST_MINING_WORKFLOWS: &str = MiningTool::ListMiningWorkflows.name();

/// Workflows one list answer holds.
/// Rows one list call gives at most, for every kind of work.
pub const LIST_LIMIT: Bound = Bound::new("limit", 1, 200);
const DEFAULT_LIST_LIMIT: u32 = 20;

/// The bounds tool arguments are checked against (from the flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_difficulty: u32,
    pub default_difficulty: u32,
    pub default_blocks: u32,
    pub wait_budget_seconds: u32,
}

/// Arguments of `start_mining`.
#[derive(Deserialize, JsonSchema, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StartMiningArgs {
    /// Leading zero bits every block's SHA-256 must have. Each extra bit doubles the work.
    pub difficulty: Option<u32>,
    /// Number of blocks in the chain.
    pub blocks: Option<u32>,
    /// Pods that mine each block at once, each scanning its own range of
    /// nonces. The answer is the same; a hard block finishes sooner when the
    /// cluster has the cores. Default 1.
    pub parallelism: Option<u32>,
    /// Seconds to wait for the result before answering `running` (0 answers at once).
    pub wait_seconds: Option<u32>,
    /// Any string unique to this request. Retrying with the same key returns
    /// the workflow the first call started instead of starting a second one.
    pub idempotency_key: Option<String>,
}

/// Arguments of `get_mining_result`.
#[derive(Deserialize, JsonSchema, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GetMiningResultArgs {
    /// The `workflow_id` that `start_mining` returned.
    pub workflow_id: String,
    /// Seconds to wait for the workflow to finish before answering (default 0).
    pub wait_seconds: Option<u32>,
}

/// Arguments of `cancel_mining`.
#[derive(Deserialize, JsonSchema, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CancelMiningArgs {
    /// The `workflow_id` that `start_mining` returned.
    pub workflow_id: String,
}

/// Arguments of `list_mining_workflows`.
#[derive(Deserialize, JsonSchema, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ListMiningWorkflowsArgs {
    /// Only workflows in this state.
    pub status: Option<ListedStatus>,
    /// Most workflows to return, newest first.
    pub limit: Option<u32>,
}

/// The states a listed workflow can be in.
#[derive(Deserialize, Serialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ListedStatus {
    Completed,
    Running,
    Failed,
    Cancelled,
}

impl ListedStatus {
    pub fn matches(self, status: OutcomeStatus) -> bool {
        matches!(
            (self, status),
            (Self::Completed, OutcomeStatus::Completed)
                | (Self::Running, OutcomeStatus::Running)
                | (Self::Failed, OutcomeStatus::Failed)
                | (Self::Cancelled, OutcomeStatus::Cancelled)
        )
    }
}

/// One row of `list_mining_workflows`.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct ListedWorkflow {
    pub workflow_id: String,
    pub status: OutcomeStatus,
    pub progress: Progress,
    pub difficulty: u32,
    /// When the workflow was started (RFC 3339).
    pub created: String,
    pub status_message: String,
}

/// The answer of `list_mining_workflows`.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct WorkflowList {
    /// Your workflows, newest first.
    pub workflows: Vec<ListedWorkflow>,
    /// How many of your workflows matched, before `limit` cut the list.
    pub total: u32,
}

/// What `start_mining` will do, once its arguments are checked: the work as
/// the API type states it, and how the call goes about it.
#[derive(Debug, Clone, PartialEq)]
pub struct StartRequest {
    pub spec: MiningWorkflowSpec,
    pub wait_seconds: u32,
    pub idempotency_key: Option<String>,
}

impl Limits {
    /// The difficulties a caller may ask for: the API's, capped by the flag.
    pub fn difficulty(&self) -> Bound {
        DIFFICULTY.capped_at(self.max_difficulty)
    }

    /// The waits a call may be given, up to the budget.
    pub fn wait(&self) -> Bound {
        Bound::new("wait_seconds", 0, self.wait_budget_seconds)
    }

    /// Checks `start_mining`'s arguments; the error names what is allowed.
    pub fn start_request(&self, args: StartMiningArgs) -> Result<StartRequest, String> {
        let difficulty = self.difficulty().check(args.difficulty.unwrap_or(self.default_difficulty))?;
        let blocks = BLOCKS.check(args.blocks.unwrap_or(self.default_blocks))?;
        let parallelism = PARALLELISM.check(args.parallelism.unwrap_or(DEFAULT_PARALLELISM))?;
        let wait_seconds = self.wait_seconds(args.wait_seconds, self.wait_budget_seconds)?;
        if let Some(key) = &args.idempotency_key {
            check_idempotency_key(key)?;
        }
        // Every field named: a new one is a compile error here until the tool decides on it.
        let spec = MiningWorkflowSpec {
            difficulty,
            blocks,
            parallelism,
            ttl_seconds_after_finished: None,
            active_deadline_seconds: None,
            cancel: false,
        };
        Ok(StartRequest { spec, wait_seconds, idempotency_key: args.idempotency_key })
    }

    /// A wait within the budget; `default` when none was asked for.
    pub fn wait_seconds(&self, asked: Option<u32>, default: u32) -> Result<u32, String> {
        self.wait()
            .check(asked.unwrap_or(default))
            .map_err(|err| format!("{err}; poll with get_mining_result for longer"))
    }

    /// The list limit, within [`LIST_LIMIT`] (default 20).
    pub fn list_limit(&self, asked: Option<u32>) -> Result<u32, String> {
        LIST_LIMIT.check(asked.unwrap_or(DEFAULT_LIST_LIMIT))
    }

    /// What each tool accepts, in words, for error messages.
    pub fn allowed(&self, tool: &str) -> String {
        match tool {
            START_MINING => format!(
                "start_mining takes difficulty ({}), blocks ({}), parallelism ({}), wait_seconds ({}) and \
                 idempotency_key (string of 1-{MAX_IDEMPOTENCY_KEY_LEN} characters), all optional",
                self.difficulty().describe(Some(self.default_difficulty)),
                BLOCKS.describe(Some(self.default_blocks)),
                PARALLELISM.describe(Some(DEFAULT_PARALLELISM)),
                self.wait().describe(Some(self.wait_budget_seconds)),
            ),
            GET_MINING_RESULT => format!(
                "get_mining_result takes workflow_id (string, required) and wait_seconds ({})",
                self.wait().describe(Some(0))
            ),
            CANCEL_MINING => "cancel_mining takes workflow_id (string, required)".into(),
            _ => format!(
                "list_mining_workflows takes status (one of completed, running, failed, cancelled) and limit \
                 ({}), both optional",
                LIST_LIMIT.describe(Some(DEFAULT_LIST_LIMIT))
            ),
        }
    }

    /// The tools as clients list them, with the configured bounds in their schemas.
    pub fn tools(&self) -> Vec<Tool> {
        let budget = self.wait_budget_seconds;
        let start = with_bounds(
            input_schema::<StartMiningArgs>(),
            &[
                (self.difficulty(), Some(self.default_difficulty)),
                (BLOCKS, Some(self.default_blocks)),
                (PARALLELISM, Some(DEFAULT_PARALLELISM)),
                (self.wait(), Some(budget)),
            ],
        );
        let get = with_bounds(input_schema::<GetMiningResultArgs>(), &[(self.wait(), Some(0))]);
        let list =
            with_bounds(input_schema::<ListMiningWorkflowsArgs>(), &[(LIST_LIMIT, Some(DEFAULT_LIST_LIMIT))]);
        vec![
            Tool::new(
                START_MINING,
                format!(
                    "Start mining a proof-of-work chain and wait up to wait_seconds (at most {budget}) for it. \
                     Small difficulties finish within the wait and return status \"completed\" with the chain. \
                     Otherwise you get status \"running\" and a workflow_id: the work continues on the cluster, \
                     and you call get_mining_result with that workflow_id after poll_after_seconds. \
                     Pass an idempotency_key to make a retry after a lost connection safe."
                ),
                start,
            )
            .with_title("Start mining")
            .with_raw_output_schema(output_schema::<MiningOutcome>())
            .with_annotations(ToolAnnotations::new().read_only(false).destructive(false).open_world(false)),
            Tool::new(
                GET_MINING_RESULT,
                "Get the state or result of a mining workflow by its workflow_id. status \"completed\" carries \
                 the chain; \"running\" means call again after poll_after_seconds; \"failed\" and \"cancelled\" \
                 are final; \"not_found\" means the id is unknown to you (use list_mining_workflows).",
                get,
            )
            .with_title("Get mining result")
            .with_raw_output_schema(output_schema::<MiningOutcome>())
            .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
            Tool::new(
                CANCEL_MINING,
                "Cancel a mining workflow by its workflow_id. Answers \"cancelled\" once mining has stopped, \
                 \"running\" while the cancel is on its way; a finished workflow is left as it is.",
                with_bounds(input_schema::<CancelMiningArgs>(), &[]),
            )
            .with_title("Cancel mining")
            .with_raw_output_schema(output_schema::<MiningOutcome>())
            .with_annotations(
                ToolAnnotations::new().read_only(false).destructive(true).idempotent(true).open_world(false),
            ),
            Tool::new(
                LIST_MINING_WORKFLOWS,
                "List your mining workflows, newest first, with their workflow_id, status and progress. \
                 Use it to find a workflow_id you lost.",
                list,
            )
            .with_title("List mining workflows")
            .with_raw_output_schema(output_schema::<WorkflowList>())
            .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
        ]
    }
}

/// Parses a tool's arguments; the error says what was wrong and what is allowed.
pub fn parse_args<T: DeserializeOwned>(
    limits: &Limits,
    tool: &str,
    arguments: Option<JsonObject>,
) -> Result<T, String> {
    serde_json::from_value(Value::Object(arguments.unwrap_or_default()))
        .map_err(|err| format!("invalid arguments: {err}. {}", limits.allowed(tool)))
}

pub(crate) fn input_schema<T: JsonSchema + 'static>() -> JsonObject {
    // Generated from our own types, which are objects: a failure is a bug caught by the unit tests.
    let mut schema =
        Value::Object(schema_for_input::<T>().map(|schema| schema.as_ref().clone()).unwrap_or_default());
    strip_integer_formats(&mut schema);
    match schema {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}

/// Removes schemars' `uint32`/`uint64` formats: they are not JSON Schema
/// formats, and validators in clients warn about each (the bounds stay).
fn strip_integer_formats(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            if object
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| f.starts_with("uint") || f.starts_with("int"))
            {
                object.remove("format");
            }
            object.values_mut().for_each(strip_integer_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_integer_formats),
        _ => {}
    }
}

/// Sets `minimum`, `maximum` and `default` of the integer property each bound names.
fn with_bounds(mut schema: JsonObject, bounds: &[(Bound, Option<u32>)]) -> Arc<JsonObject> {
    for (bound, default) in bounds {
        if let Some(Value::Object(property)) =
            schema.get_mut("properties").and_then(|p| p.get_mut(bound.name))
        {
            // Option<u32> generates `type: [integer, null]`; a bounded integer is clearer to a model.
            property.insert("type".into(), json!("integer"));
            property.insert("minimum".into(), json!(bound.min));
            property.insert("maximum".into(), json!(bound.max));
            property.remove("format");
            if let Some(default) = default {
                property.insert("default".into(), json!(default));
            }
        }
    }
    Arc::new(schema)
}

/// The output schema of a tool, without non-standard integer formats.
pub fn output_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let mut schema = Value::Object(schema_for_output::<T>().as_ref().clone());
    strip_integer_formats(&mut schema);
    match schema {
        Value::Object(object) => Arc::new(object),
        _ => Arc::new(JsonObject::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits { max_difficulty: 32, default_difficulty: 21, default_blocks: 4, wait_budget_seconds: 20 }
    }

    fn args(value: Value) -> Option<JsonObject> {
        value.as_object().cloned()
    }

    /// The API's list is what the catalog (and `kubectl mining validate`)
    /// keeps McpTools from taking: it must be exactly the frontend's own.
    #[test]
    fn the_reserved_names_are_the_frontends_own_tools() {
        let mut own: Vec<String> = limits().tools().iter().map(|tool| tool.name.to_string()).collect();
        own.extend(crate::tool_runs::contract::COMPANIONS.map(str::to_string));
        own.sort();
        let mut reserved = mining_api::tool_schema::RESERVED_TOOL_NAMES.map(str::to_string).to_vec();
        reserved.sort();
        assert_eq!(own, reserved);
    }

    #[test]
    fn start_defaults_fill_what_was_not_given() {
        let request = limits().start_request(StartMiningArgs::default()).unwrap();
        assert_eq!(
            request,
            StartRequest {
                spec: MiningWorkflowSpec { blocks: 4, ..MiningWorkflowSpec::new(21) },
                wait_seconds: 20,
                idempotency_key: None
            }
        );
    }

    #[test]
    fn out_of_range_start_arguments_name_the_allowed_range() {
        let cases = [
            (json!({"difficulty": 0}), "difficulty must be an integer from 1 to 32"),
            (json!({"difficulty": 33}), "from 1 to 32 (got 33)"),
            (json!({"blocks": 65}), "blocks must be an integer from 1 to 64"),
            (json!({"parallelism": 0}), "parallelism must be an integer from 1 to 64 (got 0)"),
            (json!({"parallelism": 65}), "parallelism must be an integer from 1 to 64"),
            (json!({"wait_seconds": 21}), "wait_seconds must be an integer from 0 to 20"),
            (json!({"idempotency_key": ""}), "idempotency_key must be 1 to 128"),
        ];
        for (value, expected) in cases {
            let parsed: StartMiningArgs = parse_args(&limits(), START_MINING, args(value.clone())).unwrap();
            let err = limits().start_request(parsed).unwrap_err();
            assert!(err.contains(expected), "{value}: {err}");
        }
    }

    #[test]
    fn wrong_types_unknown_fields_and_huge_numbers_are_tool_errors_that_say_what_is_allowed() {
        for value in [
            json!({"difficulty": "hard"}),
            json!({"difficulty": 3.5}),
            json!({"difficulty": -1}),
            json!({"difficulty": 1e300}),
            serde_json::from_str(r#"{"blocks": 18446744073709551616}"#).unwrap(),
            json!({"difficulty_bits": 4}),
            json!({"idempotency_key": 7}),
        ] {
            let err =
                parse_args::<StartMiningArgs>(&limits(), START_MINING, args(value.clone())).unwrap_err();
            assert!(err.starts_with("invalid arguments: "), "{value}: {err}");
            assert!(err.contains("difficulty (integer 1-32, default 21)"), "{value}: {err}");
        }
        let err = parse_args::<GetMiningResultArgs>(&limits(), GET_MINING_RESULT, None).unwrap_err();
        assert!(
            err.contains("missing field `workflow_id`") && err.contains("workflow_id (string, required)"),
            "{err}"
        );
    }

    #[test]
    fn list_limit_is_bounded() {
        assert_eq!(limits().list_limit(None), Ok(20));
        assert!(limits().list_limit(Some(0)).unwrap_err().contains("from 1 to 200"));
        assert!(limits().list_limit(Some(201)).is_err());
        let parsed: ListMiningWorkflowsArgs =
            parse_args(&limits(), LIST_MINING_WORKFLOWS, args(json!({"status": "running"}))).unwrap();
        assert_eq!(parsed.status, Some(ListedStatus::Running));
        assert!(
            parse_args::<ListMiningWorkflowsArgs>(
                &limits(),
                LIST_MINING_WORKFLOWS,
                args(json!({"status": "done"}))
            )
            .is_err()
        );
    }

    #[test]
    fn tool_schemas_carry_the_configured_bounds() {
        let tools = limits().tools();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, MiningTool::ALL.map(MiningTool::name));
        assert_eq!(
            MiningTool::names_in_words(),
            "start_mining, get_mining_result, cancel_mining and list_mining_workflows"
        );
        assert_eq!(MiningTool::named("cancel_mining"), Some(MiningTool::CancelMining));
        assert_eq!(MiningTool::named("rm"), None);
        let start = Value::Object(tools[0].input_schema.as_ref().clone());
        assert_eq!(start["type"], "object");
        assert_eq!(start["properties"]["difficulty"]["maximum"], 32);
        assert_eq!(start["properties"]["difficulty"]["minimum"], 1);
        assert_eq!(start["properties"]["wait_seconds"]["maximum"], 20);
        assert_eq!(start["additionalProperties"], false);
        let get = Value::Object(tools[1].input_schema.as_ref().clone());
        assert_eq!(get["required"], json!(["workflow_id"]));
        assert!(!serde_json::to_string(&tools).unwrap().contains("uint"), "non-standard formats are gone");
        for tool in &tools {
            assert!(tool.output_schema.is_some(), "{}", tool.name);
            assert!(tool.description.as_ref().unwrap().len() > 40);
        }
    }

    #[test]
    fn outcome_schema_requires_status_id_and_message() {
        let schema = Value::Object(output_schema::<MiningOutcome>().as_ref().clone());
        let mut required: Vec<_> =
            schema["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        required.sort();
        assert_eq!(required, ["status", "status_message", "workflow_id"]);
    }
}
