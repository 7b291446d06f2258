//! Starting a workflow: the argument check, the per-caller limit, the create,
//! and the idempotent retry that finds the workflow a key already started.

use mining_api::{MiningWorkflow, MiningWorkflowSpec};
use rmcp::model::JsonObject;

use super::{Answer, Core, belongs_to};
use crate::cache::Cached;
use crate::ids::{Caller, WorkflowId};
use crate::tools::{START_MINING, StartMiningArgs, StartRequest, parse_args};
use crate::workflows::{self, Created};

/// A workflow `start` created or found, with the checked request.
pub struct Started {
    pub id: WorkflowId,
    pub workflow: Box<MiningWorkflow>,
    pub request: StartRequest,
}

/// Whether an existing workflow does the work `request` asks for: every
/// argument that shapes the work must match, or a retry with the same key
/// would silently get other work than it asked for.
pub fn same_work(spec: &MiningWorkflowSpec, request: &StartRequest) -> bool {
    (spec.difficulty, spec.blocks, spec.parallelism)
        == (request.difficulty, request.blocks, request.parallelism)
}

impl Core {
    fn running_count(&self, caller: &Caller) -> usize {
        self.cache
            .list_for(&caller.label)
            .iter()
            .filter(|cached| matches!(cached, Cached::Found(workflow) if !workflow.is_finished()))
            .count()
    }

    /// Checks `start_mining`'s arguments and creates its workflow (or finds
    /// the one an idempotency key already started). The error is the answer.
    pub async fn start(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
        annotations: &[(&str, String)],
    ) -> Result<Started, Answer> {
        let limits = &self.limits;
        let request = parse_args::<StartMiningArgs>(limits, START_MINING, arguments)
            .and_then(|args| limits.start_request(args))
            .map_err(Answer::InvalidArguments)?;
        let id = match &request.idempotency_key {
            Some(key) => WorkflowId::for_idempotency_key(caller, key),
            None => WorkflowId::random()
                .map_err(|err| Answer::Refused(format!("no random source for a workflow id: {err}")))?,
        };
        // A retry finds its workflow without counting against the limit.
        let existing = match self.cache.get(id.as_str()) {
            Cached::Found(workflow) if belongs_to(&workflow, caller) => Some(workflow),
            _ => None,
        };
        let workflow = match existing {
            Some(workflow) => workflow,
            None => self.create(caller, &id, &request, annotations).await?,
        };
        if !belongs_to(&workflow, caller) {
            // The id derives from the caller, so only a hash collision gets here.
            return Err(Answer::Refused(
                "the workflow id for this idempotency_key is taken; use another key".into(),
            ));
        }
        if let Some(key) = &request.idempotency_key
            && !same_work(&workflow.spec, &request)
        {
            let spec = &workflow.spec;
            return Err(Answer::InvalidArguments(format!(
                "idempotency_key {key:?} already started workflow {id} with difficulty {}, blocks {} and \
                 parallelism {}; use a new key to mine with other arguments",
                spec.difficulty, spec.blocks, spec.parallelism
            )));
        }
        Ok(Started { id, workflow, request })
    }

    async fn create(
        &self,
        caller: &Caller,
        id: &WorkflowId,
        request: &StartRequest,
        annotations: &[(&str, String)],
    ) -> Result<Box<MiningWorkflow>, Answer> {
        let running = self.running_count(caller);
        let limit = self.max_running_per_caller as usize;
        if running >= limit {
            return Err(Answer::Refused(format!(
                "you already have {running} unfinished mining workflows (the limit is {limit}); \
                 wait for them with get_mining_result or stop some with cancel_mining"
            )));
        }
        let built = workflows::build_workflow(id, caller, request, annotations);
        match workflows::create(&self.api, &built).await {
            Ok(Created::New(workflow)) => {
                tracing::info!(
                    workflow = %id,
                    caller = %caller.name,
                    difficulty = request.difficulty,
                    blocks = request.blocks,
                    parallelism = request.parallelism,
                    "mining started"
                );
                Ok(workflow)
            }
            Ok(Created::Existing(workflow)) if request.idempotency_key.is_some() => Ok(workflow),
            // Only a 130-bit collision gets here; never hand over another workflow.
            Ok(Created::Existing(_)) => {
                Err(Answer::Refused("the new workflow's id is taken; try again".into()))
            }
            Err(err) => {
                self.count_api_error("create");
                tracing::warn!(workflow = %id, error = %err, "creating a workflow failed");
                Err(Answer::Refused(format!("could not start mining: {err}; nothing was created, try again")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(difficulty: u32, blocks: u32, parallelism: u32) -> StartRequest {
        StartRequest { difficulty, blocks, parallelism, wait_seconds: 5, idempotency_key: Some("k".into()) }
    }

    fn spec() -> MiningWorkflowSpec {
        MiningWorkflowSpec { blocks: 3, parallelism: 2, ..MiningWorkflowSpec::new(10) }
    }

    #[test]
    fn the_same_arguments_are_the_same_work_whatever_the_wait() {
        let mut asked = request(10, 3, 2);
        assert!(same_work(&spec(), &asked));
        asked.wait_seconds = 0;
        assert!(same_work(&spec(), &asked), "how long to wait does not shape the work");
    }

    #[test]
    fn another_difficulty_is_other_work() {
        assert!(!same_work(&spec(), &request(11, 3, 2)));
    }

    #[test]
    fn another_chain_length_is_other_work() {
        assert!(!same_work(&spec(), &request(10, 4, 2)));
    }

    #[test]
    fn another_parallelism_is_other_work() {
        assert!(!same_work(&spec(), &request(10, 3, 1)));
    }
}
