//! `kubectl mining`: list, show, follow, log and cancel workflows and tool
//! runs, and validate McpTools before applying them. A kubectl plugin
//! (install the binary on PATH as `kubectl-mining`) that works alone too.

mod args;
mod cluster;
mod error;
mod follow;
mod render;
mod validate;
mod view;

use std::io::{Read as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser as _;
use k8s_openapi::jiff::Timestamp;
use kube::Client;

use crate::args::{Cli, Command, Output};
use crate::cluster::Scope;
use crate::error::CliError;
use crate::view::Kind;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(1)
        }
    }
}

/// kubectl's configuration: KUBECONFIG, the context asked for or the current one.
async fn client(context: Option<&str>) -> Result<Client, CliError> {
    let options =
        kube::config::KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
    let config = match kube::Config::from_kubeconfig(&options).await {
        Ok(config) => config,
        // In a Pod, with no kubeconfig: its ServiceAccount.
        Err(from_file) if context.is_none() => {
            kube::Config::incluster().map_err(|_| CliError::Config(from_file.to_string()))?
        }
        Err(err) => return Err(CliError::Config(err.to_string())),
    };
    Client::try_from(config).map_err(|err| CliError::Config(err.to_string()))
}

/// `audit`'s exit status when anyone holds the namespace's runs.
const AUDIT_FOUND: u8 = 3;

fn print_object(value: &serde_json::Value, output: Output) -> Result<(), CliError> {
    let text = match output {
        Output::Yaml => serde_yaml::to_string(value).map_err(|err| CliError::Invalid(err.to_string()))?,
        _ => format!("{}\n", serde_json::to_string_pretty(value).unwrap_or_default()),
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}

async fn run(cli: Cli) -> Result<u8, CliError> {
    if let Command::Validate { files } = &cli.command {
        return validate_files(files);
    }
    let client = client(cli.context.as_deref()).await?;
    let namespace = cli.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
    let now = Timestamp::now();
    match cli.command {
        Command::List { all_namespaces, kind, output } => {
            let scope = if all_namespaces { Scope::All } else { Scope::Namespace(namespace.clone()) };
            let kinds = kind.map_or(vec![Kind::Workflow, Kind::ToolRun], |kind| vec![kind.into()]);
            let works = cluster::list(&client, &scope, &kinds).await?;
            match output {
                Output::Table if works.is_empty() => {
                    let where_ = if all_namespaces {
                        "any namespace".into()
                    } else {
                        format!("namespace {namespace}")
                    };
                    eprintln!("No workflows or tool runs in {where_}.");
                }
                Output::Table => print!("{}", render::table(&works, all_namespaces, now)),
                output => {
                    let items: Vec<serde_json::Value> = works.iter().map(summary).collect();
                    print_object(&serde_json::json!({"items": items}), output)?;
                }
            }
            Ok(0)
        }
        Command::Audit { product_namespace, output } => {
            let report = mining_api::reach::audit(&client, &namespace, &product_namespace).await?;
            if !report.complete {
                eprintln!(
                    "warning: stopped after {} access reviews; the list may be incomplete",
                    mining_api::reach::MAX_REVIEWS
                );
            }
            match output {
                Output::Table if report.findings.is_empty() => eprintln!(
                    "Nobody besides cluster admins, Kubernetes and this product (namespace {product_namespace}) \
                     holds the runs of namespace {namespace}."
                ),
                Output::Table => print!("{}", render::reach(&report)),
                output => print_object(&serde_json::to_value(&report).unwrap_or_default(), output)?,
            }
            Ok(if report.findings.is_empty() { 0 } else { AUDIT_FOUND })
        }
        Command::Show { target, output } => {
            let found = cluster::find(&client, &namespace, &target).await?;
            if output != Output::Table {
                print_object(&found.object, output)?;
                return Ok(0);
            }
            let (jobs, pods) = cluster::jobs_and_pods(&client, &found).await?;
            let jobs: Vec<_> = jobs.iter().map(cluster::job_line).collect();
            let pods: Vec<_> = pods.iter().map(cluster::pod_line).collect();
            print!("{}", render::describe(&found.view, &jobs, &pods, now));
            Ok(0)
        }
        Command::Watch { target, timeout } => {
            let found = cluster::find(&client, &namespace, &target).await?;
            let code = follow::follow(&client, found.view, timeout.map(Duration::from_secs)).await?;
            Ok(code as u8)
        }
        Command::Logs { target, follow, tail } => {
            let found = cluster::find(&client, &namespace, &target).await?;
            let (_, pods) = cluster::jobs_and_pods(&client, &found).await?;
            if pods.is_empty() && follow && !found.view.finished {
                eprintln!(
                    "{}/{} has no Pods yet ({}); waiting for them",
                    found.view.kind.short(),
                    found.view.name,
                    found.view.phase
                );
            } else if pods.is_empty() {
                eprintln!(
                    "{}/{} has no Pods now ({}): a finished run's Pods go once its result is stored, \
                     and a run waiting for answers has none",
                    found.view.kind.short(),
                    found.view.name,
                    found.view.phase
                );
                return Ok(0);
            }
            let mut out = std::io::stdout();
            cluster::logs(&client, &found, follow, tail, &mut out).await?;
            Ok(0)
        }
        Command::Cancel { target } => {
            let found = cluster::find(&client, &namespace, &target).await?;
            if found.view.finished {
                println!(
                    "{}/{} already ended: {}",
                    found.view.kind.short(),
                    found.view.name,
                    found.view.phase
                );
                return Ok(0);
            }
            cluster::cancel(&client, &found.view).await?;
            println!(
                "{}/{} cancel requested (follow it with: kubectl mining watch {}/{})",
                found.view.kind.short(),
                found.view.name,
                found.view.kind.short(),
                found.view.name
            );
            Ok(0)
        }
        Command::Validate { .. } => unreachable!("answered above without a cluster"),
    }
}

/// A workflow or run in `list -o json|yaml`: the columns, by name.
fn summary(work: &view::WorkView) -> serde_json::Value {
    serde_json::json!({
        "kind": work.kind.kind(),
        "namespace": work.namespace,
        "name": work.name,
        "what": work.what,
        "phase": work.phase,
        "done": work.done,
        "total": work.total,
        "created": work.created.map(|t| t.to_string()),
        "questions": work.questions.iter().map(|q| q.key.clone()).collect::<Vec<_>>(),
        "outputs": work.outputs.iter().map(|o| o.name.clone()).collect::<Vec<_>>(),
    })
}

/// Largest definition file read: an McpTool is bounded far below this.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

fn validate_files(files: &[std::path::PathBuf]) -> Result<u8, CliError> {
    let mut invalid = 0;
    for file in files {
        let mut text = String::new();
        let read = if file.as_os_str() == "-" {
            std::io::stdin().take(MAX_FILE_BYTES).read_to_string(&mut text)
        } else {
            std::fs::File::open(file).and_then(|f| f.take(MAX_FILE_BYTES).read_to_string(&mut text))
        };
        if let Err(err) = read {
            println!("{}: cannot read: {err}", file.display());
            invalid += 1;
            continue;
        }
        let verdicts = validate::verdicts(&text);
        if verdicts.is_empty() {
            println!("{}: no documents", file.display());
            invalid += 1;
        }
        for verdict in verdicts {
            match verdict.problem {
                None => println!(
                    "{}: {}: valid (the frontend offers it as an MCP tool)",
                    file.display(),
                    verdict.what
                ),
                Some(problem) => {
                    invalid += 1;
                    println!("{}: {}: invalid: {problem}", file.display(), verdict.what);
                }
            }
        }
    }
    Ok(if invalid == 0 { 0 } else { 1 })
}
