//! What the API server a component talks to can do, read from its version:
//! the features this project uses that the oldest server the chart installs
//! on (1.20) lacks. Pure, so every reader decides alike.

/// The first minor of 1.x whose Job controller numbers the parts of a Job
/// (`completionMode: Indexed`, `JOB_COMPLETION_INDEX`) without a feature
/// gate: beta and on by default in 1.22 (alpha behind a gate in 1.21, GA in
/// 1.24). Earlier servers drop the field: the parts still run, unnumbered.
pub const INDEXED_JOBS_MINOR: u32 = 22;

/// The features of one API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerFeatures {
    /// The server's version as it reports it (`v1.20.15`), for messages.
    pub version: String,
    /// Whether a Job's parts are numbered (Indexed Jobs).
    pub indexed_jobs: bool,
}

impl ServerFeatures {
    /// From `/version`'s `major`, `minor` (providers write `"20+"`) and
    /// `gitVersion`. A version that does not parse is taken as current: the
    /// chart's floor is old, and a refusal needs a reason.
    pub fn from_version(major: &str, minor: &str, git_version: &str) -> Self {
        let number = |text: &str| -> Option<u32> {
            let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        };
        let indexed_jobs = match (number(major), number(minor)) {
            (Some(1), Some(minor)) => minor >= INDEXED_JOBS_MINOR,
            _ => true,
        };
        Self { version: git_version.to_string(), indexed_jobs }
    }

    /// A server whose version could not be read: assumed current.
    pub fn current() -> Self {
        Self { version: "unknown".into(), indexed_jobs: true }
    }

    /// What an McpTool of `parts` parts cannot have on this server, said to
    /// its author (`None` when nothing is missing). Its parts still run, one
    /// Pod each, and its result lists them in the order they finished.
    pub fn parts_caveat(&self, parts: i32) -> Option<String> {
        (parts > 1 && !self.indexed_jobs).then(|| {
            format!(
                "this API server ({}) has no Indexed Jobs (Kubernetes 1.{INDEXED_JOBS_MINOR}+): its {parts} parts \
                 run unnumbered, without JOB_COMPLETION_INDEX, and its result lists them in the order they finished",
                self.version
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_jobs_start_at_1_22_whatever_the_provider_writes() {
        assert!(!ServerFeatures::from_version("1", "20", "v1.20.15").indexed_jobs);
        assert!(!ServerFeatures::from_version("1", "21+", "v1.21.14-eks").indexed_jobs);
        assert!(ServerFeatures::from_version("1", "22", "v1.22.0").indexed_jobs);
        assert!(ServerFeatures::from_version("1", "36", "v1.36.0").indexed_jobs);
        assert!(ServerFeatures::from_version("", "", "").indexed_jobs, "unreadable is current");
    }

    #[test]
    fn only_a_tool_of_parts_on_an_old_server_is_told() {
        let old = ServerFeatures::from_version("1", "20", "v1.20.15");
        assert_eq!(old.parts_caveat(1), None);
        let said = old.parts_caveat(3).unwrap();
        assert!(
            said.contains("v1.20.15") && said.contains("JOB_COMPLETION_INDEX") && said.contains("3 parts"),
            "{said}"
        );
        assert_eq!(ServerFeatures::current().parts_caveat(3), None);
    }
}
