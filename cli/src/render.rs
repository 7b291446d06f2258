//! What the CLI prints, as pure functions of [`WorkView`]s (and of the Jobs
//! and Pods beside them): tables in aligned columns as kubectl prints
//! them, and `show`'s description.

use std::io::Write as _;

use k8s_openapi::jiff::Timestamp;

use crate::view::{WorkView, one_line};

/// Longest message `show` prints (a status message is at most a few KiB).
const MAX_MESSAGE_CHARS: usize = 4096;

/// Text in aligned columns: each row's cells joined by tabs, as kubectl's
/// printers do with Go's tabwriter.
pub fn columns(rows: &[Vec<String>]) -> String {
    let mut writer = tabwriter::TabWriter::new(Vec::new()).padding(3);
    for row in rows {
        // Tabs or newlines inside a cell (text a tool wrote) would break the columns.
        let cells: Vec<String> = row.iter().map(|cell| one_line(cell, 120).replace('\t', " ")).collect();
        let _ = writeln!(writer, "{}", cells.join("\t"));
    }
    let bytes = writer.into_inner().unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// How long ago `then` was, as kubectl's AGE column says it (`45s`, `3m`,
/// `5h`, `2d`).
pub fn age(then: Option<Timestamp>, now: Timestamp) -> String {
    let Some(then) = then else { return "<unknown>".into() };
    let seconds = now.as_second().saturating_sub(then.as_second()).max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// The `list` table: one row per workflow or run, newest first.
pub fn table(works: &[WorkView], all_namespaces: bool, now: Timestamp) -> String {
    let mut header = vec!["KIND", "NAME", "WHAT", "PHASE", "PROGRESS", "AGE"];
    if all_namespaces {
        header.insert(0, "NAMESPACE");
    }
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    for work in works {
        let mut row = vec![
            work.kind.short().to_string(),
            work.name.clone(),
            work.what.clone(),
            phase_with_notes(work),
            format!("{}/{}", work.done, work.total),
            age(work.created, now),
        ];
        if all_namespaces {
            row.insert(0, work.namespace.clone());
        }
        rows.push(row);
    }
    columns(&rows)
}

/// `audit`'s table: who holds the namespace's runs, through what.
pub fn reach(report: &mining_api::reach::Report) -> String {
    let mut rows = vec![["SUBJECT", "BINDING", "ROLE", "RIGHTS"].map(String::from).to_vec()];
    for finding in &report.findings {
        rows.push(vec![
            finding.subject.text(),
            finding.binding.clone(),
            finding.role.clone(),
            finding.rights.join(", "),
        ]);
    }
    columns(&rows)
}

/// The phase, and what a person should know beside it.
fn phase_with_notes(work: &WorkView) -> String {
    let mut phase = work.phase.clone();
    if work.cancel_requested && !work.finished {
        phase.push_str(" (cancelling)");
    }
    if !work.questions.is_empty() {
        phase.push_str(&format!(" ({} asked)", work.questions.len()));
    }
    phase
}

/// A Job of a run or workflow, as `show` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobLine {
    pub name: String,
    /// `Running`, `Complete`, `Failed` or `Suspended`.
    pub state: String,
    pub succeeded: i32,
    pub completions: i32,
}

/// A Pod of one of those Jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct PodLine {
    pub name: String,
    pub phase: String,
    pub node: String,
    /// Why it is not running, when a container says (`ImagePullBackOff`, …).
    pub reason: Option<String>,
}

/// `show`'s description of one workflow or run.
pub fn describe(work: &WorkView, jobs: &[JobLine], pods: &[PodLine], now: Timestamp) -> String {
    let mut fields: Vec<Vec<String>> = Vec::new();
    let mut field = |name: &str, value: String| fields.push(vec![format!("{name}:"), value]);
    field("Name", work.name.clone());
    field("Namespace", work.namespace.clone());
    field("Kind", format!("{} ({})", work.kind.kind(), work.what));
    let mut phase = phase_with_notes(work);
    if let Some(step) = work.step {
        phase.push_str(&format!(", step {step}"));
    }
    field("Phase", phase);
    field("Progress", format!("{}/{}", work.done, work.total));
    field("Age", age(work.created, now));
    if let Some(result) = &work.result {
        field(if work.kind == crate::view::Kind::Workflow { "Last hash" } else { "Result" }, result.clone());
    }
    let mut out = columns(&fields);
    // Whole, not clipped to a column: why work waits or failed is in its
    // tail (the cluster's own words).
    if let Some(message) = &work.message {
        out.push_str(&format!("{:<13}{}\n", "Message:", one_line(message, MAX_MESSAGE_CHARS)));
    }
    if !work.questions.is_empty() {
        let since = work.waiting_since.map(|t| format!(" (for {})", age(Some(t), now))).unwrap_or_default();
        out.push_str(&format!("\nWaiting for its caller's answers{since}:\n"));
        let mut rows = vec![vec!["  KEY".to_string(), "KIND".into(), "ASKS".into()]];
        rows.extend(
            work.questions.iter().map(|q| vec![format!("  {}", q.key), q.method.clone(), q.text.clone()]),
        );
        out.push_str(&columns(&rows));
        out.push_str("  (the caller answers through MCP: tasks/update, or the respond_tool_run tool)\n");
    }
    if !work.outputs.is_empty() {
        out.push_str("\nOutputs:\n");
        let mut rows = vec![vec!["  NAME".to_string(), "TYPE".into(), "SIZE".into(), "SHA-256".into()]];
        rows.extend(work.outputs.iter().map(|output| {
            vec![
                format!("  {}", output.name),
                output.media_type.clone(),
                bytes(output.size),
                output.sha256.clone(),
            ]
        }));
        out.push_str(&columns(&rows));
        out.push_str(&format!(
            "  (its caller reads each as {})\n",
            mining_api::tool_outputs::resource_uri(&work.name, "NAME")
        ));
    }
    if !jobs.is_empty() {
        out.push_str("\nJobs:\n");
        let mut rows = vec![vec!["  NAME".to_string(), "STATE".into(), "COMPLETIONS".into()]];
        rows.extend(jobs.iter().map(|job| {
            vec![
                format!("  {}", job.name),
                job.state.clone(),
                format!("{}/{}", job.succeeded, job.completions),
            ]
        }));
        out.push_str(&columns(&rows));
    }
    if !pods.is_empty() {
        out.push_str("\nPods:\n");
        let mut rows = vec![vec!["  NAME".to_string(), "PHASE".into(), "NODE".into(), "REASON".into()]];
        rows.extend(pods.iter().map(|pod| {
            vec![
                format!("  {}", pod.name),
                pod.phase.clone(),
                pod.node.clone(),
                pod.reason.clone().unwrap_or_default(),
            ]
        }));
        out.push_str(&columns(&rows));
    }
    out
}

/// A byte count as people read it, in binary units (`17.4 MiB`).
pub fn bytes(size: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = size as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{size} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Question;
    use mining_api::testing::tool_run;
    use mining_api::tool_outputs::ToolOutput;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    #[test]
    fn ages_read_as_kubectl_writes_them() {
        let now = at(1_000_000);
        assert_eq!(age(Some(at(1_000_000 - 45)), now), "45s");
        assert_eq!(age(Some(at(1_000_000 - 600)), now), "10m");
        assert_eq!(age(Some(at(1_000_000 - 5 * 3600)), now), "5h");
        assert_eq!(age(Some(at(1_000_000 - 3 * 86_400)), now), "3d");
        assert_eq!(age(None, now), "<unknown>");
    }

    #[test]
    fn the_table_aligns_columns_and_names_namespaces_only_across_them() {
        let mut run = crate::view::WorkView::from(&tool_run("r-1", "deploy-gate"));
        run.created = Some(at(100));
        run.namespace = "team".into();
        run.phase = "InputRequired".into();
        run.questions =
            vec![Question { key: "approve".into(), method: "elicitation".into(), text: "Go?".into() }];
        let text = table(std::slice::from_ref(&run), false, at(160));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("KIND "), "{text}");
        assert_eq!(lines[0].find("NAME"), lines[1].find("r-1"), "columns line up: {text}");
        assert!(lines[1].contains("InputRequired (1 asked)") && lines[1].ends_with("60s"), "{text}");
        let across = table(&[run], true, at(160));
        assert!(
            across.starts_with("NAMESPACE ") && across.lines().nth(1).unwrap().starts_with("team "),
            "{across}"
        );
    }

    #[test]
    fn a_cell_a_tool_wrote_cannot_break_the_columns() {
        let text = columns(&[vec!["a\tb\nc".into(), "d".into()], vec!["e".into(), "f".into()]]);
        assert_eq!(text.lines().count(), 2, "{text:?}");
    }

    #[test]
    fn show_lists_questions_outputs_jobs_and_pods() {
        let mut run = crate::view::WorkView::from(&tool_run("r-1", "report"));
        run.questions =
            vec![Question { key: "approve".into(), method: "elicitation".into(), text: "Go?".into() }];
        run.outputs = vec![ToolOutput {
            name: "work.csv".into(),
            media_type: "text/csv".into(),
            size: 18_244_403,
            sha256: "a".repeat(64),
        }];
        let jobs = [JobLine { name: "r-1".into(), state: "Complete".into(), succeeded: 1, completions: 1 }];
        let pods = [PodLine {
            name: "r-1-x".into(),
            phase: "Pending".into(),
            node: "n".into(),
            reason: Some("ErrImagePull".into()),
        }];
        let text = describe(&run, &jobs, &pods, at(0));
        for expected in [
            "Kind:",
            "ToolRun (report)",
            "approve",
            "Go?",
            "work.csv",
            "17.4 MiB",
            &"a".repeat(64),
            "mining-operator://runs/r-1/outputs/NAME",
            "Complete",
            "1/1",
            "r-1-x",
            "ErrImagePull",
        ] {
            assert!(text.contains(expected), "{expected} in {text}");
        }
    }

    #[test]
    fn byte_counts_use_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(2_490), "2.4 KiB");
        assert_eq!(bytes(16 * 1024 * 1024), "16.0 MiB");
    }
}
