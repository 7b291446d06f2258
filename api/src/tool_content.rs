//! A tool's result as MCP content blocks: text, image, audio, an embedded
//! resource or a link, mixed as the tool likes (a chart-rendering tool
//! returns its PNG inline beside a sentence). The step writes
//! [`CONTENT_MARKER`] and a JSON array of blocks, as MCP's `CallToolResult`
//! has them, to its termination message; the operator checks them here and
//! stores the text as the run's result, and the frontend hands the blocks
//! to the caller. It all fits the termination message (4,096 bytes): larger
//! media go as files, which the caller gets as `resource_link`s.

use base64::Engine as _;
use serde_json::Value;

/// The first word of a termination message that holds content blocks.
pub const CONTENT_MARKER: &str = "MCP_CONTENT";
/// Most blocks in one result.
pub const MAX_BLOCKS: usize = 16;

/// The blocks `message` holds, when it starts with [`CONTENT_MARKER`]
/// (`None` for any other result), or why they cannot be used (pure).
pub fn parse(message: &str) -> Option<Result<Vec<Value>, String>> {
    let rest = message.trim_start().strip_prefix(CONTENT_MARKER)?;
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    Some(checked(rest))
}

fn checked(json: &str) -> Result<Vec<Value>, String> {
    let blocks: Vec<Value> = serde_json::from_str(json.trim()).map_err(|err| {
        format!("{CONTENT_MARKER} must be followed by a JSON array of content blocks ({err})")
    })?;
    if blocks.is_empty() || blocks.len() > MAX_BLOCKS {
        return Err(format!("a result has 1 to {MAX_BLOCKS} content blocks, not {}", blocks.len()));
    }
    for (index, block) in blocks.iter().enumerate() {
        check_block(block).map_err(|why| format!("content block {index}: {why}"))?;
    }
    Ok(blocks)
}

fn check_block(block: &Value) -> Result<(), String> {
    let text = |key: &str| block.get(key).and_then(Value::as_str);
    match text("type") {
        Some("text") => text("text").map(|_| ()).ok_or_else(|| "a text block needs \"text\"".into()),
        Some(kind @ ("image" | "audio")) => {
            let media = text("mimeType").ok_or_else(|| format!("an {kind} block needs \"mimeType\""))?;
            if !media.starts_with(&format!("{kind}/")) {
                return Err(format!("an {kind} block's mimeType must be {kind}/…, not {media:?}"));
            }
            base64_of(text("data"), kind)
        }
        Some("resource") => {
            let resource = block.get("resource").ok_or("a resource block needs \"resource\"")?;
            if resource.get("uri").and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err("an embedded resource needs a \"uri\"".into());
            }
            match (resource.get("text"), resource.get("blob")) {
                (Some(Value::String(_)), None) => Ok(()),
                (None, Some(blob)) => base64_of(blob.as_str(), "resource"),
                _ => Err("an embedded resource has either \"text\" or \"blob\"".into()),
            }
        }
        Some("resource_link") => match (text("uri"), text("name")) {
            (Some(uri), Some(_)) if !uri.is_empty() => Ok(()),
            _ => Err("a resource_link needs \"uri\" and \"name\"".into()),
        },
        Some(other) => Err(format!(
            "{:?} is not a content type (text, image, audio, resource, resource_link)",
            crate::pow::clip(other, 32)
        )),
        None => Err("it has no \"type\"".into()),
    }
}

fn base64_of(data: Option<&str>, kind: &str) -> Result<(), String> {
    let data = data.ok_or_else(|| format!("an {kind} block needs its bytes as base64"))?;
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map(|_| ())
        .map_err(|err| format!("the {kind}'s data is not base64 ({err})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn content(blocks: Value) -> String {
        format!("{CONTENT_MARKER} {blocks}")
    }

    #[test]
    fn an_ordinary_result_is_not_content() {
        assert_eq!(parse("{\"sum\": 3}"), None);
        assert_eq!(parse("MCP_CONTENTS []"), None);
    }

    #[test]
    fn every_content_type_mixed_is_taken() {
        let blocks = json!([
            {"type": "text", "text": "a chart:"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
            {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="},
            {"type": "resource", "resource": {"uri": "test://r", "mimeType": "text/plain", "text": "hi"}},
            {"type": "resource_link", "uri": "https://example.com/x", "name": "x"},
        ]);
        assert_eq!(parse(&content(blocks.clone())), Some(Ok(blocks.as_array().unwrap().clone())));
    }

    #[test]
    fn unusable_blocks_say_which_and_why() {
        let why = |blocks: Value| parse(&content(blocks)).unwrap().unwrap_err();
        assert!(why(json!([])).contains("1 to 16"));
        assert!(
            why(json!([{"type": "image", "mimeType": "image/png", "data": "not base64!"}]))
                .contains("base64")
        );
        assert!(
            why(json!([{"type": "text", "text": "ok"}, {"type": "video"}])).starts_with("content block 1")
        );
        assert!(why(json!([{"type": "audio", "mimeType": "image/png", "data": ""}])).contains("audio/"));
        assert!(
            why(json!([{"type": "resource", "resource": {"uri": "u", "text": "t", "blob": ""}}]))
                .contains("either")
        );
        assert!(parse("MCP_CONTENT not json").unwrap().is_err());
    }
}
