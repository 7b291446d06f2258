//! The command line: `kubectl mining COMMAND` (or `kubectl-mining COMMAND`).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::error::CliError;
use crate::view::Kind;

/// Runs and workflows of the mining operator, for the people who run and
/// debug tools. Uses kubectl's configuration (KUBECONFIG, the current
/// context and namespace); what you see and may do is what your RBAC allows.
#[derive(Debug, Parser)]
#[command(name = "kubectl mining", version)]
pub struct Cli {
    /// The namespace (default: the current context's).
    #[arg(short, long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use (default: the current one).
    #[arg(long, global = true)]
    pub context: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List workflows and tool runs, newest first.
    #[command(visible_alias = "ls")]
    List {
        /// Across every namespace you may list.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Only this kind.
        #[arg(long, value_enum)]
        kind: Option<KindArg>,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// One workflow or run: phase, progress, questions waiting, outputs, its Jobs and Pods.
    Show {
        /// NAME, mwf/NAME or toolrun/NAME (an MCP task id is a run's name).
        target: String,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Follow a workflow or run until it ends, with a progress bar on a terminal
    /// (a line per change otherwise). Exits 0 when it succeeded, 1 when not.
    #[command(visible_alias = "follow")]
    Watch {
        target: String,
        /// Give up after this many seconds (exit 2); by default wait as long as it runs.
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// The logs of its Pods, each line prefixed with [pod/container].
    Logs {
        target: String,
        /// Stream them, and each Pod it makes next, until it has ended.
        #[arg(short, long)]
        follow: bool,
        /// Lines per container, from the end (default 1000).
        #[arg(long)]
        tail: Option<i64>,
    },
    /// Ask it to stop (spec.cancel: true), as its caller's cancel does.
    Cancel { target: String },
    /// Who holds every caller's runs in the namespace: the subjects (besides
    /// cluster admins, Kubernetes' own components and this product's
    /// accounts) that may create Pods, exec or attach into them, read or
    /// write Secrets, or write run status there — each right and the binding
    /// it comes through, confirmed by a SubjectAccessReview. Exits 0 when
    /// nobody is listed, 3 when anyone is (1 on an error).
    Audit {
        /// The namespace the product is installed in: its ServiceAccounts
        /// are the product's own (README's `helm install` uses `mining`).
        #[arg(long, default_value = "mining")]
        product_namespace: String,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Check McpTool definitions before applying them: the frontend's own
    /// verdict (the message it would write into the tool's Accepted condition).
    Validate {
        /// YAML or JSON files, each with one or more documents ("-" for stdin).
        #[arg(short, long = "filename", required = true)]
        files: Vec<PathBuf>,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum KindArg {
    #[value(alias = "mwf", alias = "workflows")]
    Workflow,
    #[value(alias = "toolruns", alias = "run")]
    Toolrun,
}

impl From<KindArg> for Kind {
    fn from(kind: KindArg) -> Self {
        match kind {
            KindArg::Workflow => Kind::Workflow,
            KindArg::Toolrun => Kind::ToolRun,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// The kinds a target may be and its name: `mwf/NAME`, `toolrun/NAME`
/// (the plural and long spellings kubectl accepts too), or a bare NAME.
pub fn parse_target(target: &str) -> Result<(Vec<Kind>, &str), CliError> {
    let (kinds, name) = match target.split_once('/') {
        None => (vec![Kind::ToolRun, Kind::Workflow], target),
        Some((kind, name)) => match kind.to_ascii_lowercase().as_str() {
            "mwf" | "miningworkflow" | "miningworkflows" | "workflow" | "workflows" => {
                (vec![Kind::Workflow], name)
            }
            "toolrun" | "toolruns" | "run" | "runs" => (vec![Kind::ToolRun], name),
            other => return Err(CliError::Usage(format!("{other} is not a kind of work (mwf or toolrun)"))),
        },
    };
    if name.is_empty() {
        return Err(CliError::Usage("say which workflow or run (NAME, mwf/NAME or toolrun/NAME)".into()));
    }
    Ok((kinds, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_a_kind_or_let_the_cluster_say() {
        assert_eq!(parse_target("mwf/a").unwrap(), (vec![Kind::Workflow], "a"));
        assert_eq!(parse_target("ToolRuns/b").unwrap(), (vec![Kind::ToolRun], "b"));
        assert_eq!(parse_target("c").unwrap(), (vec![Kind::ToolRun, Kind::Workflow], "c"));
        assert!(matches!(parse_target("pod/x"), Err(CliError::Usage(_))));
        assert!(matches!(parse_target("mwf/"), Err(CliError::Usage(_))));
    }

    #[test]
    fn the_command_line_parses() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "kubectl-mining",
            "-n",
            "team",
            "list",
            "-A",
            "--kind",
            "mwf",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.namespace.as_deref(), Some("team"));
        assert!(matches!(
            cli.command,
            Command::List { all_namespaces: true, kind: Some(KindArg::Workflow), output: Output::Json }
        ));
        assert!(Cli::try_parse_from(["kubectl-mining", "validate"]).is_err(), "validate needs -f");
    }
}
