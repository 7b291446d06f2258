//! The documents McpTools offer as MCP resources (`spec.resources`, see
//! `mining_api::tool_resources`): listed and read by every caller who may
//! call the tool offering them (a restricted tool's, only by those granted
//! it), from the catalog in memory. Two tools offering one URI: the tool
//! first by name answers.

use mining_api::tool_resources::Content;
use rmcp::model::{Resource, ResourceTemplate};
use serde_json::{Value, json};

use crate::core::Core;
use crate::ids::Caller;

/// The resources and templates the tools `caller` may call offer.
pub async fn listed(core: &Core, caller: &Caller) -> (Vec<Resource>, Vec<ResourceTemplate>) {
    let (mut resources, mut templates) = (Vec::new(), Vec::new());
    for tool in core.catalog.defined() {
        if tool.spec.resources.is_empty()
            || core.access.check(caller, &tool.object, tool.spec.restricted).await.is_err()
        {
            continue;
        }
        for offered in &tool.spec.resources {
            if offered.is_template() {
                let mut template = ResourceTemplate::new(offered.uri.clone(), offered.name.clone());
                template.mime_type = Some(offered.media_type().to_string());
                template.description = offered.description.clone();
                templates.push(template);
            } else {
                let mut resource = Resource::new(offered.uri.clone(), offered.name.clone());
                resource.mime_type = Some(offered.media_type().to_string());
                resource.description = offered.description.clone();
                resources.push(resource);
            }
        }
    }
    (resources, templates)
}

/// `resources/read`'s `contents` for `uri` when a tool `caller` may call
/// offers it; `None` when none does (the caller is not told whether a
/// restricted tool would have).
pub async fn read(core: &Core, caller: &Caller, uri: &str) -> Option<Value> {
    for tool in core.catalog.defined() {
        for offered in &tool.spec.resources {
            let Some(content) = offered.read(uri) else { continue };
            if core.access.check(caller, &tool.object, tool.spec.restricted).await.is_err() {
                continue;
            }
            let mut entry = json!({"uri": uri, "mimeType": offered.media_type()});
            match content {
                Content::Text(text) => entry["text"] = json!(text),
                Content::Blob(blob) => entry["blob"] = json!(blob),
            }
            return Some(json!([entry]));
        }
    }
    None
}
