//! The example tool (`McpTool` `sum-numbers`): reads its call's arguments
//! from `MCP_TOOL_ARGUMENTS` (one JSON document, never a command line), adds
//! `numbers`, optionally takes `delay_seconds` doing so, and writes its
//! result as JSON to `/dev/termination-log`, where the operator reads it.
//! `label` is echoed back verbatim, so a caller can see that whatever it
//! sent arrived as data. `fail` makes it exit 3 with that message. While it
//! takes its time it prints `MCP_PROGRESS …` status lines, which the
//! operator shows as the run's message.

use std::time::Duration;

use serde_json::{Value, json};

/// Longest delay the tool takes, whatever it is asked.
const MAX_DELAY_SECONDS: u64 = 600;
const TERMINATION_LOG: &str = "/dev/termination-log";

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("sum-numbers {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    let outcome = run(std::env::var("MCP_TOOL_ARGUMENTS").unwrap_or_default());
    let (text, code) = match outcome {
        Ok(result) => (result.to_string(), 0),
        Err(message) => (message, 3),
    };
    println!("{text}");
    // Outside a Pod there is no termination log: stdout is the answer then.
    let _ = std::fs::write(TERMINATION_LOG, &text);
    std::process::exit(code);
}

fn run(arguments: String) -> Result<Value, String> {
    let arguments: Value =
        serde_json::from_str(&arguments).map_err(|err| format!("MCP_TOOL_ARGUMENTS is not JSON: {err}"))?;
    if let Some(message) = arguments.get("fail").and_then(Value::as_str) {
        return Err(format!("asked to fail: {message}"));
    }
    let numbers: Vec<f64> = arguments
        .get("numbers")
        .and_then(Value::as_array)
        .ok_or("numbers must be an array")?
        .iter()
        .map(|n| n.as_f64().ok_or("every number must be a number"))
        .collect::<Result<_, _>>()?;
    let delay = arguments.get("delay_seconds").and_then(Value::as_u64).unwrap_or(0).min(MAX_DELAY_SECONDS);
    // Status lines: the operator shows the latest as the run's message; the
    // result is the termination message.
    for second in 0..delay {
        println!("MCP_PROGRESS adding: {second}/{delay} s");
        std::thread::sleep(Duration::from_secs(1));
    }
    let mut result = json!({"sum": numbers.iter().sum::<f64>(), "count": numbers.len()});
    if let Some(label) = arguments.get("label") {
        result["label"] = label.clone();
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_and_echoes_the_label_verbatim() {
        let shell = "\"; rm -rf / $(reboot)\n`id`";
        let result = run(json!({"numbers": [1, 2.5], "label": shell}).to_string()).unwrap();
        assert_eq!(result, json!({"sum": 3.5, "count": 2, "label": shell}));
    }

    #[test]
    fn bad_arguments_and_asked_failures_are_errors() {
        assert!(run("nope".into()).unwrap_err().contains("not JSON"));
        assert!(run(json!({"numbers": ["x"]}).to_string()).is_err());
        assert_eq!(run(json!({"fail": "boom"}).to_string()).unwrap_err(), "asked to fail: boom");
    }
}
