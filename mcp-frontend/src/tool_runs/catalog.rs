//! The tools defined as `McpTool`s in the namespace the frontend serves,
//! from one watch on every replica: they appear and disappear as their
//! objects do. Each definition is checked and its input schema compiled
//! once, when it arrives; one that is unbounded or broken is not offered
//! (and the log says why), so no definition can fail the others.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use mining_api::tool_schema::Schema;
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
    pub listed: Tool,
    pub input: Schema,
    pub spec: McpToolSpec,
    /// `outputSchema` as JSON text, as the run keeps it.
    pub output_schema: Option<String>,
}

type Tools = BTreeMap<String, Arc<DefinedTool>>;

pub struct ToolCatalog {
    live: RwLock<Arc<Tools>>,
    ready: AtomicBool,
    /// Names no McpTool may take (the frontend's own tools).
    reserved: Vec<String>,
}

impl ToolCatalog {
    /// The catalog and the future that keeps it filled (run it on a task).
    pub fn new(
        api: Api<McpTool>,
        reserved: Vec<String>,
        metrics: Arc<Metrics>,
    ) -> (Arc<Self>, impl Future<Output = ()> + Send + 'static) {
        let catalog =
            Arc::new(Self { live: RwLock::new(Arc::default()), ready: AtomicBool::new(false), reserved });
        let runner = catalog.clone();
        let run = async move {
            let events = watcher(api, watcher::Config::default().page_size(50)).default_backoff();
            let mut events = std::pin::pin!(events);
            let mut listing: Option<Tools> = None;
            while let Some(event) = events.next().await {
                metrics.watch_events.inc();
                match event {
                    Ok(watcher::Event::Init) => listing = Some(Tools::new()),
                    Ok(watcher::Event::InitApply(tool)) => {
                        if let Some(listing) = listing.as_mut() {
                            runner.add(listing, &tool);
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(listing) = listing.take() {
                            *runner.write() = Arc::new(listing);
                        }
                        runner.ready.store(true, Ordering::Release);
                    }
                    Ok(watcher::Event::Apply(tool)) => {
                        let mut next = (*runner.read()).clone();
                        next.remove(tool.metadata.name.as_deref().unwrap_or_default());
                        runner.add(&mut next, &tool);
                        *runner.write() = Arc::new(next);
                    }
                    Ok(watcher::Event::Delete(tool)) => {
                        let mut next = (*runner.read()).clone();
                        next.remove(tool.metadata.name.as_deref().unwrap_or_default());
                        *runner.write() = Arc::new(next);
                    }
                    Err(err) => {
                        metrics.watch_errors.inc();
                        tracing::warn!(error = %err, "watching McpTools failed; retrying");
                    }
                }
            }
        };
        (catalog, run)
    }

    /// A catalog of exactly `tools` (for tests and benchmarks).
    pub fn of(tools: &[McpTool], reserved: Vec<String>) -> Self {
        let catalog = Self { live: RwLock::new(Arc::default()), ready: AtomicBool::new(true), reserved };
        let mut listing = Tools::new();
        for tool in tools {
            catalog.add(&mut listing, tool);
        }
        *catalog.write() = Arc::new(listing);
        catalog
    }

    fn read(&self) -> Arc<Tools> {
        self.live.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Arc<Tools>> {
        self.live.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn add(&self, listing: &mut Tools, tool: &McpTool) {
        let name = tool.metadata.name.clone().unwrap_or_default();
        if listing.len() >= MAX_TOOLS {
            tracing::warn!(tool = %name, max = MAX_TOOLS, "not offering an McpTool: too many tools are defined");
            return;
        }
        match define(&name, &tool.spec, &self.reserved) {
            Ok(defined) => {
                listing.insert(name, Arc::new(defined));
            }
            Err(why) => tracing::warn!(tool = %name, %why, "not offering an McpTool"),
        }
    }

    /// The tool named `name`, if one is offered.
    pub fn get(&self, name: &str) -> Option<Arc<DefinedTool>> {
        self.read().get(name).cloned()
    }

    /// Every offered tool's listing, by name.
    pub fn listed(&self) -> Vec<Tool> {
        self.read().values().map(|tool| tool.listed.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// The tool a definition offers, or why it offers none (pure).
pub fn define(name: &str, spec: &McpToolSpec, reserved: &[String]) -> Result<DefinedTool, String> {
    if reserved.iter().any(|own| own == name) {
        return Err(format!("{name} is the name of one of the frontend's own tools"));
    }
    if let Some(problem) = spec.problem() {
        return Err(problem);
    }
    let input = Schema::compile(&Value::Object(spec.input_schema.clone()))
        .map_err(|why| format!("inputSchema is not a usable JSON Schema: {why}"))?;
    let output = match &spec.output_schema {
        Some(schema) => {
            Schema::compile(&Value::Object(schema.clone()))
                .map_err(|why| format!("outputSchema is not a usable JSON Schema: {why}"))?;
            Some(schema.clone())
        }
        None => None,
    };
    let mut listed =
        Tool::new(name.to_string(), spec.description.clone(), Arc::new(spec.input_schema.clone()))
            .with_raw_output_schema(Arc::new(outcome_schema(output.as_ref())))
            .with_annotations(ToolAnnotations::new().open_world(true));
    if let Some(title) = &spec.title {
        listed = listed.with_title(title.clone());
    }
    Ok(DefinedTool {
        listed,
        input,
        spec: spec.clone(),
        output_schema: output.map(|schema| Value::Object(schema).to_string()),
    })
}
