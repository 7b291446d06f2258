use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::bounds::{
    BLOCKS, DEFAULT_BLOCKS, DEFAULT_PARALLELISM, DIFFICULTY, MAX_DURATION_SECONDS, MAX_RESULTS_LOST,
    MAX_STORED_INTEGER, PARALLELISM,
};

/// The chain to mine.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mining-operator.dev",
    version = "v1alpha1",
    kind = "MiningWorkflow",
    doc = "A proof-of-work chain to mine, one Kubernetes Job per block. The resource name is the workflow's id.",
    plural = "miningworkflows",
    shortname = "mwf",
    namespaced,
    status = "MiningWorkflowStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress"}"#,
    printcolumn = r#"{"name":"Difficulty","type":"integer","jsonPath":".status.admittedDifficulty"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.message","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MiningWorkflowSpec {
    /// Leading zero bits each block's SHA-256 must have. Immutable.
    #[schemars(
        range(min = DIFFICULTY.min, max = DIFFICULTY.max),
        extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "difficulty is immutable"}])
    )]
    pub difficulty: u32,

    /// Number of blocks in the chain. Immutable.
    #[serde(default = "default_blocks")]
    #[schemars(
        range(min = BLOCKS.min, max = BLOCKS.max),
        extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "blocks is immutable"}])
    )]
    pub blocks: u32,

    /// Delete the workflow this many seconds after it finished (the operator's
    /// default applies when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_DURATION_SECONDS))]
    pub ttl_seconds_after_finished: Option<i64>,

    /// Fail the workflow with reason DeadlineExceeded when it has run this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_DURATION_SECONDS))]
    pub active_deadline_seconds: Option<i64>,

    /// Set to true to stop mining; the workflow ends Cancelled.
    #[serde(default)]
    pub cancel: bool,

    /// Pods that mine one block at once, each scanning its own range of the
    /// block's nonces. The answer is the same as with 1 (one Pod scanning in
    /// order): the smallest winning nonce. May be changed while mining; the
    /// operator caps it at its own limit.
    #[serde(default = "default_parallelism")]
    #[schemars(range(min = PARALLELISM.min, max = PARALLELISM.max))]
    pub parallelism: u32,
}

fn default_blocks() -> u32 {
    DEFAULT_BLOCKS
}

fn default_parallelism() -> u32 {
    DEFAULT_PARALLELISM
}

/// Where a workflow is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, Default)]
#[cfg_attr(feature = "metrics", derive(prometheus_client::encoding::EncodeLabelValue))]
pub enum WorkflowPhase {
    /// Accepted, not mining yet (possibly queued behind a concurrency limit).
    #[default]
    Pending,
    Mining,
    Succeeded,
    Failed,
    Cancelled,
}

impl WorkflowPhase {
    /// Every phase, in lifecycle order.
    pub const ALL: [WorkflowPhase; 5] =
        [Self::Pending, Self::Mining, Self::Succeeded, Self::Failed, Self::Cancelled];

    /// Succeeded, Failed and Cancelled never change again.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Mining => "Mining",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Cancelled => "Cancelled",
        }
    }
}

impl std::fmt::Display for WorkflowPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// Reading a status never fails: one the Rust types cannot hold (written
// before the schema bounded it, or by hand) becomes a default status with
// `unreadable` set, so a single object cannot fail the list every controller
// and cache starts from.
/// What the operator has observed and done.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct MiningWorkflowStatus {
    /// Why the stored status could not be read (never stored itself).
    #[serde(skip)]
    #[schemars(skip)]
    pub unreadable: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<WorkflowPhase>,
    /// Mined blocks over total, e.g. "2/4".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Verified blocks, in chain order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = BLOCKS.max))]
    pub blocks: Vec<MinedBlock>,
    /// The block being mined now (1-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = BLOCKS.min, max = BLOCKS.max))]
    pub current_block: Option<u32>,
    /// A human-readable summary of the latest state change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it last took a slot (its first start, or its resume after it
    /// gave its slot back): work that was already waiting then never takes
    /// this slot back mid-block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// For a block mined across Pods: it has no winning nonce below this
    /// (its ranges that finished without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0, "maximum" = MAX_STORED_INTEGER))]
    pub no_winner_below: Option<u64>,
    /// The difficulty mining started with. `spec.difficulty` is immutable; on
    /// API servers too old to enforce that, later changes are ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = DIFFICULTY.min, max = DIFFICULTY.max))]
    pub admitted_difficulty: Option<u32>,
    /// The chain length mining started with (see `admittedDifficulty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = BLOCKS.min, max = BLOCKS.max))]
    pub admitted_blocks: Option<u32>,
    /// How many times a running block was stopped to give the slot to work
    /// that waited (every mined block kept). Each one protects the
    /// workflow's next slot for longer, so a stream of short work cannot
    /// keep taking it back (docs/OPERATOR.md, "Preemption makes progress").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = u32::MAX))]
    pub preemptions: Option<u32>,
    /// Since when the running block's Pods wait for room on the cluster's
    /// nodes (the scheduler's "Insufficient …" / "Too many pods"), none of
    /// them running, once they waited 30 s (shorter waits are a busy
    /// cluster's normal; fair share at the node reads every wait from the
    /// operator's own Pod watch: docs/OPERATOR.md, "Fair share at the
    /// node"). Absent while its Pods run or it holds no slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for_node_since: Option<Time>,
    /// Finished blocks whose result was lost with their Pod and that were
    /// mined again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_RESULTS_LOST))]
    pub results_lost: Option<u32>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0, "maximum" = MAX_STORED_INTEGER))]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl Serialize for MiningWorkflowStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        MiningWorkflowStatus::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for MiningWorkflowStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(MiningWorkflowStatus::deserialize(value).unwrap_or_else(|err| MiningWorkflowStatus {
            unreadable: Some(format!("the stored status cannot be read: {err}")),
            ..Default::default()
        }))
    }
}

/// One verified block of the chain.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MinedBlock {
    /// 1-based position in the chain.
    #[schemars(range(min = BLOCKS.min, max = BLOCKS.max))]
    pub index: u32,
    #[schemars(extend("minimum" = 0, "maximum" = MAX_STORED_INTEGER))]
    pub nonce: u64,
    /// 64 uppercase hex digits.
    pub hash: String,
    #[schemars(extend("minimum" = 1, "maximum" = MAX_STORED_INTEGER))]
    pub attempts: u64,
    /// Whether the operator checked that no smaller nonce meets the
    /// difficulty (it does when the nonce is within its check budget).
    #[serde(default)]
    pub minimality_checked: bool,
    /// The Job that mined this block.
    pub job_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

/// A standard Kubernetes condition (`metav1.Condition` shape).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// A condition type, e.g. Ready.
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    /// A CamelCase word for machines, e.g. BlockMined.
    pub reason: String,
    #[serde(default)]
    pub message: String,
    pub last_transition_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0, "maximum" = MAX_STORED_INTEGER))]
    pub observed_generation: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// Condition types a MiningWorkflow reports.
pub mod condition_types {
    /// True once the whole chain is mined and verified.
    pub const READY: &str = "Ready";
    /// True while a block is being mined.
    pub const MINING: &str = "Mining";
    /// False when the spec was rejected or is waiting behind a limit.
    pub const ADMITTED: &str = "Admitted";
}

/// Reasons used in conditions and Events.
pub mod reasons {
    pub const PENDING: &str = "Pending";
    pub const QUEUED: &str = "Queued";
    /// Between two blocks, the workflow gave its slot to one that waited,
    /// and queued again with its mined blocks kept.
    pub const YIELDED: &str = "Yielded";
    /// Its Pods waited for room on the cluster's nodes past the bound, or
    /// gave way there to work of a party running less: it gave its slot
    /// back and queued again, nothing mined lost (its Pods never ran).
    pub const NO_CAPACITY: &str = "NoCapacity";
    pub const ADMITTED: &str = "Admitted";
    pub const OVER_LIMIT: &str = "OverLimit";
    pub const SPEC_CHANGED: &str = "SpecChanged";
    pub const BLOCK_STARTED: &str = "BlockStarted";
    pub const BLOCK_MINED: &str = "BlockMined";
    pub const SUCCEEDED: &str = "WorkflowSucceeded";
    pub const JOB_FAILED: &str = "JobFailed";
    pub const INVALID_RESULT: &str = "InvalidResult";
    pub const MISSING_RESULT: &str = "MissingResult";
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    pub const CANCELLED: &str = "Cancelled";
    /// Deleted before it finished (a finalizer keeps it stored): its Jobs
    /// are stopped and it holds no slot and no quota place.
    pub const DELETED: &str = "Deleted";
    /// The stored status cannot be read; the workflow is left alone.
    pub const UNREADABLE_STATUS: &str = "UnreadableStatus";
    /// A finished block's result was lost with its Pod; it is mined again.
    pub const RESULT_LOST: &str = "ResultLost";
    /// A block's Job was gone before it finished and was created again.
    pub const JOB_RECREATED: &str = "JobRecreated";
    /// The API server refused to store the status the operator computed.
    pub const STATUS_REJECTED: &str = "StatusRejected";
    /// The operator's ServiceAccount lacks an RBAC rule it needs.
    pub const FORBIDDEN: &str = "Forbidden";
    /// A Job of the block's name or ownership is not one the operator built
    /// (another Pod template, or not controlled by the workflow).
    pub const FOREIGN_JOB: &str = "ForeignJob";
    /// A tool run's Job was created.
    pub const RUN_STARTED: &str = "RunStarted";
    /// A tool run's result was read and stored.
    pub const RUN_SUCCEEDED: &str = "RunSucceeded";
    /// A tool run failed (the message says why).
    pub const RUN_FAILED: &str = "RunFailed";
    /// A tool run's step asked its caller and waits for the answers.
    pub const INPUT_REQUIRED: &str = "InputRequired";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_defaults_blocks_to_four_and_cancel_to_false() {
        let spec: MiningWorkflowSpec = serde_json::from_str(r#"{"difficulty": 12}"#).unwrap();
        assert_eq!(spec.blocks, DEFAULT_BLOCKS);
        assert!(!spec.cancel);
        assert_eq!(spec.ttl_seconds_after_finished, None);
    }

    #[test]
    fn schema_bounds_difficulty_and_blocks_and_makes_them_immutable() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(MiningWorkflow::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        for field in ["difficulty", "blocks"] {
            let prop = &spec["properties"][field];
            assert_eq!(prop["minimum"].as_f64(), Some(1.0), "{field}");
            assert_eq!(prop["maximum"].as_f64(), Some(64.0), "{field}");
            assert_eq!(prop["x-kubernetes-validations"][0]["rule"], "self == oldSelf", "{field}");
        }
        assert_eq!(spec["required"], serde_json::json!(["difficulty"]));
    }

    #[test]
    fn crd_has_status_subresource_short_name_and_printer_columns() {
        use kube::CustomResourceExt;
        let crd = MiningWorkflow::crd();
        assert_eq!(crd.spec.names.short_names, Some(vec!["mwf".to_string()]));
        assert_eq!(crd.spec.scope, "Namespaced");
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.priority.unwrap_or(0)))
            .collect();
        assert_eq!(columns, [("Phase", 0), ("Progress", 0), ("Difficulty", 0), ("Age", 0), ("Message", 1)]);
    }

    /// Every integer the API server would accept must fit its Rust field, so
    /// no stored object can make a list fail (and no time sum overflow).
    #[test]
    fn every_integer_in_the_schema_is_bounded() {
        use kube::CustomResourceExt;
        fn walk(path: &str, schema: &serde_json::Value, unbounded: &mut Vec<String>) {
            if schema["type"] == "integer" && (schema["maximum"].is_null() || schema["minimum"].is_null()) {
                unbounded.push(path.to_string());
            }
            for (name, property) in schema["properties"].as_object().into_iter().flatten() {
                walk(&format!("{path}.{name}"), property, unbounded);
            }
            if schema["items"].is_object() {
                walk(&format!("{path}[]"), &schema["items"], unbounded);
            }
        }
        let crd = serde_json::to_value(MiningWorkflow::crd()).unwrap();
        let mut unbounded = Vec::new();
        walk("", &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], &mut unbounded);
        assert!(unbounded.is_empty(), "integers without both bounds: {unbounded:?}");
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        let nonce = &status["properties"]["blocks"]["items"]["properties"]["nonce"];
        assert_eq!(nonce["maximum"].as_f64(), Some(MAX_STORED_INTEGER as f64));
        assert!(MAX_STORED_INTEGER as f64 as u64 <= i64::MAX as u64, "the bound itself is storable");
        assert_eq!(status["properties"]["blocks"]["maxItems"].as_u64(), Some(u64::from(BLOCKS.max)));
    }

    #[test]
    fn a_status_the_types_cannot_hold_reads_as_unreadable_instead_of_failing() {
        let workflow: MiningWorkflow = serde_json::from_value(serde_json::json!({
            "apiVersion": "mining-operator.dev/v1alpha1", "kind": "MiningWorkflow",
            "metadata": {"name": "w"}, "spec": {"difficulty": 8},
            "status": {"currentBlock": 99_999_999_999u64, "phase": "Mining"},
        }))
        .expect("the object is still read");
        let status = workflow.status.unwrap();
        let why = status.unreadable.unwrap();
        assert!(why.contains("expected u32"), "{why}");
        assert_eq!(status.phase, None);
        // A readable status round-trips, and `unreadable` is never written.
        let good = MiningWorkflowStatus {
            phase: Some(WorkflowPhase::Mining),
            current_block: Some(2),
            ..Default::default()
        };
        let text = serde_json::to_string(&good).unwrap();
        assert!(!text.contains("unreadable"));
        assert_eq!(serde_json::from_str::<MiningWorkflowStatus>(&text).unwrap(), good);
    }

    #[test]
    fn conditions_are_a_list_keyed_by_type() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(MiningWorkflow::crd()).unwrap();
        let conditions = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
            ["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map");
        assert_eq!(conditions["x-kubernetes-list-map-keys"], serde_json::json!(["type"]));
    }

    #[test]
    fn finished_phases_are_exactly_succeeded_failed_cancelled() {
        use WorkflowPhase::*;
        let finished: Vec<_> = WorkflowPhase::ALL.into_iter().filter(|p| p.is_finished()).collect();
        assert_eq!(finished, [Succeeded, Failed, Cancelled]);
    }
}
