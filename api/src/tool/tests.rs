use super::*;
use serde_json::json;

fn tool(value: serde_json::Value) -> McpToolSpec {
    serde_json::from_value(value).unwrap()
}

fn sum_numbers() -> serde_json::Value {
    json!({
        "description": "Adds numbers.",
        "inputSchema": {"type": "object", "properties": {"numbers": {"type": "array"}}},
        "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "tool", "image": "example/sum"}]}}}},
    })
}

#[test]
fn a_runs_own_jobs_are_its_steps_so_far_and_the_recorded_uid() {
    let mut run: ToolRun = serde_json::from_value(json!({
        "apiVersion": "mining-operator.dev/v1alpha1", "kind": "ToolRun",
        "metadata": {"name": "sum-abc"},
        "spec": {"tool": "sum", "arguments": "{}", "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}},
        "status": {"step": 1, "jobUid": "uid-1"},
    }))
    .unwrap();
    assert!(run.is_own_job("sum-abc", "anything"), "step 0's Job (gone by now, if anywhere)");
    assert!(run.is_own_job("sum-abc-s1", "uid-1"));
    assert!(!run.is_own_job("sum-abc-s1", "uid-planted"), "the current step's name, another uid");
    for planted in ["sum-abc-s2", "sum-abc-s01", "sum-abc-x", "sum-abcd", "other", "sum-abc-s"] {
        assert!(!run.is_own_job(planted, "uid-1"), "{planted}");
    }
    run.status.as_mut().unwrap().job_uid = None;
    assert!(run.is_own_job("sum-abc-s1", "uid-new"), "not recorded yet: the name decides");
}

#[test]
fn the_shape_users_write_reads() {
    let spec = tool(sum_numbers());
    assert_eq!(spec.problem(), None);
    assert_eq!(spec.job_template.spec.unwrap().backoff_limit, Some(0));
}

#[test]
fn unbounded_or_empty_definitions_are_refused_with_the_reason() {
    let mut big = sum_numbers();
    big["description"] = json!("x".repeat(MAX_DESCRIPTION_BYTES + 1));
    assert!(tool(big).problem().unwrap().contains("description"));
    let mut not_object = sum_numbers();
    not_object["inputSchema"] = json!({"type": "string"});
    assert!(tool(not_object).problem().unwrap().contains("\"type\": \"object\""));
    let mut no_containers = sum_numbers();
    no_containers["jobTemplate"]["spec"]["template"]["spec"]["containers"] = json!([]);
    assert!(tool(no_containers).problem().unwrap().contains("containers"));
    let mut parts = sum_numbers();
    parts["jobTemplate"]["spec"]["completions"] = json!(MAX_COMPLETIONS + 1);
    assert!(tool(parts).problem().unwrap().contains("completions"));
    let mut schema = sum_numbers();
    schema["inputSchema"]["description"] = json!("x".repeat(MAX_SCHEMA_BYTES));
    assert!(tool(schema).problem().unwrap().contains("inputSchema"));
    let mut shell = sum_numbers();
    shell["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"] =
        json!(["sh", "-c", "sum $(MCP_TOOL_ARGUMENTS)"]);
    assert!(tool(shell).problem().unwrap().contains("command line"));
    let mut ill_typed = sum_numbers();
    ill_typed["jobTemplate"]["spec"]["backoffLimit"] = json!("many");
    assert!(tool(ill_typed).problem().unwrap().contains("not a batch/v1 Job template"));
}

#[test]
fn every_allowed_number_of_parts_fits_the_stored_result() {
    assert!(stored_result_bound(MAX_COMPLETIONS as usize) <= MAX_STORED_RESULT_BYTES);
    assert_eq!(stored_result_bound(1), MAX_RESULT_BYTES);
}
