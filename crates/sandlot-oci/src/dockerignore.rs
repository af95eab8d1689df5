//! `.dockerignore`: which paths of a build context `COPY` and `ADD` do not see, with Docker's rules
//! (moby's patternmatcher): one pattern a line, `#` comments, a leading `/` or `./` dropped, `!`
//! re-including what an earlier line excluded (the last line that matches decides), `*` `?` `[...]`
//! within a component as Go's `filepath.Match`, `**` for any number of directories. A pattern names
//! paths from the context's root (`*.log` is `build.log`, not `sub/build.log`), and a path is
//! ignored when it or a directory above it matches.

use crate::context::wildcard_match;

/// Most bytes of a `.dockerignore` read.
pub const MAX_DOCKERIGNORE_BYTES: u64 = 1 << 20;
/// Most patterns kept from one `.dockerignore`; the rest are refused.
pub const MAX_PATTERNS: usize = 1000;
/// Longest pattern (bytes) and most components in one.
const MAX_PATTERN_BYTES: usize = 4096;
const MAX_PATTERN_PARTS: usize = 128;

/// The patterns of one `.dockerignore`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patterns {
    /// `(exception, components)` in file order.
    rules: Vec<(bool, Vec<String>)>,
}

impl Patterns {
    /// The patterns of a `.dockerignore`'s text; refused when it has more than [`MAX_PATTERNS`] or a
    /// pattern past 4096 bytes or 128 components (matching costs patterns × paths).
    pub fn parse(text: &str) -> Result<Patterns, String> {
        let mut rules = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            if line.len() > MAX_PATTERN_BYTES || line.split('/').count() > MAX_PATTERN_PARTS {
                return Err(format!(".dockerignore: a pattern of {} bytes is longer than {MAX_PATTERN_BYTES} bytes or {MAX_PATTERN_PARTS} components", line.len()));
            }
            if rules.len() == MAX_PATTERNS {
                return Err(format!(".dockerignore: more than {MAX_PATTERNS} patterns; name directories instead"));
            }
            let (exception, pattern) = match line.strip_prefix('!') {
                Some(p) => (true, p.trim()),
                None => (false, line),
            };
            let parts: Vec<String> =
                pattern.split('/').filter(|c| !c.is_empty() && *c != ".").map(str::to_string).collect();
            if !parts.is_empty() {
                rules.push((exception, parts));
            }
        }
        Ok(Patterns { rules })
    }

    /// Whether any line is an exception (`!`): then an ignored directory may still hold paths that
    /// are not, and a walk must look inside it.
    pub fn has_exceptions(&self) -> bool {
        self.rules.iter().any(|(e, _)| *e)
    }

    /// Whether `path` (relative to the context's root, `/`-separated) is ignored.
    pub fn ignores(&self, path: &str) -> bool {
        let names: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
        if names.is_empty() {
            return false;
        }
        let mut ignored = false;
        for (exception, parts) in &self.rules {
            // The path or a directory above it.
            let hit = (1..=names.len()).any(|n| matches(parts, &names[..n]));
            if hit {
                ignored = !exception;
            }
        }
        ignored
    }
}

/// Whether the pattern components match the path components whole (`**` spans any number of them):
/// a table of which suffixes match which, parts × names steps (both at most 128), never a search.
fn matches(parts: &[String], names: &[&str]) -> bool {
    // ok[j] for the current i: parts[i..] matches names[j..].
    let mut ok = vec![false; names.len() + 1];
    ok[names.len()] = true;
    for p in parts.iter().rev() {
        let mut next = vec![false; names.len() + 1];
        for j in (0..=names.len()).rev() {
            next[j] = if p == "**" {
                ok[j] || (j < names.len() && next[j + 1])
            } else {
                j < names.len() && ok[j + 1] && wildcard_match(p.as_bytes(), names[j].as_bytes())
            };
        }
        ok = next;
    }
    ok[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_directories_wildcards_and_doublestars_match_from_the_root() {
        let p = Patterns::parse("# comment\ntarget\n*.log\n/docs/*.md\nsecret/\n**/*.pyc\n").unwrap();
        assert!(p.ignores("target") && p.ignores("target/debug/x"));
        assert!(p.ignores("build.log") && !p.ignores("sub/build.log"));
        assert!(p.ignores("docs/a.md") && !p.ignores("docs/a.txt"));
        assert!(p.ignores("secret/key"));
        assert!(p.ignores("x.pyc") && p.ignores("src/pkg/x.pyc"));
        assert!(!p.ignores("src/main.py"));
        assert!(!p.has_exceptions());
    }

    #[test]
    fn an_exception_reincludes_and_the_last_matching_line_decides() {
        let p = Patterns::parse("*.md\n!README.md\n").unwrap();
        assert!(p.ignores("NOTES.md") && !p.ignores("README.md"));
        assert!(p.has_exceptions());
        let p = Patterns::parse("!README.md\n*.md\n").unwrap();
        assert!(p.ignores("README.md"));
        let p = Patterns::parse("docs\n!docs/keep.txt\n").unwrap();
        assert!(p.ignores("docs/other.txt") && !p.ignores("docs/keep.txt"));
        // Hostile patterns cost patterns × components, and their number is bounded.
        let stars = format!("{}x", "**/".repeat(120));
        let p = Patterns::parse(&stars).unwrap();
        assert!(!p.ignores(&vec!["a"; 128].join("/")));
        assert!(Patterns::parse(&"a\n".repeat(MAX_PATTERNS + 1)).is_err());
    }
}
