//! The MCP conformance suite's fixture tools (`test_simple_text`,
//! `test_image_content`, the `test_input_required_result_*` that ask, the
//! Tasks extension's `greet`, `slow_compute`, …) as one image, so the
//! official suite tests ToolRuns end to end: each `McpTool` runs this
//! program with its fixture's name as the argument
//! (`tests/mcp-clients/fixtures.yaml` defines them all). Each is what a tool
//! author writes: content blocks (`MCP_CONTENT`), a failure (exit code and
//! message), parts for progress, and steps that ask (`MCP_INPUT_REQUIRED`)
//! and read the answers (`MCP_TOOL_INPUT`) and state (`MCP_TOOL_STATE`).

use std::time::Duration;

use serde_json::{Value, json};

const TERMINATION_LOG: &str = "/dev/termination-log";
/// The suite's 1×1 PNG and its tiny WAV.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";
/// Longest `slow_compute` sleeps, whatever it is asked.
const MAX_SECONDS: f64 = 600.0;

/// What a step ends with.
#[derive(Debug, PartialEq)]
enum Step {
    /// Content blocks, exit 0.
    Content(Value),
    /// Plain text (a part of several answers so), exit 0.
    Text(&'static str),
    /// Requests to the caller and the state to resume with, exit 0.
    Ask(Value, &'static str),
    /// A failure message, exit 1.
    Failed(String),
}

fn main() {
    let fixture = std::env::args().nth(1).unwrap_or_default();
    if fixture == "--version" {
        println!("mcp-fixtures {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let arguments: Value = serde_json::from_str(&env("MCP_TOOL_ARGUMENTS")).unwrap_or(json!({}));
    let input: Value = serde_json::from_str(&env("MCP_TOOL_INPUT")).unwrap_or(Value::Null);
    if fixture == "slow_compute" {
        let seconds = arguments["seconds"].as_f64().unwrap_or(0.0).clamp(0.0, MAX_SECONDS);
        std::thread::sleep(Duration::from_secs_f64(seconds));
    }
    let step =
        run(&fixture, &arguments, env("MCP_TOOL_STEP").parse().unwrap_or(0), &input, &env("MCP_TOOL_STATE"));
    let (text, code) = match step {
        Step::Content(blocks) => (format!("MCP_CONTENT {blocks}"), 0),
        Step::Text(text) => (text.to_string(), 0),
        Step::Ask(requests, state) => {
            (format!("MCP_INPUT_REQUIRED {}", json!({"inputRequests": requests, "state": state})), 0)
        }
        Step::Failed(message) => (message, 1),
    };
    println!("{text}");
    // Outside a Pod there is no termination log: stdout is the answer then.
    let _ = std::fs::write(TERMINATION_LOG, &text);
    std::process::exit(code);
}

fn text(text: &str) -> Step {
    Step::Content(json!([{"type": "text", "text": text}]))
}

fn elicit(message: &str, property: &str, kind: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": {property: {"type": kind}}, "required": [property]}}})
}

fn sample(question: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": question}}], "maxTokens": max_tokens}})
}

fn roots() -> Value {
    json!({"method": "roots/list", "params": {}})
}

/// What the client answered to `key`: an accepted elicitation's `field`,
/// a sampling answer's text, or the number of roots.
fn answered(input: &Value, key: &str, field: &str) -> String {
    let answer = &input[key];
    if let Some(value) = answer["content"].get(field) {
        return value.as_str().map_or_else(|| value.to_string(), str::to_string);
    }
    if let Some(said) = answer["content"]["text"].as_str() {
        return said.to_string();
    }
    match answer["roots"].as_array() {
        Some(roots) => format!("{} root(s)", roots.len()),
        None => format!("no answer ({})", answer["action"].as_str().unwrap_or("none")),
    }
}

/// One step of `fixture` (pure).
fn run(fixture: &str, arguments: &Value, step: u32, input: &Value, state: &str) -> Step {
    let image = json!({"type": "image", "mimeType": "image/png", "data": PNG});
    match (fixture, step) {
        ("test_simple_text", _) => text("This is a simple text response for testing."),
        ("test_image_content", _) => Step::Content(json!([image])),
        ("test_audio_content", _) => {
            Step::Content(json!([{"type": "audio", "mimeType": "audio/wav", "data": WAV}]))
        }
        ("test_embedded_resource", _) => Step::Content(json!([{"type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}}])),
        ("test_multiple_content_types", _) => Step::Content(json!([
            {"type": "text", "text": "Multiple content types test:"}, image,
            {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json",
                "text": "{\"test\":\"data\",\"value\":123}"}}])),
        ("test_error_handling" | "failing_job", _) => {
            Step::Failed("This tool intentionally returns an error for testing".into())
        }
        // A part of three: the run's progress is the parts done.
        ("test_tool_with_progress", _) => Step::Text("part done"),
        ("greet", _) => text(&format!("Hello, {}!", arguments["name"].as_str().unwrap_or("world"))),
        ("slow_compute", _) => text(&format!("computed {}", arguments["label"].as_str().unwrap_or("it"))),
        (
            "test_missing_capability"
            | "test_streaming_elicitation"
            | "test_logging_tool"
            | "test_trigger_tool_change",
            _,
        ) => text("Success"),
        // Ask, then answer from what came back.
        ("test_input_required_result_elicitation", 0) => {
            Step::Ask(json!({"user_name": elicit("What is your name?", "name", "string")}), "")
        }
        ("test_input_required_result_elicitation", _) => {
            text(&format!("Hello, {}!", answered(input, "user_name", "name")))
        }
        ("test_input_required_result_sampling", 0) => {
            Step::Ask(json!({"capital_question": sample("What is the capital of France?", 100)}), "")
        }
        ("test_input_required_result_sampling", _) => {
            text(&format!("Sampling result: {}", answered(input, "capital_question", "")))
        }
        ("test_input_required_result_list_roots", 0) => Step::Ask(json!({"client_roots": roots()}), ""),
        ("test_input_required_result_list_roots", _) => {
            text(&format!("Found {}", answered(input, "client_roots", "")))
        }
        ("test_input_required_result_request_state" | "test_input_required_result_tampered_state", 0) => {
            Step::Ask(json!({"confirm": elicit("Please confirm", "ok", "boolean")}), "request-state")
        }
        ("test_input_required_result_request_state" | "test_input_required_result_tampered_state", _) => {
            match state {
                "request-state" => text("state-ok: requestState validated"),
                other => Step::Failed(format!("the state came back as {other:?}")),
            }
        }
        ("test_input_required_result_multiple_inputs", 0) => Step::Ask(
            json!({"user_name": elicit("What is your name?", "name", "string"),
                   "greeting": sample("Generate a greeting", 50), "client_roots": roots()}),
            "multiple-inputs",
        ),
        ("test_input_required_result_multiple_inputs", _) => text(&format!(
            "{} from {}, with {}",
            answered(input, "greeting", ""),
            answered(input, "user_name", "name"),
            answered(input, "client_roots", "")
        )),
        ("test_input_required_result_multi_round", 0) => {
            Step::Ask(json!({"step1": elicit("What is your name?", "name", "string")}), "round-1")
        }
        ("test_input_required_result_multi_round", 1) => Step::Ask(
            json!({"step2": elicit("What is your favourite colour?", "color", "string")}),
            "round-2",
        ),
        ("test_input_required_result_multi_round", _) => {
            text(&format!("{} likes {}", state, answered(input, "step2", "color")))
        }
        // Asks both; the frontend puts to the client only what it declared it answers.
        ("test_input_required_result_capabilities", 0) => Step::Ask(
            json!({"elicit_input": elicit("What is your name?", "name", "string"),
                   "sample_input": sample("Say hello", 20)}),
            "",
        ),
        ("test_input_required_result_capabilities", _) => text("capabilities respected"),
        ("confirm_delete", 0) => Step::Ask(
            json!({"confirm": elicit(&format!("Delete {}?", arguments["filename"].as_str().unwrap_or("the file")),
                "confirm", "boolean")}),
            "",
        ),
        ("confirm_delete", _) => text(&format!("confirm: {}", answered(input, "confirm", "confirm"))),
        // Out of band: the user signs in on a page; only whether they went comes back.
        ("sign_in", 0) => Step::Ask(
            json!({"sign_in": {"method": "elicitation/create", "params": {"mode": "url",
                "message": "Sign in to the example service to continue.",
                "url": "https://login.example/authorize?session=demo"}}}),
            "",
        ),
        ("sign_in", _) => {
            text(&format!("sign-in: {}", input["sign_in"]["action"].as_str().unwrap_or("none")))
        }
        ("multi_input", 0) => Step::Ask(
            json!({"first": elicit("First name?", "name", "string"), "second": elicit("Second name?", "name", "string")}),
            "",
        ),
        ("multi_input", _) => {
            text(&format!("{} and {}", answered(input, "first", "name"), answered(input, "second", "name")))
        }
        (other, _) => Step::Failed(format!("no fixture named {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_fixtures_answer_in_blocks() {
        let Step::Content(blocks) = run("test_multiple_content_types", &json!({}), 0, &Value::Null, "")
        else {
            panic!("content")
        };
        let kinds: Vec<&str> =
            blocks.as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["text", "image", "resource"]);
        assert_eq!(run("greet", &json!({"name": "sep-2243"}), 0, &Value::Null, ""), text("Hello, sep-2243!"));
        assert!(matches!(run("nope", &json!({}), 0, &Value::Null, ""), Step::Failed(_)));
    }

    #[test]
    fn asking_fixtures_ask_then_answer_from_the_answers() {
        let Step::Ask(requests, _) =
            run("test_input_required_result_elicitation", &json!({}), 0, &Value::Null, "")
        else {
            panic!("asks")
        };
        assert_eq!(requests["user_name"]["method"], "elicitation/create");
        let input = json!({"user_name": {"action": "accept", "content": {"name": "Alice"}}});
        assert_eq!(
            run("test_input_required_result_elicitation", &json!({}), 1, &input, ""),
            text("Hello, Alice!")
        );
        let roots = json!({"client_roots": {"roots": [{"uri": "file:///a"}]}});
        assert_eq!(
            run("test_input_required_result_list_roots", &json!({}), 1, &roots, ""),
            text("Found 1 root(s)")
        );
        let sampled =
            json!({"capital_question": {"role": "assistant", "content": {"type": "text", "text": "Paris"}}});
        assert_eq!(
            run("test_input_required_result_sampling", &json!({}), 1, &sampled, ""),
            text("Sampling result: Paris")
        );
        let Step::Ask(requests, _) = run("sign_in", &json!({}), 0, &Value::Null, "") else { panic!("asks") };
        assert_eq!(requests["sign_in"]["params"]["mode"], "url");
        assert_eq!(
            run("sign_in", &json!({}), 1, &json!({"sign_in": {"action": "accept"}}), ""),
            text("sign-in: accept")
        );
        assert!(matches!(
            run("test_input_required_result_multi_round", &json!({}), 1, &input, "round-1"),
            Step::Ask(..)
        ));
        assert!(matches!(
            run("test_input_required_result_request_state", &json!({}), 1, &input, "x"),
            Step::Failed(_)
        ));
    }
}
