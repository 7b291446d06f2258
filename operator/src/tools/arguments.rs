//! A run's arguments Secret (I/O around [`super::job::arguments_secret`]):
//! made before the run's Job, and checked again before its result is taken.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use mining_api::tool::arguments_secret_name;
use mining_api::{ToolRun, Work as _};

use super::job;
use crate::job::MANAGER;
use crate::{Error, Result};

/// The uid of the run's arguments Secret, made now or found as this
/// operator made it (a restart between the two writes); `Err(why)` when the
/// run cannot have one (the API server refuses it, or someone else's Secret
/// holds the name), which fails the run.
pub async fn ensure(secrets: &Api<Secret>, run: &ToolRun) -> Result<std::result::Result<String, String>> {
    let Some(built) = job::arguments_secret(run) else {
        return Ok(Err("the run has no name or uid".into()));
    };
    let name = built.metadata.name.clone().unwrap_or_default();
    let failed = |source| Error::Work {
        noun: ToolRun::NOUN,
        action: "create the arguments Secret of",
        name: name.clone(),
        source,
    };
    let params = PostParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    let stored = match secrets.create(&params, &built).await {
        Ok(created) => created,
        Err(kube::Error::Api(status)) if status.code == 409 => match secrets.get_opt(&name).await {
            Ok(Some(found)) => found,
            Ok(None) => return Err(failed(kube::Error::Api(status))),
            Err(err) => return Err(failed(err)),
        },
        Err(kube::Error::Api(status)) if matches!(status.code, 400 | 403 | 422) => {
            return Ok(Err(format!("the API server refused the run's arguments Secret: {}", status.message)));
        }
        Err(err) => return Err(failed(err)),
    };
    if !job::is_arguments_secret_of(&stored, run) {
        return Ok(Err(format!("a Secret named {name} exists that this run did not make")));
    }
    Ok(stored.metadata.uid.clone().ok_or_else(|| "the API server gave the Secret no uid".to_string()))
}

/// Whether the run's arguments Secret is still the one it made (by the uid
/// it recorded): one deleted or replaced under its name may have handed the
/// tool other arguments. Runs made before arguments moved to Secrets
/// recorded none and pass.
pub async fn intact(secrets: &Api<Secret>, run: &ToolRun) -> Result<bool> {
    let Some(recorded) = run.status.as_ref().and_then(|s| s.arguments_secret_uid.as_deref()) else {
        return Ok(true);
    };
    let name = arguments_secret_name(run.metadata.name.as_deref().unwrap_or_default());
    let stored = secrets.get_opt(&name).await.map_err(|source| Error::Work {
        noun: ToolRun::NOUN,
        action: "read the arguments Secret of",
        name: name.clone(),
        source,
    })?;
    Ok(stored.and_then(|s| s.metadata.uid).as_deref() == Some(recorded))
}
