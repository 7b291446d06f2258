//! A tool that asks its caller and waits (MCP `input_required`).
//!
//! A step of a run ends, instead of with a result, with a termination
//! message that starts with [`ASK_PREFIX`] and holds the requests it needs
//! answered and an opaque state to resume with ([`Ask`]). No Pod waits: the
//! run records the requests and goes `InputRequired`; the caller's answers
//! are written into the run by the MCP frontend, each with a proof only it
//! can make; once every request is answered, the next step runs as a new
//! Job given the answers ([`INPUT_ENV`]) and the state ([`STATE_ENV`])
//! beside the original arguments.
//!
//! What is checked here is shared by the operator (the ask a tool wrote)
//! and the frontend (the answer a caller gave), so the two cannot drift.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The first word of a termination message that asks instead of answering.
pub const ASK_PREFIX: &str = "MCP_INPUT_REQUIRED";
/// The environment variable holding the answers of the last round: a JSON
/// object from each request's key to the client's result for it.
pub const INPUT_ENV: &str = "MCP_TOOL_INPUT";
/// The environment variable holding the state the last step left.
pub const STATE_ENV: &str = "MCP_TOOL_STATE";
/// The environment variable holding the step's number (0 for the first).
pub const STEP_ENV: &str = "MCP_TOOL_STEP";
/// The keys of a step's Secret.
pub const INPUT_KEY: &str = "input";
pub const STATE_KEY: &str = "state";

/// Most requests in one round.
pub const MAX_REQUESTS_PER_ROUND: usize = 4;
/// Most rounds one run may ask (an endless asker fails at the next).
pub const MAX_ROUNDS: u32 = 8;
/// Most answers a run's record holds: every key of every round.
pub const MAX_ANSWERS: usize = MAX_REQUESTS_PER_ROUND * MAX_ROUNDS as usize;
/// Longest request key: letters, digits, `-`, `_` and `.`.
pub const MAX_KEY_BYTES: usize = 64;
/// Largest state a step may leave for the next.
pub const MAX_STATE_BYTES: usize = 2048;
/// Largest answer (JSON bytes) a caller may give to one request.
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024;
/// Longest URL a URL-mode elicitation may send the user to.
pub const MAX_ELICITATION_URL_BYTES: usize = 2048;
/// Longest a run waits for its answers unless its tool says otherwise.
pub const DEFAULT_INPUT_DEADLINE_SECONDS: i64 = 24 * 3600;
/// Longest a tool may let a run wait for its answers.
pub const MAX_INPUT_DEADLINE_SECONDS: i64 = 30 * 24 * 3600;

/// The methods a tool may ask its caller.
pub const ELICITATION: &str = "elicitation/create";
pub const SAMPLING: &str = "sampling/createMessage";
/// The client's roots (2026-07-28 `InputRequest`; 2025-11-25 clients are
/// asked it on the task's stream like the others).
pub const ROOTS: &str = "roots/list";

/// The Secret holding step `step`'s answers and state (steps from 1).
pub fn input_secret_name(run_name: &str, step: u32) -> String {
    format!("{run_name}-input-{step}")
}

/// What a step that asks writes after [`ASK_PREFIX`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ask {
    /// Key → request (`{"method": …, "params": …}`), as MCP's `inputRequests`.
    pub input_requests: BTreeMap<String, Value>,
    /// Handed to the next step as [`STATE_ENV`].
    #[serde(default)]
    pub state: String,
}

impl Ask {
    /// The ask in a termination message, if it is one: `None` for an
    /// ordinary result, `Some(Err(why))` for an ask that cannot be used.
    /// `asked_before` are the keys of earlier rounds (each is used once).
    pub fn parse(message: &str, asked_before: &[String]) -> Option<Result<Self, String>> {
        let rest = message.trim_start().strip_prefix(ASK_PREFIX)?;
        if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
            return None;
        }
        Some(Self::checked(rest.trim(), asked_before))
    }

    fn checked(json: &str, asked_before: &[String]) -> Result<Self, String> {
        let ask: Self = serde_json::from_str(json).map_err(|err| {
            format!("the tool asked for input, but not as {{\"inputRequests\": …}} ({err})")
        })?;
        if ask.input_requests.is_empty() {
            return Err("the tool asked for input with no inputRequests".into());
        }
        if ask.input_requests.len() > MAX_REQUESTS_PER_ROUND {
            return Err(format!(
                "the tool asked {} things at once; at most {MAX_REQUESTS_PER_ROUND}",
                ask.input_requests.len()
            ));
        }
        if ask.state.len() > MAX_STATE_BYTES {
            return Err(format!("the tool's state is larger than {MAX_STATE_BYTES} bytes"));
        }
        for (key, request) in &ask.input_requests {
            if !valid_key(key) {
                return Err(format!(
                    "the request key {:?} is not 1 to {MAX_KEY_BYTES} letters, digits, '-', '_' or '.'",
                    crate::pow::clip(key, MAX_KEY_BYTES)
                ));
            }
            if asked_before.iter().any(|used| used == key) {
                return Err(format!(
                    "the request key {key:?} was used by an earlier round (each key is used once)"
                ));
            }
            check_request(request).map_err(|why| format!("the request {key:?} cannot be asked: {why}"))?;
        }
        Ok(ask)
    }
}

impl Ask {
    /// The ask with every URL-mode elicitation's `elicitationId` set to
    /// `{run_uid}.{key}`: unique across the server and over time, as the
    /// protocol asks, whatever the tool wrote (a tool correlates through its
    /// own URL, never through an id another run could take).
    pub fn with_elicitation_ids(mut self, run_uid: &str) -> Self {
        for (key, request) in &mut self.input_requests {
            if is_url_elicitation(request)
                && let Some(params) = request.get_mut("params").and_then(Value::as_object_mut)
            {
                params.insert("elicitationId".into(), Value::String(format!("{run_uid}.{key}")));
            }
        }
        self
    }
}

/// Whether `request` is an elicitation in URL mode (out of band: the user
/// opens a page; nothing sensitive passes through the client).
pub fn is_url_elicitation(request: &Value) -> bool {
    request.get("method").and_then(Value::as_str) == Some(ELICITATION)
        && request.pointer("/params/mode").and_then(Value::as_str) == Some("url")
}

/// Whether `url` may be put to a user: absolute `https`, with a host, no
/// credentials, no spaces or control characters, bounded.
fn check_elicitation_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_ELICITATION_URL_BYTES {
        return Err(format!("its url is longer than {MAX_ELICITATION_URL_BYTES} bytes"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("its url holds spaces or control characters".into());
    }
    let rest = url.strip_prefix("https://").ok_or("its url must be https://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("its url must not carry credentials (user@host)".into());
    }
    if authority.is_empty() || authority.starts_with(':') {
        return Err("its url has no host".into());
    }
    Ok(())
}

fn valid_key(key: &str) -> bool {
    (1..=MAX_KEY_BYTES).contains(&key.len())
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Whether `request` is one this project can put to a caller: an
/// elicitation in form mode (an object schema) or URL mode (an https page),
/// a sampling request, or a roots request.
pub fn check_request(request: &Value) -> Result<(), String> {
    let method = request.get("method").and_then(Value::as_str).ok_or("it has no \"method\"")?;
    if method == ROOTS {
        return match request.get("params") {
            None | Some(Value::Object(_)) => Ok(()),
            Some(_) => Err("a roots/list request's \"params\" must be an object".into()),
        };
    }
    let params = request.get("params").and_then(Value::as_object).ok_or("it has no \"params\" object")?;
    match method {
        ELICITATION => {
            if params.get("message").and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err("an elicitation needs a \"message\"".into());
            }
            match params.get("mode").and_then(Value::as_str) {
                None | Some("form") => {}
                Some("url") => {
                    let url = params
                        .get("url")
                        .and_then(Value::as_str)
                        .ok_or("a URL-mode elicitation needs a \"url\"")?;
                    return check_elicitation_url(url);
                }
                Some(_) => return Err("an elicitation's mode is \"form\" or \"url\"".into()),
            }
            let schema = params.get("requestedSchema").ok_or("an elicitation needs a \"requestedSchema\"")?;
            if schema.get("type").and_then(Value::as_str) != Some("object")
                || !schema.get("properties").is_some_and(Value::is_object)
            {
                return Err("requestedSchema must be {\"type\": \"object\", \"properties\": {…}}".into());
            }
            Ok(())
        }
        SAMPLING => {
            if params.get("messages").and_then(Value::as_array).is_none_or(Vec::is_empty) {
                return Err("a sampling request needs \"messages\"".into());
            }
            if params.get("maxTokens").and_then(Value::as_u64).is_none_or(|n| n == 0) {
                return Err("a sampling request needs \"maxTokens\" above 0".into());
            }
            Ok(())
        }
        other => Err(format!(
            "{:?} is not a method a tool may ask ({ELICITATION}, {SAMPLING} or {ROOTS})",
            crate::pow::clip(other, 64)
        )),
    }
}

/// Whether `response` answers `request` as MCP says a client answers it,
/// and (for an accepted elicitation) the content satisfies the requested
/// schema. The error says what is wrong, for the caller.
#[cfg(feature = "schemas")]
pub fn check_response(request: &Value, response: &Value) -> Result<(), String> {
    let size = serde_json::to_vec(response).map_or(usize::MAX, |json| json.len());
    if size > MAX_RESPONSE_BYTES {
        return Err(format!("the answer is {size} bytes; at most {MAX_RESPONSE_BYTES}"));
    }
    let response = response.as_object().ok_or("the answer must be a JSON object")?;
    match request.get("method").and_then(Value::as_str) {
        Some(ELICITATION) => {
            let action = response.get("action").and_then(Value::as_str);
            match action {
                // Accepting a page says the user went there; what they did
                // there reaches the tool out of band, never through us.
                Some("accept") if is_url_elicitation(request) => match response.get("content") {
                    None => Ok(()),
                    Some(content) if content.as_object().is_some_and(Map::is_empty) => Ok(()),
                    Some(_) => Err("a URL-mode elicitation's answer carries no \"content\"".into()),
                },
                Some("accept") => {
                    let content =
                        response.get("content").ok_or("an accepted elicitation needs \"content\"")?;
                    let schema = request.pointer("/params/requestedSchema").cloned().unwrap_or(Value::Null);
                    crate::tool_schema::Schema::compile(&schema)
                        .and_then(|schema| schema.check(content))
                        .map_err(|why| format!("the content does not match the requested schema: {why}"))
                }
                Some("decline" | "cancel") => Ok(()),
                _ => {
                    Err("an elicitation's answer needs \"action\": \"accept\", \"decline\" or \"cancel\""
                        .into())
                }
            }
        }
        Some(SAMPLING) => {
            if response.get("role").and_then(Value::as_str) != Some("assistant") {
                return Err("a sampling answer needs \"role\": \"assistant\"".into());
            }
            if !response.get("content").is_some_and(|c| c.is_object() || c.is_array()) {
                return Err("a sampling answer needs \"content\"".into());
            }
            if response.get("model").and_then(Value::as_str).is_none() {
                return Err("a sampling answer needs \"model\"".into());
            }
            Ok(())
        }
        Some(ROOTS) => {
            let roots =
                response.get("roots").and_then(Value::as_array).ok_or("a roots answer needs \"roots\"")?;
            if roots.iter().all(|root| root.get("uri").and_then(Value::as_str).is_some()) {
                Ok(())
            } else {
                Err("each root needs a \"uri\"".into())
            }
        }
        _ => Err("the request is not one that can be answered".into()),
    }
}

/// The answers of a round as the next step reads them ([`INPUT_ENV`]):
/// key → the client's result, for the keys of `requests` only.
pub fn input_document(requests: &Map<String, Value>, answers: &BTreeMap<String, Value>) -> String {
    let document: Map<String, Value> =
        requests.keys().filter_map(|key| Some((key.clone(), answers.get(key)?.clone()))).collect();
    Value::Object(document).to_string()
}

/// The answers in `run`'s record that the frontend proved for this run
/// and key, parsed: a planted, moved or edited answer is not among them.
#[cfg(feature = "proofs")]
pub fn proven_answers(
    run: &crate::ToolRun,
    keys: &crate::ownership::OwnershipKeys,
) -> BTreeMap<String, Value> {
    let meta = &run.metadata;
    let id = [
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        meta.uid.as_deref().unwrap_or_default(),
    ];
    run.spec
        .input_responses
        .iter()
        .filter(|(key, answer)| keys.proves_answer(id, key, &answer.response, &answer.proof))
        .filter_map(|(key, answer)| Some((key.clone(), serde_json::from_str(&answer.response).ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn approval() -> Value {
        json!({"method": "elicitation/create", "params": {
            "mode": "form", "message": "Deploy build 42 to production?",
            "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]}}})
    }

    fn ask_text(requests: Value) -> String {
        format!("{ASK_PREFIX}\n{}", json!({"inputRequests": requests, "state": "build=42"}))
    }

    #[test]
    fn an_ordinary_result_is_not_an_ask() {
        assert_eq!(Ask::parse("{\"sum\": 3}", &[]), None);
        assert_eq!(Ask::parse("MCP_INPUT_REQUIREDX {}", &[]), None);
    }

    #[test]
    fn an_ask_reads_with_its_state() {
        let ask = Ask::parse(&ask_text(json!({"approve": approval()})), &[]).unwrap().unwrap();
        assert_eq!(ask.state, "build=42");
        assert_eq!(ask.input_requests.keys().collect::<Vec<_>>(), ["approve"]);
    }

    #[test]
    fn unusable_asks_say_why() {
        let reused = Ask::parse(&ask_text(json!({"approve": approval()})), &["approve".into()]).unwrap();
        assert!(reused.unwrap_err().contains("earlier round"));
        let bad_key = Ask::parse(&ask_text(json!({"../x": approval()})), &[]).unwrap();
        assert!(bad_key.unwrap_err().contains("request key"));
        let many: Map<String, Value> =
            (0..=MAX_REQUESTS_PER_ROUND).map(|i| (format!("k{i}"), approval())).collect();
        assert!(Ask::parse(&ask_text(Value::Object(many)), &[]).unwrap().unwrap_err().contains("at most"));
        let odd = json!({"method": "elicitation/create", "params": {"mode": "voice", "message": "m"}});
        assert!(
            Ask::parse(&ask_text(json!({"k": odd})), &[])
                .unwrap()
                .unwrap_err()
                .contains("\"form\" or \"url\"")
        );
        let other = json!({"method": "tools/call", "params": {}});
        assert!(
            Ask::parse(&ask_text(json!({"k": other})), &[]).unwrap().unwrap_err().contains("not a method")
        );
        assert!(Ask::parse("MCP_INPUT_REQUIRED not json", &[]).unwrap().is_err());
        let big = format!(
            "{ASK_PREFIX} {}",
            json!({"inputRequests": {"k": approval()}, "state": "x".repeat(MAX_STATE_BYTES + 1)})
        );
        assert!(Ask::parse(&big, &[]).unwrap().unwrap_err().contains("state"));
    }

    fn url_elicitation(url: &str) -> Value {
        json!({"method": "elicitation/create", "params": {
            "mode": "url", "message": "Sign in to your bank", "url": url, "elicitationId": "the-tools-own"}})
    }

    #[test]
    fn a_url_mode_elicitation_is_an_https_page_with_an_id_of_the_run_and_key() {
        let ask =
            Ask::parse(&ask_text(json!({"login": url_elicitation("https://bank.example/ok?x=1")})), &[])
                .unwrap()
                .unwrap()
                .with_elicitation_ids("uid-7");
        assert_eq!(
            ask.input_requests["login"]["params"]["elicitationId"], "uid-7.login",
            "the tool's id is replaced"
        );
        assert_eq!(ask.input_requests["login"]["params"]["url"], "https://bank.example/ok?x=1");
        let long = format!("https://a.example/{}", "x".repeat(MAX_ELICITATION_URL_BYTES));
        for (url, why) in [
            ("http://bank.example/", "https"),
            ("javascript:alert(1)", "https"),
            ("https://user:pw@bank.example/", "credentials"),
            ("https:///path", "no host"),
            ("https://bank.example/a b", "spaces"),
            (long.as_str(), "longer than"),
        ] {
            let refused = check_request(&url_elicitation(url)).unwrap_err();
            assert!(refused.contains(why), "{url}: {refused}");
        }
        let no_url = json!({"method": "elicitation/create", "params": {"mode": "url", "message": "m"}});
        assert!(check_request(&no_url).unwrap_err().contains("url"));
        let form = Ask::parse(&ask_text(json!({"approve": approval()})), &[]).unwrap().unwrap();
        assert_eq!(form.clone().with_elicitation_ids("uid-7"), form, "a form has no id to set");
    }

    #[cfg(feature = "schemas")]
    #[test]
    fn a_url_mode_answer_says_only_what_the_user_did() {
        let request = url_elicitation("https://bank.example/");
        assert_eq!(check_response(&request, &json!({"action": "accept"})), Ok(()));
        assert_eq!(check_response(&request, &json!({"action": "accept", "content": {}})), Ok(()));
        assert_eq!(check_response(&request, &json!({"action": "decline"})), Ok(()));
        let smuggled = check_response(&request, &json!({"action": "accept", "content": {"password": "x"}}));
        assert!(smuggled.unwrap_err().contains("no \"content\""));
        assert!(check_response(&request, &json!({"action": "maybe"})).is_err());
    }

    #[cfg(feature = "schemas")]
    #[test]
    fn answers_are_checked_against_what_was_asked() {
        let request = approval();
        assert_eq!(
            check_response(&request, &json!({"action": "accept", "content": {"approve": true}})),
            Ok(())
        );
        assert_eq!(check_response(&request, &json!({"action": "decline"})), Ok(()));
        let wrong = check_response(&request, &json!({"action": "accept", "content": {"approve": "yes"}}));
        assert!(wrong.unwrap_err().contains("requested schema"));
        assert!(check_response(&request, &json!({"action": "maybe"})).is_err());
        let huge =
            json!({"action": "accept", "content": {"approve": true, "x": "y".repeat(MAX_RESPONSE_BYTES)}});
        assert!(check_response(&request, &huge).unwrap_err().contains("bytes"));
        let sampling = json!({"method": "sampling/createMessage", "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 50}});
        assert_eq!(check_request(&sampling), Ok(()));
        let answer = json!({"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"});
        assert_eq!(check_response(&sampling, &answer), Ok(()));
        assert!(check_response(&sampling, &json!({"action": "accept"})).is_err());
    }

    #[cfg(feature = "proofs")]
    #[test]
    fn only_answers_the_frontend_proved_for_this_run_and_key_are_taken() {
        use crate::ToolRunSpec;
        use crate::ownership::OwnershipKeys;
        use crate::tool::ProvenResponse;
        let keys = OwnershipKeys::new(vec![7; 32], None).unwrap();
        let spec: ToolRunSpec = serde_json::from_value(json!({
            "tool": "t", "arguments": "{}", "jobTemplate": {}}))
        .unwrap();
        let mut run = crate::ToolRun::new("run", spec);
        run.metadata.namespace = Some("ns".into());
        run.metadata.uid = Some("uid-1".into());
        let answer = |key: &str, response: &str, uid: &str| ProvenResponse {
            response: response.into(),
            proof: keys.answer_proof(["ns", "run", uid], key, response),
        };
        let accept = r#"{"action":"accept","content":{"approve":true}}"#;
        run.spec.input_responses.insert("approve".into(), answer("approve", accept, "uid-1"));
        // Moved from another key, from a run of another uid, edited, forged.
        run.spec.input_responses.insert("moved".into(), answer("approve", accept, "uid-1"));
        run.spec.input_responses.insert("old-run".into(), answer("old-run", accept, "uid-0"));
        let mut edited = answer("edited", r#"{"action":"decline"}"#, "uid-1");
        edited.response = accept.into();
        run.spec.input_responses.insert("edited".into(), edited);
        run.spec
            .input_responses
            .insert("forged".into(), ProvenResponse { response: accept.into(), proof: "00".repeat(32) });
        let proven = proven_answers(&run, &keys);
        assert_eq!(proven.keys().collect::<Vec<_>>(), ["approve"]);
        assert_eq!(proven["approve"], json!({"action": "accept", "content": {"approve": true}}));
    }

    #[test]
    fn the_next_step_reads_only_this_rounds_answers() {
        let requests: Map<String, Value> = [("a".to_string(), approval())].into_iter().collect();
        let answers: BTreeMap<String, Value> =
            [("a".to_string(), json!({"action": "decline"})), ("old".to_string(), json!(1))].into();
        assert_eq!(input_document(&requests, &answers), r#"{"a":{"action":"decline"}}"#);
    }
}
