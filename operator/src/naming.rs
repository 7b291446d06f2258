//! Names and label values derived from a workflow name, always within
//! Kubernetes' limits.

/// Label values and the names of Jobs (whose name becomes a Pod label) are at
/// most 63 characters.
const MAX_LABEL_VALUE: usize = 63;

/// FNV-1a: a stable, dependency-free hash to keep truncated names unique.
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |hash, byte| (hash ^ byte as u32).wrapping_mul(0x0100_0193))
}

/// `text` itself when it fits in `max`; otherwise a prefix, a hash of the
/// whole text and nothing that would end in a `-` or `.`.
fn fit(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let hash = format!("{:08x}", fnv1a(text));
    let prefix = text[..max - hash.len() - 1].trim_end_matches(['-', '.']);
    format!("{prefix}-{hash}")
}

/// The value of the workflow label on its Jobs and Pods.
pub fn workflow_label(workflow: &str) -> String {
    fit(workflow, MAX_LABEL_VALUE)
}

/// The Job that mines block `block` of `workflow`: deterministic, so a
/// restarted operator finds (adopts) the Job instead of creating a second.
pub fn block_job_name(workflow: &str, block: u32) -> String {
    let suffix = format!("-b{block}");
    format!("{}{suffix}", fit(workflow, MAX_LABEL_VALUE - suffix.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_workflow_names_are_kept_readable() {
        assert_eq!(block_job_name("demo", 3), "demo-b3");
        assert_eq!(workflow_label("demo"), "demo");
    }

    #[test]
    fn long_workflow_names_give_distinct_job_names_within_63_characters() {
        let a = "w".repeat(200);
        let b = format!("{}x", "w".repeat(199));
        for block in [1, 64] {
            let (name_a, name_b) = (block_job_name(&a, block), block_job_name(&b, block));
            assert!(name_a.len() <= 63 && name_b.len() <= 63);
            assert_ne!(name_a, name_b);
            assert!(name_a.ends_with(&format!("-b{block}")));
        }
        assert!(workflow_label(&a).len() <= 63);
    }

    #[test]
    fn truncation_never_leaves_a_dash_before_the_hash_run() {
        let name = format!("{}-{}", "a".repeat(50), "b".repeat(100));
        let job = block_job_name(&name, 12);
        assert!(!job.contains("--"), "{job}");
    }
}
