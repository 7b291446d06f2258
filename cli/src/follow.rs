//! `watch`: follow one workflow or run to its end — a progress bar on a
//! terminal, a line per change anywhere else (logs, CI, pipes).

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher::watch_object;
use mining_api::{MiningWorkflow, ToolRun};

use crate::error::CliError;
use crate::view::{Kind, WorkView, one_line};

/// How a followed run ended, as the process's exit code.
pub fn exit_code(view: &WorkView) -> Option<i32> {
    match (view.finished, view.succeeded) {
        (false, _) => None,
        (true, true) => Some(0),
        (true, false) => Some(1),
    }
}

/// The line printed for each change when no terminal shows a bar.
pub fn line(view: &WorkView) -> String {
    let mut line = format!("{}/{} {} {}/{}", view.kind.short(), view.name, view.phase, view.done, view.total);
    if !view.questions.is_empty() {
        let keys: Vec<&str> = view.questions.iter().map(|q| q.key.as_str()).collect();
        line.push_str(&format!(" waiting for answers: {}", keys.join(", ")));
    }
    if view.finished
        && let Some(message) = &view.message
    {
        line.push_str(&format!(": {}", one_line(message, 300)));
    }
    line
}

/// The object's changes as views; `None` once it is gone.
fn changes(
    client: &Client,
    work: &WorkView,
) -> futures::stream::BoxStream<'static, Result<Option<WorkView>, CliError>> {
    fn of<K, S>(stream: S) -> futures::stream::BoxStream<'static, Result<Option<WorkView>, CliError>>
    where
        S: Stream<Item = Result<Option<K>, kube::runtime::watcher::Error>> + Send + 'static,
        for<'a> WorkView: From<&'a K>,
    {
        stream
            .map(|event| {
                event
                    .map(|object| object.as_ref().map(WorkView::from))
                    .map_err(|err| CliError::Invalid(err.to_string()))
            })
            .boxed()
    }
    match work.kind {
        Kind::Workflow => {
            of(watch_object(Api::<MiningWorkflow>::namespaced(client.clone(), &work.namespace), &work.name))
        }
        Kind::ToolRun => {
            of(watch_object(Api::<ToolRun>::namespaced(client.clone(), &work.namespace), &work.name))
        }
    }
}

/// Follows `work` until it ends (or `timeout`); returns the exit code.
pub async fn follow(client: &Client, work: WorkView, timeout: Option<Duration>) -> Result<i32, CliError> {
    let terminal = std::io::stderr().is_terminal();
    let bar = terminal.then(|| {
        let bar = indicatif::ProgressBar::new(u64::from(work.total));
        let style =
            indicatif::ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} {msg} ({elapsed})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(format!("{}/{}", work.kind.short(), work.name));
        bar.enable_steady_tick(Duration::from_millis(250));
        bar
    });
    let mut events = changes(client, &work);
    let mut last = String::new();
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut view = work;
    loop {
        if let Some(code) = exit_code(&view) {
            if let Some(bar) = &bar {
                bar.finish_with_message(view.phase.clone());
            }
            if terminal {
                eprintln!("{}", line(&view));
            } else if line(&view) != last {
                println!("{}", line(&view));
            }
            return Ok(code);
        }
        let shown = line(&view);
        match &bar {
            Some(bar) => {
                bar.set_length(u64::from(view.total));
                bar.set_position(u64::from(view.done));
                bar.set_message(view.phase.clone());
            }
            None if shown != last => {
                println!("{shown}");
                let _ = std::io::stdout().flush();
            }
            None => {}
        }
        last = shown;
        let next = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(next) => next,
                Err(_) => {
                    if let Some(bar) = &bar {
                        bar.abandon_with_message(format!("{} (still going; stopped following)", view.phase));
                    }
                    eprintln!("stopped following after the timeout; {} goes on", line(&view));
                    return Ok(2);
                }
            },
            None => events.next().await,
        };
        match next {
            Some(Ok(Some(changed))) => view = changed,
            Some(Ok(None)) => {
                return Err(CliError::Invalid(format!("{}/{} was deleted", view.kind.short(), view.name)));
            }
            // The watcher retries on its own; a failure here is one event lost, not the end.
            Some(Err(err)) => {
                eprintln!("(watch: {err}; retrying)");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            None => return Err(CliError::Invalid("the watch ended".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use mining_api::WorkflowPhase;
    use mining_api::testing::{WorkflowExt as _, mined_block, status, workflow};

    #[test]
    fn lines_say_the_phase_and_progress_and_the_end_says_why() {
        let running = workflow("w", 8, 3).with_status(mining_api::MiningWorkflowStatus {
            blocks: vec![mined_block(1, 7, "00AB", Timestamp::UNIX_EPOCH, Timestamp::UNIX_EPOCH)],
            ..status(WorkflowPhase::Mining)
        });
        let view = WorkView::from(&running);
        assert_eq!(line(&view), "mwf/w Mining 1/3");
        assert_eq!(exit_code(&view), None);
        let failed = workflow("w", 8, 3).with_status(mining_api::MiningWorkflowStatus {
            message: Some("deadline\nexceeded".into()),
            ..status(WorkflowPhase::Failed)
        });
        let view = WorkView::from(&failed);
        assert_eq!(
            (line(&view).as_str(), exit_code(&view)),
            ("mwf/w Failed 0/3: deadline exceeded", Some(1))
        );
        let done = WorkView::from(&workflow("w", 8, 3).with_status(status(WorkflowPhase::Succeeded)));
        assert_eq!(exit_code(&done), Some(0));
    }
}
