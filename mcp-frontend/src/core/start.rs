//! Starting a workflow: the argument check, the per-caller limit, the create,
//! and the idempotent retry that finds the workflow a key already started.

use mining_api::MiningWorkflow;
use mining_api::Work as _;
use mining_api::trace::TraceParent;
use rmcp::model::JsonObject;
use tracing::Instrument as _;

use super::{Answer, Core};
use crate::cache::Entry;
use crate::ids::{Caller, WorkId};
use crate::kube_calls::{self, Created};
use crate::metrics::ReasonLabels;
use crate::quota;
use crate::tools::{START_MINING, StartMiningArgs, StartRequest, parse_args};

/// How many ids an idempotency key may stand for: the first unless objects
/// the frontend did not make took it. Each kind's start at its own
/// [`super::Registered::FIRST_ATTEMPT`].
pub(crate) const IDEMPOTENT_ATTEMPTS: u8 = 4;

/// What a face adds to a start besides the tool's arguments.
#[derive(Debug, Default, Clone)]
pub struct StartOptions<'a> {
    /// Annotations kept on the workflow (e.g. a 2025-11-25 progress token).
    pub annotations: &'a [(&'a str, String)],
    /// How long to keep the workflow after it finishes (else the operator's default).
    pub retention_seconds: Option<i64>,
    /// The caller's trace context, from the request's `_meta` or HTTP header.
    pub trace: Option<TraceParent>,
    /// A defined tool's call: the key from `_meta` that makes a retry find
    /// the run the first call made ([`IDEMPOTENCY_META_KEY`]); `start_mining`
    /// takes its key as an argument.
    pub idempotency_key: Option<&'a str>,
}

/// The `_meta` key of a tool call's idempotency key (a defined tool's
/// arguments belong to its author's schema, so the key cannot be one).
pub const IDEMPOTENCY_META_KEY: &str = "mining-operator.dev/idempotency-key";

/// A workflow `start` created or found, with the checked request.
pub struct Started {
    pub id: WorkId,
    pub workflow: Box<MiningWorkflow>,
    pub request: StartRequest,
}

impl Core {
    /// Checks `start_mining`'s arguments and creates its workflow (or finds
    /// the one an idempotency key already started). The error is the answer.
    ///
    /// The call is one span of the caller's trace (continued from
    /// `options.trace`, else a new one); the workflow keeps that span's
    /// traceparent, so the operator and the block Jobs join the same trace.
    pub async fn start(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
        options: StartOptions<'_>,
    ) -> Result<Started, Answer> {
        let span = tracing::info_span!("start_mining", trace_id = tracing::field::Empty);
        if let Some(parent) = &options.trace {
            telemetry::continue_trace(&span, parent);
        }
        let mut annotations = options.annotations.to_vec();
        if let Some(own) = telemetry::traceparent_of(&span) {
            span.record("trace_id", own.trace_id_hex());
            annotations.push((mining_api::annotations::TRACEPARENT, own.to_string()));
        }
        self.start_traced(caller, arguments, &annotations, options.retention_seconds).instrument(span).await
    }

    async fn start_traced(
        &self,
        caller: &Caller,
        arguments: Option<JsonObject>,
        annotations: &[(&str, String)],
        retention_seconds: Option<i64>,
    ) -> Result<Started, Answer> {
        let limits = &self.limits;
        let mut request = parse_args::<StartMiningArgs>(limits, START_MINING, arguments)
            .and_then(|args| limits.start_request(args))
            .map_err(Answer::InvalidArguments)?;
        request.spec.ttl_seconds_after_finished = retention_seconds;
        let (id, workflow) = match &request.idempotency_key {
            Some(key) => {
                let request = &request;
                let create =
                    move |id: WorkId| async move { self.create(caller, &id, request, annotations).await };
                self.start_idempotent::<MiningWorkflow, _>(caller, key, create).await?
            }
            None => {
                let id = WorkId::random(&self.keys, caller)
                    .map_err(|err| Answer::Refused(format!("no random source for a workflow id: {err}")))?;
                match self.create(caller, &id, &request, annotations).await? {
                    Created::New(workflow) => (id, workflow),
                    // Only an 80-bit collision gets here; never hand over another workflow.
                    Created::Existing(_) => {
                        return Err(Answer::Refused("the new workflow's id is taken; try again".into()));
                    }
                }
            }
        };
        if let Some(key) = &request.idempotency_key
            && workflow.request() != request.spec.proven()
        {
            let differing = mining_api::differing_fields(&workflow.request(), &request.spec.proven());
            return Err(Answer::InvalidArguments(format!(
                "idempotency_key {key:?} already started workflow {id} with other arguments: {}; use a new \
                 key to mine with these",
                differing.join(", ")
            )));
        }
        Ok(Started { id, workflow, request })
    }

    /// The work (of any kind) an idempotency key started, or new work made
    /// by `create`. Its ids are tried in order: one of the caller's (with
    /// the frontend's proof) is the retry's; one taken by an object the
    /// frontend did not make is skipped, so no one can squat a caller's id
    /// and hand it their object. Each kind's first attempt keeps its ids apart.
    pub(crate) async fn start_idempotent<
        K: super::Registered,
        F: Future<Output = Result<Created<K>, Answer>>,
    >(
        &self,
        caller: &Caller,
        key: &str,
        mut create: impl FnMut(WorkId) -> F,
    ) -> Result<(WorkId, Box<K>), Answer> {
        let (cache, first_attempt) = (self.homes::<K>().current.cache, K::FIRST_ATTEMPT);
        // Per attempt, the id under each key: current first.
        let attempts: Vec<Vec<WorkId>> = (first_attempt..first_attempt + IDEMPOTENT_ATTEMPTS)
            .map(|attempt| WorkId::for_idempotency_key(&self.keys, caller, key, attempt))
            .collect();
        // A retry finds its work without counting against the limit,
        // under the current key or a rotation's previous one.
        for id in attempts.iter().flatten() {
            if let Entry::Found(work) = cache.get(id.as_str())
                && self.owns(&*work, caller)
            {
                return Ok((id.clone(), work));
            }
        }
        // New work takes the current key's id of the first free attempt.
        for id in attempts.iter().filter_map(|ids| ids.first()) {
            if let Entry::Found(_) = cache.get(id.as_str()) {
                continue; // taken by an object that is not the caller's
            }
            match create(id.clone()).await? {
                Created::New(work) => return Ok((id.clone(), work)),
                // Two replicas raced on the same retry: the winner's is the caller's too.
                Created::Existing(work) if self.owns(&*work, caller) => return Ok((id.clone(), work)),
                Created::Existing(_) => {
                    tracing::warn!(id = %id, kind = K::NOUN, caller = %caller.name, "an idempotent id is taken by an object the frontend did not make");
                }
            }
        }
        Err(Answer::Refused(format!(
            "every id for idempotency_key {key:?} is taken by objects this server did not create; use another key"
        )))
    }

    /// A place for the work `id` (of any kind) among the caller's quotas
    /// (and a tool's own limit per caller), decided in the caller's ledger
    /// under its write precondition, so it is exact under bursts and across
    /// replicas. The refusal is the answer.
    pub(crate) async fn reserve_place(
        &self,
        caller: &Caller,
        id: &WorkId,
        tool_limit: Option<quota::ToolLimit<'_>>,
    ) -> Result<(), Answer> {
        let ledgers = quota::Ledgers { ledgers: &self.ledgers, keys: &self.keys, quotas: self.quotas };
        let work = super::held::CallersWork { core: self, caller };
        let reserved =
            self.api_call("quota", quota::reserve(&ledgers, caller, id.as_str(), tool_limit, &work)).await;
        reserved.map_err(|refusal| {
            self.metrics.starts_refused.get_or_create(&ReasonLabels { reason: refusal.metric_label() }).inc();
            tracing::info!(caller = %caller.name, quota = refusal.metric_label(), "start refused by a quota");
            Answer::Refused(refusal.to_string())
        })
    }

    async fn create(
        &self,
        caller: &Caller,
        id: &WorkId,
        request: &StartRequest,
        annotations: &[(&str, String)],
    ) -> Result<Created<MiningWorkflow>, Answer> {
        self.reserve_place(caller, id, None).await?;
        let built = kube_calls::build_workflow(&self.keys, &self.namespace, id, caller, request, annotations);
        match self
            .api_call("create", kube_calls::create(self.homes::<MiningWorkflow>().current.api, &built))
            .await
        {
            Ok(created) => {
                if let Created::New(_) = &created {
                    tracing::info!(
                        workflow = %id,
                        caller = %caller.name,
                        difficulty = request.spec.difficulty,
                        blocks = request.spec.blocks,
                        parallelism = request.spec.parallelism,
                        "mining started"
                    );
                }
                Ok(created)
            }
            Err(err) => {
                self.count_api_error("create");
                tracing::warn!(workflow = %id, error = %err, "creating a workflow failed");
                Err(Answer::Refused(format!("could not start mining: {err}; nothing was created, try again")))
            }
        }
    }
}
