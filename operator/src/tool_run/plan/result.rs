//! A finished run's result, read from its own Pods' termination messages.

use mining_api::ToolRun;
use mining_api::tool::{MAX_RESULT_BYTES, MAX_STORED_RESULT_BYTES};
use mining_api::tool_schema::Schema;

use super::PodOutcome;

/// The run's result from its own Pods' termination messages, checked
/// against the output schema of its snapshot; or why there is none.
pub(super) fn result_of(run: &ToolRun, pods: &[PodOutcome]) -> Result<String, String> {
    let schema = match run.spec.output_schema.as_deref() {
        Some(text) => Some(
            serde_json::from_str(text)
                .map_err(|e| e.to_string())
                .and_then(|schema| Schema::compile(&schema))
                .map_err(|why| format!("the tool's outputSchema is not a usable JSON Schema: {why}"))?,
        ),
        None => None,
    };
    let parts = run.parts();
    let mut outputs = Vec::with_capacity(parts as usize);
    for index in 0..parts {
        let Some(pod) = pods.iter().find(|pod| pod.succeeded && pod.index == index) else {
            let part = if parts > 1 { format!(" of part {index}") } else { String::new() };
            return Err(format!("the result{part} was lost with its Pod before it was read"));
        };
        let text = pod.message.trim();
        if text.len() > MAX_RESULT_BYTES {
            return Err(format!("the tool's result is larger than {MAX_RESULT_BYTES} bytes"));
        }
        // Content blocks are the whole answer of a run of one part, kept
        // as written (the frontend reads them back through the same check).
        if let Some(content) = mining_api::tool_content::parse(text) {
            return match (content, parts, &schema) {
                (Err(why), ..) => Err(format!("the tool's content cannot be used: {why}")),
                (Ok(_), 1, None) => Ok(text.to_string()),
                (Ok(_), 1, Some(_)) => {
                    Err("a tool with an outputSchema answers JSON, not content blocks".into())
                }
                (Ok(_), ..) => Err("a run of several parts answers JSON or text, not content blocks".into()),
            };
        }
        let output = match &schema {
            Some(schema) => {
                let value: serde_json::Value = serde_json::from_str(text).map_err(|err| {
                    if text.is_empty() {
                        "the tool wrote no result to /dev/termination-log (its outputSchema needs one)"
                            .to_string()
                    } else {
                        format!("the tool's result is not JSON ({err})")
                    }
                })?;
                schema
                    .check(&value)
                    .map_err(|why| format!("the tool's result does not match its outputSchema: {why}"))?;
                value
            }
            None => serde_json::Value::String(text.to_string()),
        };
        outputs.push(output);
    }
    let stored = match (parts, schema.is_some()) {
        (1, true) => outputs[0].to_string(),
        (1, false) => outputs[0].as_str().unwrap_or_default().to_string(),
        _ => serde_json::Value::Array(outputs).to_string(),
    };
    // Escaped control characters can grow parts past what a status holds.
    if stored.len() > MAX_STORED_RESULT_BYTES {
        return Err(format!(
            "the tool's results add up to {} bytes, more than the {MAX_STORED_RESULT_BYTES} a run can store",
            stored.len()
        ));
    }
    Ok(stored)
}
