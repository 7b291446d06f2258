//! `--auth tokens`: a file of `token caller-name` lines (a mounted Secret),
//! re-read whenever it changes on disk.
//!
//! Every re-read takes effect for every valid line, so a revocation (a line
//! removed) always applies, even when another line of the same edit is
//! malformed: a malformed line is skipped and logged by its number, never by
//! its content (it may hold a token). A file that is empty or cannot be read
//! admits no one.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::RwLock;
use std::time::SystemTime;

use super::{Refusal, digest};
use crate::ids::Caller;

/// Callers by token digest.
pub type TokenTable = HashMap<[u8; 32], Caller>;

/// What one read of the file made of it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ParsedTokens {
    pub tokens: TokenTable,
    /// Lines (1-based) that are not `token caller-name`.
    pub malformed_lines: Vec<usize>,
    /// Lines (1-based) whose token appears on another line too: such a
    /// token admits no one, since it cannot say which caller it stands for.
    pub duplicate_lines: Vec<usize>,
}

/// Parses `token caller-name` lines; `#` starts a comment.
pub fn parse_tokens(text: &str) -> ParsedTokens {
    let mut parsed = ParsedTokens::default();
    let mut lines_of: HashMap<[u8; 32], Vec<usize>> = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(token), Some(name), None) = (words.next(), words.next(), words.next()) else {
            parsed.malformed_lines.push(number);
            continue;
        };
        let key = digest(token);
        lines_of.entry(key).or_default().push(number);
        parsed.tokens.insert(key, Caller::new(name));
    }
    for (key, lines) in lines_of {
        if lines.len() > 1 {
            parsed.tokens.remove(&key);
            parsed.duplicate_lines.extend(lines);
        }
    }
    parsed.duplicate_lines.sort_unstable();
    parsed
}

/// A file's modification time and size, to notice that it changed.
type FileStamp = (SystemTime, u64);

/// The tokens file, re-read when its modification time or size changes (a
/// mounted Secret is updated by swapping a symlink, which `metadata` follows).
pub struct TokenFile {
    path: PathBuf,
    loaded: RwLock<(Option<FileStamp>, TokenTable)>,
}

impl TokenFile {
    /// Loads the file once; a file that cannot be read is an error at start-up.
    pub fn open(path: PathBuf) -> Result<Self, String> {
        std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let file = Self { path, loaded: RwLock::new((None, HashMap::new())) };
        file.reload();
        Ok(file)
    }

    fn stamp(&self) -> Option<FileStamp> {
        let metadata = std::fs::metadata(&self.path).ok()?;
        Some((metadata.modified().ok()?, metadata.len()))
    }

    fn reload(&self) {
        let stamp = self.stamp();
        let tokens = match std::fs::read_to_string(&self.path) {
            Ok(text) => {
                let parsed = parse_tokens(&text);
                if !parsed.malformed_lines.is_empty() {
                    tracing::warn!(path = %self.path.display(), lines = ?parsed.malformed_lines,
                        "tokens file: lines that are not `token caller-name` are skipped");
                }
                if !parsed.duplicate_lines.is_empty() {
                    tracing::warn!(path = %self.path.display(), lines = ?parsed.duplicate_lines,
                        "tokens file: a token on more than one line admits no one");
                }
                if parsed.tokens.is_empty() {
                    tracing::warn!(path = %self.path.display(), "tokens file has no valid line: no one is admitted");
                }
                tracing::info!(tokens = parsed.tokens.len(), path = %self.path.display(), "tokens file loaded");
                parsed.tokens
            }
            Err(err) => {
                tracing::warn!(path = %self.path.display(), error = %err,
                    "tokens file cannot be read: no one is admitted until it can");
                HashMap::new()
            }
        };
        *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = (stamp, tokens);
    }

    pub fn caller(&self, token: &str) -> Result<Caller, Refusal> {
        let current = self.stamp();
        let stale = {
            let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
            // A vanished file (stamp None) is stale too, so it admits no one.
            current.is_none() || loaded.0 != current
        };
        if stale {
            self.reload();
        }
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        loaded.1.get(&digest(token)).cloned().ok_or(Refusal::InvalidToken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_lines_map_tokens_to_callers() {
        let parsed = parse_tokens("# agents\nt-alice alice\n\n  t-bob   bob  \n");
        assert_eq!(parsed.tokens[&digest("t-alice")], Caller::new("alice"));
        assert_eq!(parsed.tokens[&digest("t-bob")], Caller::new("bob"));
        assert_eq!(parsed.tokens.len(), 2);
        assert!(parsed.malformed_lines.is_empty() && parsed.duplicate_lines.is_empty());
    }

    #[test]
    fn a_malformed_line_is_skipped_and_the_others_apply() {
        let parsed = parse_tokens("lonely\nt-bob bob\na b c\n");
        assert_eq!(parsed.malformed_lines, [1, 3]);
        assert_eq!(parsed.tokens.len(), 1);
        assert_eq!(parsed.tokens[&digest("t-bob")], Caller::new("bob"));
    }

    #[test]
    fn a_token_on_two_lines_admits_no_one() {
        let parsed = parse_tokens("a x\nb y\na z\n");
        assert_eq!(parsed.duplicate_lines, [1, 3]);
        assert!(!parsed.tokens.contains_key(&digest("a")));
        assert_eq!(parsed.tokens[&digest("b")], Caller::new("y"));
    }

    #[test]
    fn a_re_read_applies_every_valid_line_even_beside_a_broken_one() {
        let dir = std::env::temp_dir().join(format!("mcp-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        std::fs::write(&path, "one alice\n").unwrap();
        let file = TokenFile::open(path.clone()).unwrap();
        assert_eq!(file.caller("one"), Ok(Caller::new("alice")));
        assert_eq!(file.caller("two"), Err(Refusal::InvalidToken));
        std::fs::write(&path, "two bob\nthree carol\n").unwrap();
        assert_eq!(file.caller("two"), Ok(Caller::new("bob")));
        assert_eq!(file.caller("one"), Err(Refusal::InvalidToken));
        // Revoking bob in an edit that also breaks a line: the revocation applies.
        std::fs::write(&path, "broken\nthree carol\n").unwrap();
        assert_eq!(file.caller("two"), Err(Refusal::InvalidToken));
        assert_eq!(file.caller("three"), Ok(Caller::new("carol")));
        // An empty file, then a missing one, admit no one.
        std::fs::write(&path, "").unwrap();
        assert_eq!(file.caller("three"), Err(Refusal::InvalidToken));
        std::fs::write(&path, "three carol\n").unwrap();
        assert_eq!(file.caller("three"), Ok(Caller::new("carol")));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(file.caller("three"), Err(Refusal::InvalidToken));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
