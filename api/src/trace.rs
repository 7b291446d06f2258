//! W3C trace context (`traceparent`, version 00), parsed strictly and
//! written back the same way (pure): how one call's trace is carried from
//! the MCP request to the workflow (an annotation), the operator, and the
//! block Jobs (the `TRACEPARENT` environment variable).
//!
//! A traceparent on a workflow is a claim like any annotation: it only ever
//! names the trace our own spans join, and one that does not parse is
//! ignored (a new trace is started), never an error.

use std::fmt;

/// The environment variable a block Job's miner reads its parent from.
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";
/// A version-00 traceparent is exactly this long: `00-` 32 hex `-` 16 hex `-` 2 hex.
pub const TRACEPARENT_BYTES: usize = 55;

/// One span's place in a trace, as the `traceparent` header spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    /// The span this context's holder continues from.
    pub parent_id: [u8; 8],
    /// Bit 0: sampled.
    pub flags: u8,
}

impl TraceParent {
    /// Reads a version-00 `traceparent`; `None` for anything else, including
    /// the all-zero ids the spec calls invalid. Later versions are read by
    /// their first four fields, as the spec asks.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let mut parts = text.split('-');
        let version = parts.next()?;
        let (trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?);
        let version = hex_array::<1>(version)?[0];
        if version == 0xff || (version == 0 && (parts.next().is_some() || text.len() != TRACEPARENT_BYTES)) {
            return None;
        }
        let parsed = Self {
            trace_id: hex_array(trace)?,
            parent_id: hex_array(parent)?,
            flags: hex_array::<1>(flags)?[0],
        };
        (parsed.trace_id != [0; 16] && parsed.parent_id != [0; 8]).then_some(parsed)
    }

    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The trace id as 32 lowercase hex digits (what log lines carry).
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "00-{}-{}-{:02x}", hex(&self.trace_id), hex(&self.parent_id), self.flags)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Exactly `N` bytes of lowercase hex.
fn hex_array<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != N * 2 || !text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[i * 2..i * 2 + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specs_example_reads_and_writes_back_the_same() {
        let parent = TraceParent::parse(EXAMPLE).unwrap();
        assert_eq!(parent.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(parent.sampled());
        assert_eq!(parent.to_string(), EXAMPLE);
        assert_eq!(parent.to_string().len(), TRACEPARENT_BYTES);
    }

    #[test]
    fn anything_malformed_is_no_parent() {
        for bad in [
            "",
            "00",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_by_its_first_four_fields() {
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more";
        let parent = TraceParent::parse(later).unwrap();
        assert!(!parent.sampled());
        assert_eq!(parent.to_string(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
    }
}
