//! The MiningWorkflow operator.
//!
//! Each reconcile is a pipeline: **observe** (the workflow and its Jobs, plus
//! each finished Job's Pod) → **plan** (a pure function: next block, status,
//! actions) → **apply** (create or delete Jobs, adopting any that exist) →
//! **status** (server-side apply on `/status`, skipped when unchanged).

pub mod admission;
pub mod api_calls;
pub mod config;
pub mod kinds;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod mining;
pub use mining_api::naming;
pub mod outputs;
pub mod parties;
pub mod projection;
pub mod queue;
#[cfg(test)]
mod testing;
pub mod tool_run;
pub mod work;

/// Everything a reconcile can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listing the Pods of Job {job}")]
    ListPods {
        job: String,
        #[source]
        source: kube::Error,
    },
    #[error("creating Job {name}")]
    CreateJob {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Job {name} is not one this operator built for the workflow: {why}")]
    ForeignJob { name: String, why: String },
    #[error("deleting Job {name}")]
    DeleteJob {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting workflow {workflow}")]
    DeleteWorkflow {
        workflow: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the status of {noun} {name}")]
    WriteStatus {
        noun: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// A call about work of any kind but workflows (`noun`: its kind).
    #[error("cannot {action} {noun} {name}")]
    Work {
        noun: &'static str,
        action: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("workflow has no {0}")]
    MissingMetadata(&'static str),
    /// The outputs store could not be read (tried again).
    #[error("cannot read the stored files of tool run {name}: {message}")]
    Outputs { name: String, message: String },
}

impl Error {
    /// The API server refused the call for want of an RBAC rule (403).
    pub fn is_forbidden(&self) -> bool {
        let source = match self {
            Self::ListPods { source, .. }
            | Self::CreateJob { source, .. }
            | Self::DeleteJob { source, .. }
            | Self::DeleteWorkflow { source, .. }
            | Self::WriteStatus { source, .. }
            | Self::Work { source, .. } => source,
            Self::ForeignJob { .. } | Self::MissingMetadata(_) | Self::Outputs { .. } => return false,
        };
        matches!(source, kube::Error::Api(status) if status.code == 403)
    }

    /// A fixed label for metrics (never the error text: unbounded values).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::ListPods { .. } => "list_pods",
            Self::CreateJob { .. } => "create_job",
            Self::ForeignJob { .. } => "foreign_job",
            Self::DeleteJob { .. } => "delete_job",
            Self::DeleteWorkflow { .. } => "delete_workflow",
            Self::WriteStatus { .. } => "write_status",
            Self::Work { .. } => "work",
            Self::MissingMetadata(_) => "missing_metadata",
            Self::Outputs { .. } => "outputs_store",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
