//! A workflow and a tool run as one thing to show: the two kinds are
//! converted at the edge into [`WorkView`], and everything that prints
//! (tables, `show`, the progress bar) is written once against it.

use k8s_openapi::jiff::Timestamp;
use mining_api::tool_outputs::ToolOutput;
use mining_api::{MiningWorkflow, ToolRun, Work};
use serde_json::{Map, Value};

/// Which kind a [`WorkView`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Workflow,
    ToolRun,
}

impl Kind {
    /// The kind as kubectl names it (`kubectl get mwf/NAME`).
    pub fn short(self) -> &'static str {
        match self {
            Self::Workflow => "mwf",
            Self::ToolRun => "toolrun",
        }
    }

    /// The kind's `kind:` on the wire.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Workflow => "MiningWorkflow",
            Self::ToolRun => "ToolRun",
        }
    }

    /// The label the operator puts on this kind's Jobs and Pods.
    pub fn job_label(self) -> &'static str {
        match self {
            Self::Workflow => mining_api::labels::WORKFLOW,
            Self::ToolRun => mining_api::labels::TOOL_RUN,
        }
    }

    /// What its Pods depend on besides their own files: what the operator
    /// lets admission add beside them ([`mining_api::provenance`]).
    pub fn reads(self) -> mining_api::admitted::Reads {
        match self {
            Self::Workflow => MiningWorkflow::READS,
            Self::ToolRun => ToolRun::READS,
        }
    }
}

/// One question a waiting run put to its caller.
#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    pub key: String,
    /// `elicitation` or `sampling`.
    pub method: String,
    /// What a person is asked (an elicitation's message, a sampling
    /// request's last text), clipped to one line.
    pub text: String,
}

/// A workflow or a tool run, as the CLI shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkView {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// What it does: "difficulty 20 × 4 blocks", or the tool's name.
    pub what: String,
    /// The phase as the status spells it (`Mining`, `InputRequired`, …).
    pub phase: String,
    pub finished: bool,
    pub succeeded: bool,
    /// Parts done and in all (blocks of a workflow, Job parts of a run).
    pub done: u32,
    pub total: u32,
    pub created: Option<Timestamp>,
    pub message: Option<String>,
    /// Set when a run is a step past its first.
    pub step: Option<u32>,
    pub cancel_requested: bool,
    pub questions: Vec<Question>,
    pub waiting_since: Option<Timestamp>,
    pub outputs: Vec<ToolOutput>,
    /// A run's result (its termination message) or a workflow's last hash.
    pub result: Option<String>,
}

/// "2/4" as (2, 4); anything else as nothing.
fn parse_progress(progress: Option<&str>) -> Option<(u32, u32)> {
    let (done, total) = progress?.split_once('/')?;
    Some((done.trim().parse().ok()?, total.trim().parse().ok()?))
}

fn base(kind: Kind, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> WorkView {
    WorkView {
        kind,
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        what: String::new(),
        phase: String::new(),
        finished: false,
        succeeded: false,
        done: 0,
        total: 1,
        created: meta.creation_timestamp.as_ref().map(|t| t.0),
        message: None,
        step: None,
        cancel_requested: false,
        questions: Vec::new(),
        waiting_since: None,
        outputs: Vec::new(),
        result: None,
    }
}

impl From<&MiningWorkflow> for WorkView {
    fn from(workflow: &MiningWorkflow) -> Self {
        let total = workflow.total_blocks();
        let blocks = if total == 1 { "block" } else { "blocks" };
        WorkView {
            what: format!("difficulty {} × {total} {blocks}", workflow.mined_difficulty()),
            phase: workflow.phase().as_str().to_string(),
            finished: workflow.is_finished(),
            succeeded: workflow.lifecycle() == mining_api::Lifecycle::Succeeded,
            done: workflow.mined_blocks().len() as u32,
            total,
            message: whole_message(workflow),
            cancel_requested: workflow.cancel_requested(),
            result: workflow.mined_blocks().last().map(|block| block.hash.clone()),
            ..base(Kind::Workflow, &workflow.metadata)
        }
    }
}

/// A workflow's message whole: `status.message` is a short column, clipped
/// with '…'; the condition it was clipped from (Ready, else Mining) has it all.
fn whole_message(workflow: &MiningWorkflow) -> Option<String> {
    let short = workflow.status.as_ref()?.message.clone()?;
    let Some(start) = short.strip_suffix('…') else { return Some(short) };
    let conditions = workflow.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let whole = conditions.iter().find(|c| c.message.starts_with(start) && c.message.len() > start.len());
    Some(whole.map_or(short.clone(), |c| c.message.clone()))
}

impl From<&ToolRun> for WorkView {
    fn from(run: &ToolRun) -> Self {
        let status = run.status.as_ref();
        let (done, total) = parse_progress(status.and_then(|s| s.progress.as_deref()))
            .unwrap_or((0, run.parts().max(1) as u32));
        WorkView {
            what: run.spec.tool.clone(),
            phase: run.phase().as_str().to_string(),
            finished: run.is_finished(),
            succeeded: run.lifecycle() == mining_api::Lifecycle::Succeeded,
            done,
            total,
            message: status.and_then(|s| s.message.clone()),
            step: Some(run.step()).filter(|step| *step > 0),
            cancel_requested: run.cancel_requested(),
            questions: status.and_then(|s| s.input_requests.as_ref()).map(questions).unwrap_or_default(),
            waiting_since: status.and_then(|s| s.waiting_since.as_ref()).map(|t| t.0),
            outputs: status.map(|s| s.outputs.clone()).unwrap_or_default(),
            result: status.and_then(|s| s.result.clone()),
            ..base(Kind::ToolRun, &run.metadata)
        }
    }
}

/// Longest question text shown on one line.
const MAX_QUESTION_CHARS: usize = 200;

/// The questions of a run's `inputRequests`, in key order.
fn questions(requests: &Map<String, Value>) -> Vec<Question> {
    requests
        .iter()
        .map(|(key, request)| {
            let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
            let params = request.get("params");
            let text = match method {
                mining_api::tool_input::SAMPLING => params
                    .and_then(|p| p.get("messages"))
                    .and_then(Value::as_array)
                    .and_then(|messages| messages.last())
                    .and_then(|message| message.pointer("/content/text"))
                    .and_then(Value::as_str),
                _ => params.and_then(|p| p.get("message")).and_then(Value::as_str),
            };
            Question {
                key: key.clone(),
                method: method.split('/').next().unwrap_or_default().to_string(),
                text: one_line(text.unwrap_or_default(), MAX_QUESTION_CHARS),
            }
        })
        .collect()
}

/// `text` on one line (control characters as spaces: a tool wrote it, and
/// it must not move the terminal's cursor), at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let mut line: String =
        text.chars().map(|c| if c.is_control() { ' ' } else { c }).take(max.saturating_add(1)).collect();
    if line.chars().count() > max {
        line = line.chars().take(max.saturating_sub(1)).collect();
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use mining_api::testing::tool_run;
    use mining_api::{MiningWorkflowSpec, ToolRunPhase, ToolRunStatus};
    use serde_json::json;

    #[test]
    fn a_workflow_shows_its_blocks_as_progress() {
        let mut workflow =
            MiningWorkflow::new("w", MiningWorkflowSpec { blocks: 4, ..MiningWorkflowSpec::new(12) });
        workflow.metadata.namespace = Some("team".into());
        let view = WorkView::from(&workflow);
        assert_eq!(
            (view.kind, view.what.as_str(), view.phase.as_str(), view.done, view.total, view.finished),
            (Kind::Workflow, "difficulty 12 × 4 blocks", "Pending", 0, 4, false)
        );
    }

    #[test]
    fn a_waiting_run_shows_each_question_on_one_line() {
        let mut run = tool_run("r", "deploy-gate");
        run.status = Some(ToolRunStatus {
            phase: Some(ToolRunPhase::InputRequired),
            progress: Some("0/1".into()),
            step: Some(1),
            input_requests: json!({
                "approve": {"method": "elicitation/create", "params": {"message": "Deploy api\n1.2?",
                    "requestedSchema": {"type": "object", "properties": {}}}},
                "note": {"method": "sampling/createMessage", "params": {"maxTokens": 5,
                    "messages": [{"role": "user", "content": {"type": "text", "text": "Write a note."}}]}},
            })
            .as_object()
            .cloned(),
            ..Default::default()
        });
        let view = WorkView::from(&run);
        assert_eq!((view.phase.as_str(), view.step, view.finished), ("InputRequired", Some(1), false));
        assert_eq!(
            view.questions,
            [
                Question {
                    key: "approve".into(),
                    method: "elicitation".into(),
                    text: "Deploy api 1.2?".into()
                },
                Question { key: "note".into(), method: "sampling".into(), text: "Write a note.".into() },
            ]
        );
    }

    #[test]
    fn a_workflows_clipped_message_is_shown_whole_from_its_condition() {
        let mut workflow = MiningWorkflow::new("w", MiningWorkflowSpec::new(12));
        let whole = "block 1: the cluster refuses its Pod: admission webhook \"deny\" denied the request";
        workflow.status = Some(
            serde_json::from_value(json!({
                "message": "block 1: the cluster refuses its Pod: adm…",
                "conditions": [{"type": "Ready", "status": "False", "reason": "CannotStart", "message": whole,
                                "lastTransitionTime": "2026-11-28T00:00:00Z"}],
            }))
            .unwrap(),
        );
        assert_eq!(WorkView::from(&workflow).message.as_deref(), Some(whole));
        workflow.status.as_mut().unwrap().message = Some("mining block 1/3".into());
        assert_eq!(
            WorkView::from(&workflow).message.as_deref(),
            Some("mining block 1/3"),
            "an unclipped one as it is"
        );
    }

    #[test]
    fn progress_is_read_only_when_it_is_two_numbers() {
        assert_eq!(parse_progress(Some("2/4")), Some((2, 4)));
        assert_eq!(parse_progress(Some("2/x")), None);
        assert_eq!(parse_progress(Some("24")), None);
        assert_eq!(parse_progress(None), None);
    }

    #[test]
    fn one_line_strips_control_characters_and_clips() {
        assert_eq!(one_line("a\u{1b}[2Jb\r\nc", 80), "a [2Jb  c");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(one_line("abcd", 4), "abcd");
    }
}
