//! A tool's files: what a run may hand over beyond its 4 KiB result, how
//! they are named, bounded and addressed. One place for the rules the
//! operator enforces when it stores an output and the frontend when it
//! serves one.
//!
//! A tool uploads each file while it runs (`PUT $MCP_OUTPUTS_URL/NAME` with
//! `Authorization: Bearer $MCP_OUTPUTS_TOKEN`) to the operator, which streams
//! it into the outputs store under the run's uid; when the run ends the
//! operator lists what was stored into `status.outputs`, and the frontend
//! links each to its caller as an MCP resource.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The environment variable naming where a run uploads its files (the
/// operator's outputs endpoint for this run; a file's name is appended).
pub const ENV_OUTPUTS_URL: &str = "MCP_OUTPUTS_URL";
/// The environment variable holding the run's upload token (from the run's
/// arguments Secret, which viewers of the namespace cannot read).
pub const ENV_OUTPUTS_TOKEN: &str = "MCP_OUTPUTS_TOKEN";
/// The arguments Secret's key holding the upload token.
pub const SECRET_KEY_OUTPUTS_TOKEN: &str = "outputs-token";

/// Most files one run may hand over.
pub const MAX_OUTPUTS: usize = 16;
/// Longest file name.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest media type (RFC 6838's limit).
pub const MAX_MEDIA_TYPE_BYTES: usize = 127;
/// The media type of an upload that names none.
pub const DEFAULT_MEDIA_TYPE: &str = "application/octet-stream";
/// Largest file, unless the operator is told less (`--outputs-max-file-bytes`).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;
/// Largest sum of one run's files, unless told less (`--outputs-max-run-bytes`).
pub const DEFAULT_MAX_RUN_BYTES: u64 = 256 << 20;
/// Largest sum of every run's files in the store (`--outputs-max-total-bytes`).
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 4 << 30;

/// The URI scheme of a run's files as MCP resources.
pub const URI_SCHEME: &str = "mining-operator";
/// The resource template every output URI matches (`resources/templates/list`).
pub const URI_TEMPLATE: &str = "mining-operator://runs/{taskId}/outputs/{name}";

/// One stored file of a run, as the operator recorded it when it stored the
/// bytes: the frontend serves exactly these, and checks the bytes it reads
/// against `size` and `sha256`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolOutput {
    #[schemars(length(min = 1, max = MAX_NAME_BYTES))]
    pub name: String,
    #[schemars(length(min = 3, max = MAX_MEDIA_TYPE_BYTES))]
    pub media_type: String,
    #[schemars(range(min = 0, max = crate::bounds::MAX_STORED_INTEGER))]
    pub size: u64,
    /// SHA-256 of the bytes, 64 lowercase hex digits.
    #[schemars(length(min = 64, max = 64))]
    pub sha256: String,
}

/// Why a name is not a file name a run may use: anything but letters, digits,
/// `.`, `_` and `-`, a leading `.` or `-`, or over 128 bytes. Keeps every
/// name inside its run's prefix of the store (no `/`, no `..`, nothing a
/// store or a terminal reads differently) and out of the store's own
/// `.meta` names.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!("an output's name has 1 to {MAX_NAME_BYTES} bytes (got {})", name.len()));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if !name.chars().all(allowed) {
        return Err("an output's name may hold only ASCII letters, digits, '.', '_' and '-'".into());
    }
    if name.starts_with(['.', '-']) {
        return Err("an output's name may not begin with '.' or '-'".into());
    }
    Ok(())
}

/// The media type an upload's `Content-Type` names, without parameters and in
/// lower case; `None` when it is not `type/subtype` of RFC 6838 tokens.
/// An absent header is [`DEFAULT_MEDIA_TYPE`].
pub fn media_type(content_type: Option<&str>) -> Option<String> {
    let Some(value) = content_type else { return Some(DEFAULT_MEDIA_TYPE.into()) };
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let token =
        |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || "!#$&^_.+-".contains(c));
    let (kind, subtype) = essence.split_once('/')?;
    (token(kind) && token(subtype) && essence.len() <= MAX_MEDIA_TYPE_BYTES).then_some(essence)
}

/// The store's key of a run's file: under the run's namespace and uid, so a
/// run made again under the same name never sees the files of the one before.
pub fn object_key(namespace: &str, run_uid: &str, name: &str) -> String {
    format!("{}/{name}", run_prefix(namespace, run_uid))
}

/// The store's key of what the operator recorded about a stored file.
pub fn meta_key(namespace: &str, run_uid: &str, name: &str) -> String {
    format!("{}/.meta/{name}", run_prefix(namespace, run_uid))
}

/// Every key of a run's files starts with this.
pub fn run_prefix(namespace: &str, run_uid: &str) -> String {
    format!("runs/{namespace}/{run_uid}")
}

/// The MCP resource URI of a run's file, as its caller sees it: the task id
/// the caller knows the run by, and the file's name.
pub fn resource_uri(task_id: &str, name: &str) -> String {
    format!("{URI_SCHEME}://runs/{task_id}/outputs/{name}")
}

/// The task id and file name of a resource URI; `None` for any other URI
/// (another scheme, a name no run may use, anything after the name).
pub fn parse_resource_uri(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix(URI_SCHEME)?.strip_prefix("://runs/")?;
    let (task_id, name) = rest.split_once("/outputs/")?;
    let id_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    (!task_id.is_empty() && task_id.len() <= 256 && task_id.chars().all(id_char) && check_name(name).is_ok())
        .then_some((task_id, name))
}

/// Whether `text` is a SHA-256 digest as [`ToolOutput::sha256`] writes it.
pub fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

/// Why a recorded list of outputs cannot be served: more than
/// [`MAX_OUTPUTS`], a name twice, or an entry no upload could have made.
/// The frontend checks what it reads from a status others might edit.
pub fn check_recorded(outputs: &[ToolOutput]) -> Result<(), String> {
    if outputs.len() > MAX_OUTPUTS {
        return Err(format!("more than {MAX_OUTPUTS} outputs"));
    }
    let mut names = std::collections::BTreeSet::new();
    for output in outputs {
        check_name(&output.name)?;
        if media_type(Some(&output.media_type)).as_deref() != Some(output.media_type.as_str()) {
            return Err(format!("output {}: not a media type", output.name));
        }
        if !is_digest(&output.sha256) {
            return Err(format!("output {}: not a SHA-256 digest", output.name));
        }
        if !names.insert(output.name.as_str()) {
            return Err(format!("output {} is listed twice", output.name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_inside_the_runs_prefix() {
        for good in ["report.csv", "chart.svg", "a", "Data_2026-11-27.json", &"x".repeat(128)] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "../x",
            "a/b",
            "/etc/passwd",
            "..",
            ".meta",
            ".hidden",
            "-rf",
            "a b",
            "ré.csv",
            "a\\b",
            "a\u{202e}b",
            "a\0b",
            "x%2F..",
            &"x".repeat(129),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn media_types_are_tokens_without_parameters() {
        assert_eq!(media_type(None).as_deref(), Some("application/octet-stream"));
        assert_eq!(media_type(Some("Text/CSV; charset=utf-8")).as_deref(), Some("text/csv"));
        assert_eq!(media_type(Some("image/svg+xml")).as_deref(), Some("image/svg+xml"));
        for bad in ["", "text", "text/", "/csv", "text/c sv", "text/csv/x", "tëxt/csv"] {
            assert_eq!(media_type(Some(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn a_resource_uri_round_trips_and_nothing_else_parses() {
        let uri = resource_uri("t-abc_1", "report.csv");
        assert_eq!(uri, "mining-operator://runs/t-abc_1/outputs/report.csv");
        assert_eq!(parse_resource_uri(&uri), Some(("t-abc_1", "report.csv")));
        for bad in [
            "mining-operator://runs/t/outputs/../x",
            "mining-operator://runs/t/outputs/a/b",
            "mining-operator://runs//outputs/a",
            "mining-operator://runs/a/b/outputs/x",
            "file:///etc/passwd",
            "mining-operator://runs/t/outputs/",
            "mining-operator://workflows/t/outputs/a",
        ] {
            assert_eq!(parse_resource_uri(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_recorded_list_is_checked_as_an_upload_would_be() {
        let output = |name: &str| ToolOutput {
            name: name.into(),
            media_type: "text/csv".into(),
            size: 3,
            sha256: "a".repeat(64),
        };
        assert_eq!(check_recorded(&[output("a.csv"), output("b.csv")]), Ok(()));
        assert!(check_recorded(&[output("a.csv"), output("a.csv")]).is_err());
        assert!(check_recorded(&[output("../a")]).is_err());
        assert!(check_recorded(&vec![output("a"); MAX_OUTPUTS + 1]).is_err());
        let mut odd = output("a");
        odd.sha256 = "A".repeat(64);
        assert!(check_recorded(&[odd]).is_err());
        let mut odd = output("a");
        odd.media_type = "text/csv; x=1".into();
        assert!(check_recorded(&[odd]).is_err());
    }

    #[test]
    fn keys_are_under_the_runs_uid() {
        assert_eq!(object_key("ns", "uid-1", "a.csv"), "runs/ns/uid-1/a.csv");
        assert_eq!(meta_key("ns", "uid-1", "a.csv"), "runs/ns/uid-1/.meta/a.csv");
    }
}
