use serde_json::json;

use super::*;

fn declared() -> Value {
    json!({CLIENT_CAPABILITIES: {"extensions": {"io.modelcontextprotocol/tasks": {}}}})
}

#[test]
fn a_listen_names_tasks_once_each_and_says_whether_it_declared_the_extension() {
    let params = json!({"notifications": {"taskIds": ["mw-a", "mw-b", "mw-a"]}, "_meta": declared()});
    let listen = parse_listen(&params).unwrap();
    assert_eq!(listen.task_ids, Some(vec!["mw-a".to_string(), "mw-b".to_string()]));
    assert!(listen.declares_tasks);

    let undeclared = parse_listen(&json!({"notifications": {"taskIds": ["mw-a"]}})).unwrap();
    assert!(!undeclared.declares_tasks);
    let other_extension = json!({"notifications": {"taskIds": []},
        "_meta": {CLIENT_CAPABILITIES: {"extensions": {"example.com/other": {}}}}});
    assert!(!parse_listen(&other_extension).unwrap().declares_tasks);

    let no_tasks = parse_listen(&json!({"notifications": {"toolsListChanged": true}})).unwrap();
    assert_eq!(no_tasks.task_ids, None, "tasks were not asked for");
    assert!(no_tasks.tools_list_changed, "tool list changes were");
    assert!(!listen.tools_list_changed);
}

#[test]
fn malformed_or_oversized_listens_are_refused_with_what_is_wrong() {
    for (params, says) in [
        (json!({}), "params.notifications must be an object"),
        (json!({"notifications": {"taskIds": "mw-a"}}), "must be an array"),
        (json!({"notifications": {"taskIds": [1]}}), "array of strings"),
    ] {
        let error = parse_listen(&params).unwrap_err();
        assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
        assert!(error.message.contains(says), "{}", error.message);
    }
    let many: Vec<String> = (0..=MAX_TASK_IDS_PER_LISTEN).map(|i| format!("mw-{i}")).collect();
    let error = parse_listen(&json!({"notifications": {"taskIds": many}})).unwrap_err();
    assert!(error.message.contains(&format!("at most {MAX_TASK_IDS_PER_LISTEN}")), "{}", error.message);
    let most: Vec<String> = (0..MAX_TASK_IDS_PER_LISTEN).map(|i| format!("mw-{i}")).collect();
    assert!(parse_listen(&json!({"notifications": {"taskIds": most}})).is_ok());
}

#[test]
fn the_missing_capability_error_names_the_extension() {
    let error = missing_capability();
    assert_eq!(error.code.0, -32021);
    let data = error.data.unwrap();
    assert_eq!(data["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"], json!({}));
}

#[test]
fn every_message_of_a_listen_carries_its_id() {
    let id = json!(7);
    let ack = acknowledgement(Some(&["mw-a".to_string()]), false, &id);
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"], json!({"taskIds": ["mw-a"]}));
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], 7);
    let none = acknowledgement(Some(&[]), false, &id);
    assert_eq!(none["params"]["notifications"], json!({"taskIds": []}), "none of them was theirs");
    let nothing = acknowledgement(None, false, &json!("s"));
    assert_eq!(nothing["params"]["notifications"], json!({}), "nothing asked that we send");
    let tools = acknowledgement(None, true, &id);
    assert_eq!(tools["params"]["notifications"], json!({"toolsListChanged": true}));

    let pushed = tagged("notifications/tasks", json!({"taskId": "mw-a", "status": "working"}), &id);
    assert_eq!(pushed["params"]["taskId"], "mw-a");
    assert_eq!(pushed["params"]["_meta"][SUBSCRIPTION_ID], 7);
    let kept = tagged("notifications/tasks", json!({"_meta": {"other": 1}}), &id);
    assert_eq!(kept["params"]["_meta"], json!({"other": 1, SUBSCRIPTION_ID: 7}));

    let end = closing(&id);
    assert_eq!(end["id"], 7);
    assert_eq!(end["result"]["_meta"][SUBSCRIPTION_ID], 7);
}

#[test]
fn a_refused_listen_says_which_cap_and_when_to_retry() {
    let mine = too_many_listens(WaitCap::PerCaller, 8, 1000);
    assert!(mine.message.contains("at most 8 for one caller"), "{}", mine.message);
    assert!(mine.message.contains(&format!("retry in {LISTEN_RETRY_SECONDS} s")), "{}", mine.message);
    let data = mine.data.unwrap();
    assert_eq!(data["limit"], "per_caller");
    assert_eq!(data["retryAfterSeconds"], LISTEN_RETRY_SECONDS);
    let all = too_many_listens(WaitCap::Total, 8, 1000);
    assert!(all.message.contains("at most 1000 in total"), "{}", all.message);
}
