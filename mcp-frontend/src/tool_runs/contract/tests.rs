use super::*;
use mining_api::ToolRunStatus;

fn run(phase: ToolRunPhase, result: Option<&str>, schema: bool) -> ToolRun {
    let mut run: ToolRun = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
        "metadata": {"name": "mw-abc", "creationTimestamp": "2026-11-25T01:00:00Z"},
        "spec": {"tool": "sum", "arguments": "{}", "jobTemplate": {}},
    }))
    .unwrap();
    if schema {
        run.spec.output_schema = Some(r#"{"type":"object"}"#.into());
    }
    run.status = Some(ToolRunStatus {
        phase: Some(phase),
        result: result.map(str::to_string),
        message: Some("the tool failed (exit code 2): boom".into()),
        exit_code: Some(2),
        ..Default::default()
    });
    run
}

#[test]
fn a_queued_or_preempted_run_says_why_it_waits() {
    let now: Timestamp = "2026-11-25T01:00:40Z".parse().unwrap();
    let mut queued = run(ToolRunPhase::Pending, None, false);
    let said = "queued: gave its slot back to work that waited past the preemption delay (its tool is \
                preemptible); it runs again from its start when its turn comes";
    queued.status.as_mut().unwrap().message = Some(said.into());
    queued.status.as_mut().unwrap().progress = Some("0/1".into());
    let outcome = run_outcome(&queued, now);
    assert_eq!(outcome.status, OutcomeStatus::Running);
    assert_eq!(outcome.status_message, format!("Waiting for a slot ({said})"));
    // Not yet said by the operator: waiting for its Job, as before.
    queued.status.as_mut().unwrap().message = None;
    queued.status.as_mut().unwrap().progress = None;
    assert_eq!(run_outcome(&queued, now).status_message, "Waiting for the tool's Job to start");
}

#[test]
fn each_phase_tells_the_model_what_to_do() {
    let now: Timestamp = "2026-11-25T01:00:40Z".parse().unwrap();
    let running = run_outcome(&run(ToolRunPhase::Running, None, false), now);
    assert_eq!((running.status, running.poll_after_seconds), (OutcomeStatus::Running, Some(10)));
    assert!(running.next.unwrap().contains("get_tool_result"));
    let done = run_outcome(&run(ToolRunPhase::Succeeded, Some(r#"{"sum":3}"#), true), now);
    assert_eq!(done.details.result, Some(json!({"sum": 3})));
    let text = run_outcome(&run(ToolRunPhase::Succeeded, Some(r#"{"sum":3}"#), false), now);
    assert_eq!(text.details.result, Some(json!(r#"{"sum":3}"#)), "without a schema the result is text");
    let failed = run_outcome(&run(ToolRunPhase::Failed, None, false), now);
    assert_eq!((failed.status, failed.details.exit_code), (OutcomeStatus::Failed, Some(2)));
    assert!(failed.error.unwrap().contains("boom"));
}

#[test]
fn the_listed_output_schema_types_the_result() {
    let typed = json!({"type": "object", "properties": {"sum": {"type": "number"}}});
    let schema = outcome_schema(typed.as_object());
    assert_eq!(schema["properties"]["result"]["anyOf"][0], typed);
    assert!(schema["required"].as_array().unwrap().contains(&json!("status")));
    // The outcome, as answered, satisfies its own listed schema.
    let answer = serde_json::to_value(run_outcome(
        &run(ToolRunPhase::Succeeded, Some(r#"{"sum":3}"#), true),
        Timestamp::now(),
    ))
    .unwrap();
    let compiled = mining_api::tool_schema::Schema::compile(&Value::Object(schema)).unwrap();
    assert_eq!(compiled.check(&answer), Ok(()));
}

fn asking() -> ToolRun {
    let mut asking = run(ToolRunPhase::InputRequired, None, false);
    let requests = json!({
        "approve": {"method": "elicitation/create", "params": {"mode": "form", "message": "Deploy build 42?",
            "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}}}}},
        "summary": {"method": "sampling/createMessage", "params": {"maxTokens": 50,
            "messages": [{"role": "user", "content": {"type": "text", "text": "Summarise: 3 files changed"}}]}},
    });
    asking.status.as_mut().unwrap().input_requests = requests.as_object().cloned();
    asking
}

#[test]
fn a_run_that_asks_shows_the_questions_and_how_to_answer() {
    let outcome = run_outcome(&asking(), Timestamp::now());
    assert_eq!(outcome.status, OutcomeStatus::InputRequired);
    assert!(outcome.status_message.contains("approve: Deploy build 42?"), "{}", outcome.status_message);
    assert!(outcome.next.unwrap().contains(RESPOND_TOOL_RUN));
    assert_eq!(outcome.details.input_requests.unwrap().len(), 2);
    // What it records is what rmcp carries as a task's `inputRequests`.
    let recorded = asking().status.unwrap().input_requests.unwrap();
    let typed: rmcp::model::InputRequests = serde_json::from_value(Value::Object(recorded.clone())).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), Value::Object(recorded));
}

#[test]
fn an_answer_shows_what_is_still_asked_and_the_last_one_queues_the_next_step() {
    let now = Timestamp::now();
    let partial = responded_outcome(&asking(), &["approve".into()], &["nope".into()], now);
    assert_eq!(partial.status, OutcomeStatus::InputRequired);
    assert_eq!(partial.details.input_requests.as_ref().unwrap().keys().collect::<Vec<_>>(), ["summary"]);
    assert!(partial.status_message.contains("ignored: nope"));
    let all = responded_outcome(&asking(), &["approve".into(), "summary".into()], &[], now);
    assert_eq!((all.status, all.details.input_requests), (OutcomeStatus::Running, None));
    assert!(all.next.unwrap().contains(GET_TOOL_RESULT));
}

#[test]
fn a_finished_runs_files_are_linked_as_resources_with_name_type_and_size() {
    let mut done = run(ToolRunPhase::Succeeded, Some("ok"), false);
    let file = |name: &str, size| mining_api::tool_outputs::ToolOutput {
        name: name.into(),
        media_type: "text/csv".into(),
        size,
        sha256: "0".repeat(64),
    };
    done.status.as_mut().unwrap().outputs = vec![file("big.csv", 16 << 20), file("small.csv", 3)];
    let result = run_outcome(&done, Timestamp::now()).into_result();
    let links: Vec<_> = result.content.iter().filter_map(|c| c.as_resource_link()).collect();
    assert_eq!(links.len(), 2);
    assert_eq!(links[0].uri, "mining-operator://runs/mw-abc/outputs/big.csv");
    assert_eq!((links[0].mime_type.as_deref(), links[0].size), (Some("text/csv"), Some(16 << 20)));
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["files"][1]["uri"], "mining-operator://runs/mw-abc/outputs/small.csv");
    // A status someone edited to list a name twice links nothing.
    done.status.as_mut().unwrap().outputs = vec![file("a", 1), file("a", 1)];
    let result = run_outcome(&done, Timestamp::now()).into_result();
    assert!(result.content.iter().all(|c| c.as_resource_link().is_none()));
}

#[test]
fn a_tool_answering_in_content_blocks_leads_the_answer_with_them() {
    let now: Timestamp = "2026-11-25T01:00:40Z".parse().unwrap();
    let written = r#"MCP_CONTENT [{"type": "text", "text": "a chart:"},
        {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
        {"type": "resource", "resource": {"uri": "test://r", "mimeType": "text/plain", "text": "hi"}}]"#;
    let result = run_outcome(&run(ToolRunPhase::Succeeded, Some(written), false), now).into_result();
    let content = serde_json::to_value(&result.content).unwrap();
    assert_eq!(content[0], json!({"type": "text", "text": "a chart:"}));
    assert_eq!(content[1], json!({"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}));
    assert_eq!(content[2]["resource"]["uri"], "test://r");
    assert_eq!(content[3]["text"].as_str().unwrap().lines().last(), Some("result: the content blocks above"));
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["result"].as_array().map(Vec::len), Some(3), "the envelope's result is the blocks");
    // Blocks that do not check (a status anyone with status rights may write) are text.
    let forged = r#"MCP_CONTENT [{"type": "image", "mimeType": "image/png", "data": "!!"}]"#;
    let forged = run_outcome(&run(ToolRunPhase::Succeeded, Some(forged), false), now).into_result();
    assert!(
        serde_json::to_value(&forged.content)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["type"] == "text")
    );
}

#[test]
fn a_run_of_one_part_speaks_of_its_status_line_and_a_run_of_parts_counts_them() {
    let now: Timestamp = "2026-11-25T01:00:40Z".parse().unwrap();
    let mut one = run(ToolRunPhase::Running, None, false);
    let status = one.status.as_mut().unwrap();
    status.message = Some(format!("{}section 2/6", mining_api::tool::RUNNING_PREFIX));
    status.progress = Some("0/1".into());
    assert_eq!(run_outcome(&one, now).status_message, "Running: section 2/6");
    let mut three = one.clone();
    three.spec.job_template = serde_json::from_value(json!({"spec": {"completions": 3}})).unwrap();
    three.status.as_mut().unwrap().progress = Some("1/3".into());
    assert_eq!(three.parts(), 3);
    assert_eq!(run_outcome(&three, now).status_message, "Running (1/3 parts done): section 2/6");
}
