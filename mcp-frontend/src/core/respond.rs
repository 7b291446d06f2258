//! Answering what a tool run asks (`tasks/update`, `respond_tool_run`): the
//! caller's answers, each checked against what was asked, written into the
//! run with a proof only this frontend can make. The operator takes only
//! answers whose proof verifies, so one written by anyone else is not taken.

use mining_api::tool_input::{MAX_ANSWERS, check_response};
use mining_api::{ToolRun, ToolRunPhase};
use serde_json::{Map, Value, json};

use super::{Core, View};
use crate::ids::Caller;

/// What came of answering.
pub enum Responded {
    /// The answers to outstanding requests are recorded (`recorded` keys;
    /// `ignored` were not outstanding: unknown or answered before).
    Recorded { run: Box<ToolRun>, recorded: Vec<String>, ignored: Vec<String> },
    /// The run does not wait for input (now): nothing was written.
    NotWaiting(Box<ToolRun>),
}

/// Why nothing was recorded.
pub enum RespondError {
    /// No run of this caller's by that id (all alike).
    NotFound,
    /// An answer the caller can fix; the text says which and why.
    Invalid(String),
    /// The API server could not be asked.
    Unavailable(String),
    /// A run of a restricted tool the caller is not granted (any longer).
    NotGranted(String),
}

impl Core {
    /// Records the caller's `responses` (key → the client's result) to the
    /// run `id_text`. Unknown and already answered keys are ignored, as the
    /// Tasks extension says; an answer that does not fit its request is
    /// refused before anything is written.
    pub async fn respond(
        &self,
        caller: &Caller,
        id_text: &str,
        responses: &Map<String, Value>,
    ) -> Result<Responded, RespondError> {
        if responses.len() > MAX_ANSWERS {
            return Err(RespondError::Invalid(format!(
                "{} answers at once; a run asks at most {MAX_ANSWERS} things in its life",
                responses.len()
            )));
        }
        let mut view = self.find::<ToolRun>(caller, id_text).await.map_err(RespondError::Unavailable)?;
        // The cache may lag: a conflict means the run changed since, and the
        // answers are decided again on the version just read.
        for fresh_read in [false, true] {
            let run = match view {
                View::Found(run) => run,
                View::NotGranted(why) => return Err(RespondError::NotGranted(why)),
                _ => return Err(RespondError::NotFound),
            };
            if run.phase() != ToolRunPhase::InputRequired {
                return Ok(Responded::NotWaiting(run));
            }
            let (patch, recorded, ignored) = self.answers_patch(&run, responses)?;
            if recorded.is_empty() {
                return Ok(Responded::Recorded { run, recorded, ignored });
            }
            let name = run.metadata.name.clone().unwrap_or_default();
            let api = self.homes::<ToolRun>().api_of(&run);
            match self.api_call("patch", crate::kube_calls::record_answers(api, &name, patch)).await {
                Ok(patched) => {
                    tracing::info!(run = %name, caller = %caller.name, keys = ?recorded, "answers recorded");
                    return Ok(Responded::Recorded { run: Box::new(patched), recorded, ignored });
                }
                Err(err) if err.is_conflict() && !fresh_read => {
                    view = self.read_fresh(caller, api, &name).await.map_err(RespondError::Unavailable)?;
                }
                Err(err) => {
                    self.count_api_error("patch");
                    return Err(RespondError::Unavailable(format!("could not record the answers: {err}")));
                }
            }
        }
        Err(RespondError::Unavailable(
            "could not record the answers: the tool run kept changing; try again".into(),
        ))
    }

    /// The merge patch recording each answer to an outstanding request
    /// (with its proof), on the version `run` was read at, and the keys
    /// recorded and ignored (pure but for the key).
    fn answers_patch(
        &self,
        run: &ToolRun,
        responses: &Map<String, Value>,
    ) -> Result<(Value, Vec<String>, Vec<String>), RespondError> {
        let requests = run.status.as_ref().and_then(|s| s.input_requests.clone()).unwrap_or_default();
        let answered = mining_api::tool_input::proven_answers(run, &self.keys);
        let meta = &run.metadata;
        let id = [
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
            meta.uid.as_deref().unwrap_or_default(),
        ];
        let (mut entries, mut recorded, mut ignored) = (Map::new(), Vec::new(), Vec::new());
        for (key, response) in responses {
            let Some(request) = requests.get(key).filter(|_| !answered.contains_key(key)) else {
                ignored.push(key.clone());
                continue;
            };
            check_response(request, response).map_err(|why| {
                RespondError::Invalid(format!("the answer to {key:?} cannot be taken: {why}"))
            })?;
            let text = response.to_string();
            let proof = self.keys.answer_proof(id, key, &text);
            entries.insert(key.clone(), json!({"response": text, "proof": proof}));
            recorded.push(key.clone());
        }
        let patch = json!({
            "metadata": {"resourceVersion": meta.resource_version},
            "spec": {"inputResponses": entries},
        });
        Ok((patch, recorded, ignored))
    }
}
