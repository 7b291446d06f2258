//! The example tool that asks (`McpTool` `deploy-gate`): a deploy held at an
//! approval gate. Each step is one run of this program, in its own Pod;
//! nothing runs while the caller thinks.
//!
//! - Step 0 plans the deploy of `service` at `version` and asks the caller
//!   (an MCP elicitation) whether to go ahead, showing the plan.
//! - When `release_note` is asked for and the deploy was approved, step 1
//!   asks the caller's model (MCP sampling) to write a one-line release note.
//! - The last step "deploys" (this example only says it did) and answers.
//!
//! How a step asks: its termination message is `MCP_INPUT_REQUIRED` and a
//! JSON document `{"inputRequests": {key: request}, "state": "…"}`; the
//! next step gets the answers as `MCP_TOOL_INPUT` (key → the client's
//! result), the state as `MCP_TOOL_STATE`, its number as `MCP_TOOL_STEP`.

use serde_json::{Value, json};

const TERMINATION_LOG: &str = "/dev/termination-log";

/// What a step ends with.
#[derive(Debug, PartialEq)]
enum Step {
    /// The result (JSON), exit 0.
    Done(Value),
    /// Requests to the caller and the state to resume with.
    Ask { requests: Value, state: Value },
    /// A failure message, exit 3.
    Failed(String),
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("deploy-gate {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let step = run(&env("MCP_TOOL_ARGUMENTS"), &env("MCP_TOOL_INPUT"), &env("MCP_TOOL_STATE"));
    let (text, code) = match step {
        Step::Done(result) => (result.to_string(), 0),
        Step::Ask { requests, state } => {
            let ask = json!({"inputRequests": requests, "state": state.to_string()});
            (format!("MCP_INPUT_REQUIRED {ask}"), 0)
        }
        Step::Failed(message) => (message, 3),
    };
    println!("{text}");
    // Outside a Pod there is no termination log: stdout is the answer then.
    let _ = std::fs::write(TERMINATION_LOG, &text);
    std::process::exit(code);
}

/// One step, from the call's arguments, the answers to the last round (if
/// any) and the state the step before left (pure).
fn run(arguments: &str, input: &str, state: &str) -> Step {
    let arguments: Value = match serde_json::from_str(arguments) {
        Ok(arguments) => arguments,
        Err(err) => return Step::Failed(format!("MCP_TOOL_ARGUMENTS is not JSON: {err}")),
    };
    let service = arguments["service"].as_str().unwrap_or("service");
    let version = arguments["version"].as_str().unwrap_or("latest");
    let input: Value = serde_json::from_str(input).unwrap_or(Value::Null);
    let state: Value = serde_json::from_str(state).unwrap_or(Value::Null);
    match state["stage"].as_str() {
        None => {
            let plan =
                format!("{service}: 3 replicas rolled to {version}, one at a time; rollback kept for 1 h");
            Step::Ask {
                requests: json!({"approve": {"method": "elicitation/create", "params": {
                    "mode": "form",
                    "message": format!("Deploy {service} {version} to production? Plan: {plan}"),
                    "requestedSchema": {"type": "object", "properties": {
                        "approve": {"type": "boolean", "title": "Approve the deploy"},
                        "reason": {"type": "string", "title": "Why (optional)"}},
                        "required": ["approve"]}}}}),
                state: json!({"stage": "approval", "plan": plan}),
            }
        }
        Some("approval") => {
            let answer = &input["approve"];
            let approved = answer["action"] == "accept" && answer["content"]["approve"] == true;
            if !approved {
                let why = match answer["action"].as_str() {
                    Some("accept") => "the deploy was rejected",
                    Some("decline") => "the approval was declined",
                    _ => "the approval was cancelled",
                };
                return Step::Done(
                    json!({"deployed": false, "service": service, "version": version, "reason": why}),
                );
            }
            if arguments["release_note"] == true {
                return Step::Ask {
                    requests: json!({"release_note": {"method": "sampling/createMessage", "params": {
                        "messages": [{"role": "user", "content": {"type": "text", "text": format!(
                            "Write a one-line release note for deploying {service} {version}. Plan: {}",
                            state["plan"].as_str().unwrap_or_default())}}],
                        "maxTokens": 100}}}),
                    state: json!({"stage": "note", "plan": state["plan"]}),
                };
            }
            Step::Done(json!({"deployed": true, "service": service, "version": version}))
        }
        Some("note") => {
            let note = input["release_note"]["content"]["text"].as_str().unwrap_or_default();
            Step::Done(
                json!({"deployed": true, "service": service, "version": version, "release_note": note}),
            )
        }
        Some(other) => Step::Failed(format!("unknown stage {other:?} in MCP_TOOL_STATE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resume(step: &Step) -> String {
        match step {
            Step::Ask { state, .. } => state.to_string(),
            other => panic!("expected an ask, got {other:?}"),
        }
    }

    #[test]
    fn it_asks_first_and_deploys_only_on_approval() {
        let args = json!({"service": "api", "version": "1.2"}).to_string();
        let first = run(&args, "", "");
        let Step::Ask { requests, .. } = &first else { panic!("{first:?}") };
        assert!(requests["approve"]["params"]["message"].as_str().unwrap().contains("Deploy api 1.2"));
        let approved = json!({"approve": {"action": "accept", "content": {"approve": true}}}).to_string();
        assert_eq!(
            run(&args, &approved, &resume(&first)),
            Step::Done(json!({"deployed": true, "service": "api", "version": "1.2"}))
        );
        let declined = json!({"approve": {"action": "decline"}}).to_string();
        let Step::Done(result) = run(&args, &declined, &resume(&first)) else { panic!() };
        assert_eq!(
            (result["deployed"].clone(), result["reason"].clone()),
            (json!(false), json!("the approval was declined"))
        );
    }

    #[test]
    fn a_release_note_is_asked_of_the_model_after_approval() {
        let args = json!({"service": "api", "version": "1.2", "release_note": true}).to_string();
        let first = run(&args, "", "");
        let approved = json!({"approve": {"action": "accept", "content": {"approve": true}}}).to_string();
        let second = run(&args, &approved, &resume(&first));
        let Step::Ask { requests, .. } = &second else { panic!("{second:?}") };
        assert_eq!(requests["release_note"]["method"], "sampling/createMessage");
        let note = json!({"release_note": {"role": "assistant", "model": "m", "content": {"type": "text", "text": "API 1.2 is out."}}});
        let Step::Done(result) = run(&args, &note.to_string(), &resume(&second)) else { panic!() };
        assert_eq!(result["release_note"], "API 1.2 is out.");
    }
}
