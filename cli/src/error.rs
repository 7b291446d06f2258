//! The CLI's one error: what went wrong, said so a person can act on it.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CliError {
    #[error("no workflow or tool run {name} in namespace {namespace} (or you may not read it)")]
    NotFound { namespace: String, name: String },
    #[error("both a workflow and a tool run are named {name}: say mwf/{name} or toolrun/{name}")]
    Ambiguous { name: String },
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach the cluster: {0} (kubectl's config is used: KUBECONFIG, --context)")]
    Config(String),
    #[error("{}", api_reason(.0))]
    Api(#[from] kube::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Invalid(String),
}

/// What the API server said, without kube's wrapping.
pub fn api_reason(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => {
            let hint = match status.code {
                401 => " (log in again: the credentials were refused)",
                403 => " (your RBAC does not allow it)",
                _ => "",
            };
            format!("{}{hint}", status.message)
        }
        other => other.to_string(),
    }
}
