//! Names and label values derived from a workflow, always within Kubernetes'
//! limits.

/// Label values and the names of Jobs (whose name becomes a Pod label) are at
/// most 63 characters.
const MAX_LABEL_VALUE: usize = 63;
/// The uid's 32 hex digits, in every Job name.
const UID_DIGITS: usize = 32;

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

/// The value of the workflow label on its Jobs and Pods (a selector, not an
/// identity: Jobs are matched to their workflow by owner uid).
pub fn workflow_label(workflow: &str) -> String {
    fit(workflow, MAX_LABEL_VALUE)
}

/// The Job that mines block `block` of the workflow with this name and uid:
/// deterministic, so a restarted operator finds (adopts) the Job instead of
/// creating a second; and it carries the whole uid, so two different
/// workflows — any names, or the same name deleted and created again — can
/// never map to the same Job name. The name's prefix is only for people.
pub fn block_job_name(workflow: &str, uid: &str, block: u32) -> String {
    job_name(workflow, uid, &format!("b{block}"))
}

/// The Job that mines the nonces from `start` of block `block` (see
/// [`block_job_name`]); the start in hex keeps the name short.
pub fn range_job_name(workflow: &str, uid: &str, block: u32, start: u64) -> String {
    job_name(workflow, uid, &format!("b{block}-r{start:x}"))
}

/// Whether `name` is one the operator gives a Job of the workflow with this
/// name and uid (a block's, or a range's): what a reader that must not take
/// a Job someone else made for the workflow's (a label, an ownerReference
/// anyone in the namespace can write) goes by.
pub fn is_workflow_job_name(workflow: &str, uid: &str, name: &str) -> bool {
    // The tail after the uid says which block (and range); the name must
    // then be exactly what the operator builds for it (the readable
    // prefix is clipped to fit the tail).
    let Some((_, tail)) = name.rsplit_once("-b") else {
        return false;
    };
    let tail = format!("b{tail}");
    let (block, range) = match tail[1..].split_once("-r") {
        Some((block, start)) => (block, Some(start)),
        None => (&tail[1..], None),
    };
    let parsed = |text: &str, radix: u32| u64::from_str_radix(text, radix).ok();
    let rebuilt = match (block.parse::<u32>().ok(), range.map(|start| parsed(start, 16))) {
        (Some(block), None) => block_job_name(workflow, uid, block),
        (Some(block), Some(Some(start))) => range_job_name(workflow, uid, block, start),
        _ => return false,
    };
    rebuilt == name
}

fn job_name(workflow: &str, uid: &str, tail: &str) -> String {
    let uid: String = uid.chars().filter(char::is_ascii_hexdigit).map(|c| c.to_ascii_lowercase()).collect();
    let uid = format!("{uid:0>width$}", width = UID_DIGITS);
    let suffix = format!("-{}-{tail}", &uid[uid.len() - UID_DIGITS..]);
    let room = MAX_LABEL_VALUE.saturating_sub(suffix.len());
    let prefix = crate::pow::clip(workflow, room).trim_end_matches(['-', '.']);
    format!("{prefix}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "3f2a8c1e-0b6d-4e8f-9a7c-5d1e2f3a4b5c";

    #[test]
    fn job_names_carry_a_readable_prefix_and_the_whole_uid() {
        assert_eq!(block_job_name("demo", UID, 3), "demo-3f2a8c1e0b6d4e8f9a7c5d1e2f3a4b5c-b3");
        assert_eq!(workflow_label("demo"), "demo");
    }

    #[test]
    fn a_workflows_job_names_are_told_from_any_other() {
        let long = "w".repeat(80);
        for workflow in ["demo", long.as_str()] {
            assert!(is_workflow_job_name(workflow, UID, &block_job_name(workflow, UID, 7)));
            assert!(is_workflow_job_name(workflow, UID, &range_job_name(workflow, UID, 64, 0xabc)));
            let other = "00000000-0000-4000-8000-000000000000";
            assert!(!is_workflow_job_name(workflow, other, &block_job_name(workflow, UID, 7)), "another uid");
            let planted = format!("{}-extra", block_job_name(workflow, UID, 7));
            assert!(!is_workflow_job_name(workflow, UID, &planted), "{planted}");
        }
        for name in [
            "demo",
            "demo-b1",
            "x-3f2a8c1e0b6d4e8f9a7c5d1e2f3a4b5c-b1",
            "demo-3f2a8c1e0b6d4e8f9a7c5d1e2f3a4b5c-b",
        ] {
            assert!(!is_workflow_job_name("demo", UID, name), "{name}");
        }
        assert!(!is_workflow_job_name("demo", UID, "demo-3f2a8c1e0b6d4e8f9a7c5d1e2f3a4b5c-b1-rXYZ"));
    }

    #[test]
    fn different_workflows_never_share_a_job_name() {
        let long = "w".repeat(200);
        // A name that looks like another's truncated stem, and the same name
        // re-created with a new uid.
        let stem = block_job_name(&long, UID, 1).trim_end_matches("-b1").to_string();
        let other_uid = "00000000-0000-0000-0000-000000000001";
        assert_ne!(block_job_name(&long, UID, 1), block_job_name(&stem, other_uid, 1));
        assert_ne!(block_job_name("demo", UID, 1), block_job_name("demo", other_uid, 1));
        for block in [1, 64] {
            let name = block_job_name(&long, UID, block);
            assert!(name.len() <= 63, "{name}");
            assert!(name.ends_with(&format!("-b{block}")));
        }
        assert!(workflow_label(&long).len() <= 63);
        let range = range_job_name(&long, UID, 64, u64::MAX);
        assert!(range.len() <= 63 && range.ends_with("-b64-rffffffffffffffff"), "{range}");
        assert_ne!(range_job_name("demo", UID, 1, 0x10), range_job_name("demo", UID, 11, 0));
    }

    #[test]
    fn names_stay_valid_whatever_the_prefix() {
        let name = format!("{}-{}", "a".repeat(25), "b".repeat(100));
        let job = block_job_name(&name, UID, 12);
        assert!(!job.contains("--"), "{job}");
        assert!(job.len() <= 63);
        assert!(!block_job_name("a.b-", UID, 1).contains(".-"));
    }
}
