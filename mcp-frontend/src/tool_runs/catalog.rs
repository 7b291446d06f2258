//! The tools defined as `McpTool`s in the namespace the frontend serves,
//! from one watch on every replica: they appear and disappear as their
//! objects do. Each definition is checked and its input schema compiled
//! once, when it arrives; one that is unbounded or broken is not offered,
//! so no definition can fail the others. Either way its status says so
//! (condition `Accepted`, with the cause when False), so its author reads it
//! with `kubectl get mcptools` instead of in a frontend's log.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::server_features::ServerFeatures;
use mining_api::tool_schema::{Offerable, Schema, offerable};
use mining_api::{McpTool, McpToolSpec};
use rmcp::model::{Tool, ToolAnnotations};
use serde_json::Value;

use super::contract::outcome_schema;
use crate::metrics::Metrics;

/// Most tools offered; definitions beyond it (by name) are not.
pub const MAX_TOOLS: usize = 256;

/// One tool as offered: its listing, its compiled input schema, and the
/// definition a call snapshots into its run.
pub struct DefinedTool {
    /// The McpTool's object name: what a run records, RBAC grants name and
    /// `kubectl` shows (the listing carries the MCP name).
    pub object: String,
    pub listed: Tool,
    pub input: Schema,
    pub spec: McpToolSpec,
    /// `outputSchema` as JSON text, as the run keeps it.
    pub output_schema: Option<String>,
}

/// The offered tools by MCP name, and the MCP name of each by object name.
#[derive(Default, Clone)]
struct Tools {
    by_name: BTreeMap<String, Arc<DefinedTool>>,
    by_object: BTreeMap<String, String>,
}

/// Each McpTool's verdict, by object name: what its `Accepted` condition
/// says when offered (with what this API server cannot give it), else why not.
type Verdicts = BTreeMap<String, Result<String, String>>;

pub struct ToolCatalog {
    live: RwLock<Arc<Tools>>,
    ready: AtomicBool,
    /// Bumped whenever the listing may have changed after it first synced:
    /// listens that asked for `toolsListChanged` are told.
    changes: tokio::sync::watch::Sender<u64>,
}

impl ToolCatalog {
    /// The catalog and the future that keeps it filled (run it on a task).
    pub fn new(
        api: Api<McpTool>,
        server: ServerFeatures,
        metrics: Arc<Metrics>,
    ) -> (Arc<Self>, impl Future<Output = ()> + Send + 'static) {
        let catalog = Arc::new(Self {
            live: RwLock::new(Arc::default()),
            ready: AtomicBool::new(false),
            changes: tokio::sync::watch::Sender::new(0),
        });
        let runner = catalog.clone();
        let statuses = StatusWriter::new(api.clone());
        let run = async move {
            let events = watcher(api, watcher::Config::default().page_size(50)).default_backoff();
            let mut events = std::pin::pin!(events);
            // Every definition by object name: a name two tools claim goes
            // to the older, so one's deletion can offer another.
            let mut objects = BTreeMap::<String, McpTool>::new();
            let mut initial: Option<BTreeMap<String, McpTool>> = None;
            let mut verdicts = Verdicts::new();
            while let Some(event) = events.next().await {
                metrics.watch_events.inc();
                let touched = match event {
                    Ok(watcher::Event::Init) => {
                        initial = Some(BTreeMap::new());
                        continue;
                    }
                    Ok(watcher::Event::InitApply(tool)) => {
                        if let Some(initial) = initial.as_mut() {
                            initial.insert(tool.metadata.name.clone().unwrap_or_default(), tool);
                        }
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(initial) = initial.take() {
                            objects = initial;
                        }
                        None
                    }
                    Ok(watcher::Event::Apply(tool)) => {
                        let name = tool.metadata.name.clone().unwrap_or_default();
                        objects.insert(name.clone(), tool);
                        Some(name)
                    }
                    Ok(watcher::Event::Delete(tool)) => {
                        objects.remove(tool.metadata.name.as_deref().unwrap_or_default());
                        None
                    }
                    Err(err) => {
                        metrics.watch_errors.inc();
                        tracing::warn!(error = %err, "watching McpTools failed; retrying");
                        continue;
                    }
                };
                let (tools, next) = build(&objects, &server);
                let before = listings_of(&runner.read());
                let after = listings_of(&tools);
                *runner.write() = Arc::new(tools);
                // A status write (this frontend's own) changes no listing:
                // nothing to tell. The first listing tells nobody.
                if runner.is_ready() && before != after {
                    runner.changed();
                }
                runner.ready.store(true, Ordering::Release);
                // Tell each definition whose verdict moved, and the one
                // that changed (its status may say an older verdict).
                for (name, verdict) in &next {
                    if (verdicts.get(name) != Some(verdict) || touched.as_deref() == Some(name))
                        && let Some(tool) = objects.get(name)
                    {
                        statuses.tell(tool, verdict.clone());
                    }
                }
                verdicts = next;
            }
        };
        (catalog, run)
    }

    fn read(&self) -> Arc<Tools> {
        self.live.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Arc<Tools>> {
        self.live.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The tool listed as `name`, if one is offered.
    pub fn get(&self, name: &str) -> Option<Arc<DefinedTool>> {
        self.read().by_name.get(name).cloned()
    }

    /// The tool the McpTool `object` offers, if it offers one.
    pub fn by_object(&self, object: &str) -> Option<Arc<DefinedTool>> {
        let tools = self.read();
        tools.by_object.get(object).and_then(|name| tools.by_name.get(name)).cloned()
    }

    /// Every offered tool's listing, by name.
    pub fn listed(&self) -> Vec<Tool> {
        self.read().by_name.values().map(|tool| tool.listed.clone()).collect()
    }

    /// Every tool offered, by name.
    pub fn defined(&self) -> Vec<Arc<DefinedTool>> {
        self.read().by_name.values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.read().by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.changes.send_modify(|generation| *generation = generation.wrapping_add(1));
    }

    /// Resolves at each change of the listing from now on.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// The tools `objects` offer and each one's verdict (pure): definitions in
/// age order (then by object name), so a name two claim goes to the older
/// and the first [`MAX_TOOLS`] are offered, on every replica alike.
fn build(objects: &BTreeMap<String, McpTool>, server: &ServerFeatures) -> (Tools, Verdicts) {
    let mut ordered: Vec<&McpTool> = objects.values().collect();
    ordered.sort_by(|a, b| {
        let age = |tool: &McpTool| tool.metadata.creation_timestamp.as_ref().map(|t| t.0);
        age(a).cmp(&age(b)).then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let mut tools = Tools::default();
    let mut verdicts = Verdicts::new();
    for tool in ordered {
        let object = tool.metadata.name.clone().unwrap_or_default();
        let name = tool.mcp_name().to_string();
        let verdict = if tools.by_name.len() >= MAX_TOOLS {
            Err(format!("too many tools are defined (this frontend offers at most {MAX_TOOLS})"))
        } else if let Some(taken) = tools.by_name.get(&name) {
            Err(format!("the tool name {name} is taken by the older McpTool {}", taken.object))
        } else {
            define(&object, &tool.spec).map(|defined| {
                let offered = format!("offered as the MCP tool {name}");
                tools.by_object.insert(object.clone(), name.clone());
                tools.by_name.insert(name, Arc::new(defined));
                match server.parts_caveat(tool.spec.parts()) {
                    Some(caveat) => format!("{offered}; {caveat}"),
                    None => offered,
                }
            })
        };
        if let Err(why) = &verdict {
            tracing::warn!(tool = %object, %why, "not offering an McpTool");
        }
        verdicts.insert(object, verdict);
    }
    (tools, verdicts)
}

/// What `tools/list` shows, to tell a change of it from a write that
/// changed nothing listed.
fn listings_of(tools: &Tools) -> Vec<Option<Value>> {
    tools.by_name.values().map(|defined| listing_of(defined)).collect()
}

/// What `tools/list` shows of a tool, to tell a change of it from a write
/// that changed nothing listed.
fn listing_of(defined: &DefinedTool) -> Option<Value> {
    serde_json::to_value(&defined.listed).ok()
}

/// Writes each definition's verdict into its status when it differs from
/// what the status says (a few writes at once; a failed one is logged and
/// written again with the object's next change or the next start).
struct StatusWriter {
    api: Api<McpTool>,
    writes: Arc<tokio::sync::Semaphore>,
}

/// Status writes in flight at once, per replica.
const STATUS_WRITES: usize = 4;

impl StatusWriter {
    fn new(api: Api<McpTool>) -> Self {
        Self { api, writes: Arc::new(tokio::sync::Semaphore::new(STATUS_WRITES)) }
    }

    fn tell(&self, tool: &McpTool, verdict: Result<String, String>) {
        let Some(condition) = accepted_condition(tool, &verdict, k8s_openapi::jiff::Timestamp::now()) else {
            return;
        };
        let name = tool.metadata.name.clone().unwrap_or_default();
        let (api, writes) = (self.api.clone(), self.writes.clone());
        tokio::spawn(async move {
            let Ok(_permit) = writes.acquire().await else { return };
            let body = serde_json::json!({
                "apiVersion": <McpTool as kube::Resource>::api_version(&()),
                "kind": <McpTool as kube::Resource>::kind(&()),
                "status": {"conditions": [condition]},
            });
            let params = kube::api::PatchParams::apply(crate::kube_calls::MANAGER).force();
            let patch = kube::api::Patch::Apply(body);
            let write = api.patch_status(&name, &params, &patch);
            match tokio::time::timeout(crate::kube_calls::API_TIMEOUT, write).await {
                Ok(Ok(_)) => tracing::debug!(tool = %name, "wrote the McpTool's Accepted condition"),
                Ok(Err(err)) => {
                    tracing::warn!(tool = %name, error = %err, "writing an McpTool's status failed")
                }
                Err(_) => tracing::warn!(tool = %name, "writing an McpTool's status timed out"),
            }
        });
    }
}

/// The `Accepted` condition `verdict` calls for, when the status does not
/// say it already (pure): the time moves only when the status flips, so a
/// restart or another replica rewrites nothing.
pub fn accepted_condition(
    tool: &McpTool,
    verdict: &Result<String, String>,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<mining_api::Condition> {
    use mining_api::tool::tool_conditions::{ACCEPTED, REASON_ACCEPTED, REASON_INVALID};
    use mining_api::{Condition, ConditionStatus};
    let (status, reason, message) = match verdict {
        Ok(said) => (ConditionStatus::True, REASON_ACCEPTED, mining_api::pow::clip(said, 1024).to_string()),
        Err(why) => (ConditionStatus::False, REASON_INVALID, mining_api::pow::clip(why, 1024).to_string()),
    };
    let generation = tool.metadata.generation;
    let current = tool.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == ACCEPTED));
    if let Some(current) = current
        && current.status == status
        && current.reason == reason
        && current.message == message
        && current.observed_generation == generation
    {
        return None;
    }
    let last_transition_time = match current {
        Some(current) if current.status == status => current.last_transition_time.clone(),
        _ => k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
    };
    Some(Condition {
        type_: ACCEPTED.into(),
        status,
        reason: reason.into(),
        message,
        last_transition_time,
        observed_generation: generation,
    })
}

/// The tool a definition offers, or why it offers none (pure; the verdict
/// is the API's, the one `kubectl mining validate` gives too).
pub fn define(object: &str, spec: &McpToolSpec) -> Result<DefinedTool, String> {
    let name = spec.tool_name.as_deref().unwrap_or(object);
    let Offerable { input, output_schema: output } = offerable(name, spec)?;
    let mut listed =
        Tool::new(name.to_string(), spec.description.clone(), Arc::new(spec.input_schema.clone()))
            .with_raw_output_schema(Arc::new(outcome_schema(output.as_ref())))
            .with_annotations(annotations_of(spec.hints.as_ref()));
    if let Some(title) = &spec.title {
        listed = listed.with_title(title.clone());
    }
    Ok(DefinedTool {
        object: object.to_string(),
        listed,
        input,
        spec: spec.clone(),
        output_schema: output.map(|schema| Value::Object(schema).to_string()),
    })
}

/// The MCP annotations of a tool whose definition gives `hints`: what it
/// says, and open-world unless it says otherwise (a container may call
/// anything).
fn annotations_of(hints: Option<&mining_api::tool_hints::ToolHints>) -> ToolAnnotations {
    let hints = hints.cloned().unwrap_or_default();
    let mut annotations = ToolAnnotations::new().open_world(hints.open_world.unwrap_or(true));
    if let Some(read_only) = hints.read_only {
        annotations = annotations.read_only(read_only);
    }
    if let Some(destructive) = hints.destructive {
        annotations = annotations.destructive(destructive);
    }
    if let Some(idempotent) = hints.idempotent {
        annotations = annotations.idempotent(idempotent);
    }
    annotations
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use mining_api::ConditionStatus;

    use super::*;

    fn tool() -> McpTool {
        let mut tool = McpTool::new(
            "sum",
            serde_json::from_value(serde_json::json!({
                "description": "Adds.", "inputSchema": {"type": "object"},
                "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "i"}]}}}},
            }))
            .unwrap(),
        );
        tool.metadata.generation = Some(3);
        tool
    }

    #[test]
    fn the_status_says_whether_a_tool_is_offered_and_is_written_only_when_that_changes() {
        let at = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
        let mut tool = tool();
        let accepted = accepted_condition(&tool, &Ok("offered".into()), at(0)).expect("no status yet");
        assert_eq!((accepted.status, accepted.observed_generation), (ConditionStatus::True, Some(3)));
        tool.status = Some(mining_api::tool::McpToolStatus { conditions: vec![accepted.clone()] });
        assert_eq!(
            accepted_condition(&tool, &Ok("offered".into()), at(5)),
            None,
            "the same verdict writes nothing"
        );
        let refused = accepted_condition(&tool, &Err("inputSchema is larger".into()), at(9)).unwrap();
        assert_eq!((refused.status, refused.reason.as_str()), (ConditionStatus::False, "Invalid"));
        assert_eq!(refused.message, "inputSchema is larger");
        assert_eq!(refused.last_transition_time.0, at(9), "a flip moves the time");
        tool.metadata.generation = Some(4);
        let again =
            accepted_condition(&tool, &Ok("offered".into()), at(12)).expect("a new generation is told again");
        assert_eq!(again.last_transition_time.0, at(0), "no flip keeps the time");
    }

    #[test]
    fn a_tool_is_listed_by_its_tool_name_and_a_claimed_name_goes_to_the_older() {
        let named = |object: &str, tool_name: Option<&str>, created: &str| {
            let mut tool = tool();
            tool.metadata.name = Some(object.into());
            tool.metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(created.parse().unwrap()));
            tool.spec.tool_name = tool_name.map(str::to_string);
            (object.to_string(), tool)
        };
        let objects: BTreeMap<String, McpTool> = [
            named("weather", Some("get_weather"), "2026-11-01T00:00:00Z"),
            named("weather-v2", Some("get_weather"), "2026-11-02T00:00:00Z"),
            named("sum", None, "2026-11-03T00:00:00Z"),
        ]
        .into();
        let (tools, verdicts) = build(&objects, &ServerFeatures::current());
        assert_eq!(tools.by_name.keys().collect::<Vec<_>>(), ["get_weather", "sum"]);
        assert_eq!(tools.by_name["get_weather"].object, "weather", "the older holds the name");
        assert_eq!(tools.by_name["get_weather"].listed.name, "get_weather");
        assert_eq!(
            verdicts["weather-v2"],
            Err("the tool name get_weather is taken by the older McpTool weather".into())
        );
        // The holder gone, the other is offered: the verdicts move with it.
        let mut objects = objects;
        objects.remove("weather");
        let (tools, verdicts) = build(&objects, &ServerFeatures::current());
        assert_eq!(tools.by_name["get_weather"].object, "weather-v2");
        assert_eq!(verdicts["weather-v2"], Ok("offered as the MCP tool get_weather".into()));
        assert_eq!(tools.by_object.get("weather-v2").map(String::as_str), Some("get_weather"));
    }

    #[test]
    fn a_tool_of_parts_on_a_server_without_indexed_jobs_is_offered_and_told_what_it_lacks() {
        let mut parted = tool();
        parted.spec.job_template.spec.as_mut().unwrap().completions = Some(3);
        let objects: BTreeMap<String, McpTool> = [("sum".to_string(), parted)].into();
        let old = ServerFeatures::from_version("1", "20", "v1.20.15");
        let (tools, verdicts) = build(&objects, &old);
        assert!(tools.by_name.contains_key("sum"), "its parts still run");
        let said = verdicts["sum"].as_ref().unwrap();
        assert!(said.starts_with("offered as the MCP tool sum; this API server (v1.20.15)"), "{said}");
        let (_, verdicts) = build(&objects, &ServerFeatures::from_version("1", "24", "v1.24.0"));
        assert_eq!(verdicts["sum"], Ok("offered as the MCP tool sum".into()));
    }

    #[test]
    fn a_tools_hints_reach_its_listing_and_it_is_open_world_unless_it_says_otherwise() {
        let silent = annotations_of(None);
        assert_eq!((silent.open_world_hint, silent.destructive_hint), (Some(true), None));
        let hints: mining_api::tool_hints::ToolHints = serde_json::from_value(
            serde_json::json!({"readOnly": false, "destructive": true, "openWorld": false}),
        )
        .unwrap();
        let told = annotations_of(Some(&hints));
        assert_eq!(told.read_only_hint, Some(false));
        assert_eq!(told.destructive_hint, Some(true));
        assert_eq!(told.open_world_hint, Some(false));
        assert_eq!(told.idempotent_hint, None);
        // On the wire: only what is said.
        assert_eq!(
            serde_json::to_value(&told).unwrap(),
            serde_json::json!({"readOnlyHint": false, "destructiveHint": true, "openWorldHint": false})
        );
        assert_eq!(serde_json::to_value(&silent).unwrap(), serde_json::json!({"openWorldHint": true}));
    }
}
