//! Who may call a defined tool, and what a tool learns of who called it.
//!
//! **Restricted tools.** An `McpTool` with `restricted: true` (or every tool,
//! when the frontend runs with `--tool-access restricted`) is offered and
//! callable only to callers granted it by name: in `kubernetes` mode the RBAC
//! verb [`CALL_VERB`] on [`TOOLS_RESOURCE`] named the tool, in the workflow
//! namespace (`kubectl create role … --verb=call --resource=mcptools.GROUP
//! --resource-name=deploy`); in `oidc` and `tokens` mode a subject or group
//! listed for the tool in the frontend's `--tool-grants` file. The same grant
//! is checked again on every later call about one of its runs (a task's
//! `get`/`result`/`update`/`cancel`, `get_tool_result`, `respond_tool_run`,
//! `cancel_tool_run`), so a revoked grant stops a caller from steering or
//! reading the work (an admin can still cancel it).
//!
//! **The caller's identity.** A tool that sets `callerIdentity` is told who
//! called each run: [`CALLER_ENV`] holds the authenticated subject and
//! [`CALLER_CLAIMS_ENV`] a JSON object of the claims it named (from the
//! verified OIDC token; in `kubernetes` mode `uid` and `groups` of the
//! TokenReview). The frontend records them in the run
//! (`spec.caller`, bound by the run's proof, so nobody who may edit runs can
//! change who called); the operator hands them over through the run's
//! arguments Secret, as it does the arguments. A tool that did not opt in
//! gets neither, and no template can set either name.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The RBAC verb a caller needs on `mcptools/NAME` to call a restricted tool.
pub const CALL_VERB: &str = "call";
/// The resource of that permission.
pub const TOOLS_RESOURCE: &str = "mcptools";

/// The environment variable holding the caller's subject.
pub const CALLER_ENV: &str = "MCP_CALLER";
/// The environment variable holding the selected claims (a JSON object).
pub const CALLER_CLAIMS_ENV: &str = "MCP_CALLER_CLAIMS";
/// Their keys in the run's arguments Secret.
pub const CALLER_KEY: &str = "caller";
pub const CALLER_CLAIMS_KEY: &str = "caller-claims";

/// Most claims a tool may ask for.
pub const MAX_CLAIMS: usize = 8;
/// Longest claim name.
pub const MAX_CLAIM_NAME_BYTES: usize = 64;
/// Longest subject recorded (the OIDC caller claim's bound, with the issuer).
pub const MAX_SUBJECT_BYTES: usize = 1024;
/// Largest set of claims recorded (JSON bytes); a call whose claims are
/// larger is refused, saying so.
pub const MAX_CLAIMS_BYTES: usize = 2048;

/// An `McpTool`'s opt-in to learn who called.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallerIdentity {
    /// Claims to hand over besides the subject, by name (`email`, `groups`,
    /// …; in `kubernetes` mode `uid` and `groups`). A claim the caller's
    /// credential lacks is left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_CLAIMS), inner(length(min = 1, max = MAX_CLAIM_NAME_BYTES)))]
    pub claims: Vec<String>,
}

impl CallerIdentity {
    /// Why this opt-in cannot be honoured, if it cannot.
    pub fn problem(&self) -> Option<String> {
        if self.claims.len() > MAX_CLAIMS {
            return Some(format!("callerIdentity.claims names more than {MAX_CLAIMS} claims"));
        }
        self.claims
            .iter()
            .find(|c| c.is_empty() || c.len() > MAX_CLAIM_NAME_BYTES)
            .map(|_| format!("callerIdentity.claims: each claim name is 1 to {MAX_CLAIM_NAME_BYTES} bytes"))
    }
}

/// Who called a run, as the frontend recorded it for a tool that opted in.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCaller {
    /// The authenticated subject (`kubernetes`: the username; `oidc`:
    /// `ISSUER#CLAIM`; `tokens`: the name in the tokens file).
    #[schemars(length(min = 1, max = MAX_SUBJECT_BYTES))]
    pub subject: String,
    /// The selected claims, as one JSON object (absent when none were asked
    /// for or the credential had none of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_CLAIMS_BYTES))]
    pub claims: Option<String>,
}

impl ToolCaller {
    /// The record of `subject` with the claims `wanted` picks from
    /// `available`; `Err` says which bound it exceeds.
    pub fn of(
        subject: &str,
        available: &Map<String, Value>,
        wanted: &CallerIdentity,
    ) -> Result<Self, String> {
        if subject.is_empty() || subject.len() > MAX_SUBJECT_BYTES {
            return Err(format!(
                "the caller's subject must be 1 to {MAX_SUBJECT_BYTES} bytes to be handed over"
            ));
        }
        let picked: Map<String, Value> = wanted
            .claims
            .iter()
            .filter_map(|name| available.get(name).map(|value| (name.clone(), value.clone())))
            .collect();
        let claims = (!picked.is_empty()).then(|| Value::Object(picked).to_string());
        if let Some(text) = &claims
            && text.len() > MAX_CLAIMS_BYTES
        {
            return Err(format!(
                "the claims this tool asks for are {} bytes of JSON; at most {MAX_CLAIMS_BYTES} are handed over",
                text.len()
            ));
        }
        Ok(Self { subject: subject.to_string(), claims })
    }

    /// Whether the record is within its bounds (the operator checks it again:
    /// anyone who may write runs could have written a larger one).
    pub fn problem(&self) -> Option<String> {
        if self.subject.is_empty() || self.subject.len() > MAX_SUBJECT_BYTES {
            return Some(format!("spec.caller.subject must be 1 to {MAX_SUBJECT_BYTES} bytes"));
        }
        match &self.claims {
            Some(text) if text.len() > MAX_CLAIMS_BYTES => {
                Some(format!("spec.caller.claims is larger than {MAX_CLAIMS_BYTES} bytes"))
            }
            Some(text) if !serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_object()) => {
                Some("spec.caller.claims is not a JSON object".into())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn only_the_claims_asked_for_are_handed_over() {
        let available = claims(json!({"email": "a@example.com", "groups": ["ops"], "secret": "x"}));
        let wanted = CallerIdentity { claims: vec!["email".into(), "groups".into(), "missing".into()] };
        let record = ToolCaller::of("issuer#alice", &available, &wanted).unwrap();
        assert_eq!(record.subject, "issuer#alice");
        let handed: Value = serde_json::from_str(record.claims.as_deref().unwrap()).unwrap();
        assert_eq!(handed, json!({"email": "a@example.com", "groups": ["ops"]}));
        assert_eq!(record.problem(), None);
        let none = ToolCaller::of("bob", &available, &CallerIdentity::default()).unwrap();
        assert_eq!(none.claims, None, "no claims unless asked for");
    }

    #[test]
    fn records_beyond_their_bounds_are_refused() {
        let huge = claims(json!({"blob": "x".repeat(MAX_CLAIMS_BYTES)}));
        let wanted = CallerIdentity { claims: vec!["blob".into()] };
        let why = ToolCaller::of("alice", &huge, &wanted).unwrap_err();
        assert!(why.contains(&MAX_CLAIMS_BYTES.to_string()), "{why}");
        assert!(ToolCaller::of("", &Map::new(), &wanted).is_err());
        let planted = ToolCaller { subject: "alice".into(), claims: Some("[1]".into()) };
        assert!(planted.problem().unwrap().contains("not a JSON object"));
        let too_many = CallerIdentity { claims: (0..=MAX_CLAIMS).map(|i| format!("c{i}")).collect() };
        assert!(too_many.problem().is_some());
        assert!(CallerIdentity { claims: vec![String::new()] }.problem().is_some());
    }
}
