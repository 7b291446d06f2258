//! Documents a tool offers beside itself as MCP resources — its manual, a
//! sample input, a schema — listed by `resources/list` and read by
//! `resources/read` for every caller who may call the tool. A URI with
//! `{name}` variables is a template: a read of a URI it matches answers its
//! text with each `{name}` filled from the URI (`weather://cities/{city}`
//! read as `weather://cities/paris`). Bounded, and checked with the rest of
//! the definition: the frontend keeps every tool's in memory.

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most resources one tool offers.
pub const MAX_RESOURCES: usize = 8;
/// Largest `text` or `blob` (its base64) of one resource.
pub const MAX_RESOURCE_BYTES: usize = 16 * 1024;
/// Longest URI.
pub const MAX_URI_BYTES: usize = 512;

/// One document a tool offers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolResource {
    /// Its URI, of a scheme of the tool's own (`weather://manual`); with
    /// `{name}` variables, a template.
    #[schemars(length(min = 1, max = MAX_URI_BYTES))]
    pub uri: String,
    /// A short name for it.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub description: Option<String>,
    /// Its media type (default `text/plain` for text, else `application/octet-stream`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub mime_type: Option<String>,
    /// Its content as text (a template's may name its variables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_RESOURCE_BYTES))]
    pub text: Option<String>,
    /// Its content as base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_RESOURCE_BYTES))]
    pub blob: Option<String>,
}

impl ToolResource {
    /// Whether its URI is a template.
    pub fn is_template(&self) -> bool {
        self.uri.contains('{')
    }

    /// Its media type as read.
    pub fn media_type(&self) -> &str {
        self.mime_type.as_deref().unwrap_or(if self.text.is_some() {
            "text/plain"
        } else {
            "application/octet-stream"
        })
    }

    /// Its text for a read of `uri`: as written for a plain resource that
    /// `uri` names, filled for a template `uri` matches; `None` when `uri`
    /// is not it (pure).
    pub fn read(&self, uri: &str) -> Option<Content> {
        let blob = || self.blob.clone().map(Content::Blob);
        if !self.is_template() {
            return (self.uri == uri).then(|| self.text.clone().map(Content::Text).or_else(blob))?;
        }
        let values = matched(&self.uri, uri)?;
        let Some(text) = &self.text else { return blob() };
        let mut filled = text.clone();
        for (name, value) in values {
            filled = filled.replace(&format!("{{{name}}}"), value);
        }
        Some(Content::Text(filled))
    }
}

/// What a read answers.
#[derive(Debug, PartialEq)]
pub enum Content {
    Text(String),
    Blob(String),
}

/// The variables of `template` as `uri` fills them, when it matches: each
/// `{name}` one or more unreserved URI characters (letters, digits, `-._~`),
/// never a `/` (pure).
fn matched<'a>(template: &'a str, uri: &'a str) -> Option<Vec<(&'a str, &'a str)>> {
    let mut values = Vec::new();
    let (mut template, mut uri) = (template, uri);
    while let Some(open) = template.find('{') {
        let literal = &template[..open];
        uri = uri.strip_prefix(literal)?;
        let close = template[open..].find('}')? + open;
        let name = &template[open + 1..close];
        template = &template[close + 1..];
        let end = uri
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')))
            .unwrap_or(uri.len());
        let next = template.find('{').map_or(template, |at| &template[..at]);
        // The value runs to where the literal after it starts.
        let end = if next.is_empty() { end } else { uri[..end].find(next).unwrap_or(end).min(end) };
        let (value, rest) = uri.split_at(end);
        if value.is_empty() {
            return None;
        }
        values.push((name, value));
        uri = rest;
    }
    (uri == template).then_some(values)
}

/// Why `resources` cannot be offered, if they cannot (pure).
pub fn problem(resources: &[ToolResource]) -> Option<String> {
    if resources.len() > MAX_RESOURCES {
        return Some(format!("a tool offers at most {MAX_RESOURCES} resources"));
    }
    for resource in resources {
        let uri = &resource.uri;
        let why = if uri.len() > MAX_URI_BYTES || !uri.contains(':') || uri.chars().any(char::is_whitespace) {
            Some(format!("is not a URI of at most {MAX_URI_BYTES} bytes"))
        } else if uri.starts_with("mining-operator:") {
            Some("uses the scheme of tool runs' files".into())
        } else if resource.name.is_empty() || resource.name.len() > 128 {
            Some("needs a name of 1 to 128 bytes".into())
        } else if resource
            .text
            .as_ref()
            .or(resource.blob.as_ref())
            .is_some_and(|c| c.len() > MAX_RESOURCE_BYTES)
        {
            Some(format!("is larger than {MAX_RESOURCE_BYTES} bytes"))
        } else if resource.text.is_some() == resource.blob.is_some() {
            Some("has either text or blob".into())
        } else if resource
            .blob
            .as_ref()
            .is_some_and(|b| base64::engine::general_purpose::STANDARD.decode(b).is_err())
        {
            Some("has a blob that is not base64".into())
        } else if resource.is_template() && matched(uri, &uri.replace(['{', '}'], "")).is_none() {
            Some("is a template whose variables are not {name}".into())
        } else {
            None
        };
        if let Some(why) = why {
            return Some(format!("resource {:?} {why}", crate::pow::clip(uri, 64)));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(uri: &str, text: &str) -> ToolResource {
        ToolResource {
            uri: uri.into(),
            name: "r".into(),
            description: None,
            mime_type: None,
            text: Some(text.into()),
            blob: None,
        }
    }

    #[test]
    fn a_plain_resource_reads_as_written_and_only_at_its_uri() {
        let manual = resource("weather://manual", "Ask for a city.");
        assert_eq!(manual.read("weather://manual"), Some(Content::Text("Ask for a city.".into())));
        assert_eq!(manual.read("weather://manual2"), None);
        assert_eq!(manual.media_type(), "text/plain");
    }

    #[test]
    fn a_template_fills_its_variables_from_the_uri() {
        let data = resource("test://template/{id}/data", r#"{"id":"{id}","data":"Data for ID: {id}"}"#);
        assert_eq!(
            data.read("test://template/123/data"),
            Some(Content::Text(r#"{"id":"123","data":"Data for ID: 123"}"#.into()))
        );
        assert_eq!(data.read("test://template//data"), None, "a variable is never empty");
        assert_eq!(data.read("test://template/1/2/data"), None, "nor spans a '/'");
        assert_eq!(
            data.read("test://template/%22x/data"),
            None,
            "nor holds what the text could be broken by"
        );
        let city = resource("weather://{country}/{city}", "{city} in {country}");
        assert_eq!(city.read("weather://fr/paris"), Some(Content::Text("paris in fr".into())));
    }

    #[test]
    fn unusable_resources_say_which_and_why() {
        let why = |resources: &[ToolResource]| problem(resources).unwrap();
        assert!(why(&[resource("no-scheme", "t")]).contains("not a URI"));
        assert!(why(&[resource("mining-operator://runs/x/outputs/y", "t")]).contains("scheme of tool runs"));
        let mut both = resource("a://b", "t");
        both.blob = Some("aGk=".into());
        assert!(why(&[both]).contains("either"));
        let mut bad = resource("a://b", "t");
        (bad.text, bad.blob) = (None, Some("!!".into()));
        assert!(why(&[bad]).contains("base64"));
        assert!(why(&vec![resource("a://b", "t"); 9]).contains("at most 8"));
        assert_eq!(problem(&[resource("test://template/{id}/data", "{id}")]), None);
    }
}
