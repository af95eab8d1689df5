//! `.dockerignore`: which paths of a build context `COPY` and `ADD` do not see, with Docker's rules
//! (moby's patternmatcher): one pattern a line, `#` comments, a leading `/` or `./` dropped, `!`
//! re-including what an earlier line excluded (the last line that matches decides), `*` `?` `[...]`
//! within a component as Go's `filepath.Match`, `**` for any number of directories. A pattern names
//! paths from the context's root (`*.log` is `build.log`, not `sub/build.log`), and a path is
//! ignored when it or a directory above it matches.

use crate::context::wildcard_match;

/// Most bytes of a `.dockerignore` read.
pub const MAX_DOCKERIGNORE_BYTES: u64 = 1 << 20;

/// The patterns of one `.dockerignore`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patterns {
    /// `(exception, components)` in file order.
    rules: Vec<(bool, Vec<String>)>,
}

impl Patterns {
    /// The patterns of a `.dockerignore`'s text.
    pub fn parse(text: &str) -> Patterns {
        let mut rules = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
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
        Patterns { rules }
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

/// Whether the pattern components match the path components whole (`**` spans any number of them).
fn matches(parts: &[String], names: &[&str]) -> bool {
    match parts.split_first() {
        None => names.is_empty(),
        Some((p, rest)) if p == "**" => (0..=names.len()).any(|i| matches(rest, &names[i..])),
        Some((p, rest)) => match names.split_first() {
            Some((n, after)) => wildcard_match(p.as_bytes(), n.as_bytes()) && matches(rest, after),
            None => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_directories_wildcards_and_doublestars_match_from_the_root() {
        let p = Patterns::parse("# comment\ntarget\n*.log\n/docs/*.md\nsecret/\n**/*.pyc\n");
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
        let p = Patterns::parse("*.md\n!README.md\n");
        assert!(p.ignores("NOTES.md") && !p.ignores("README.md"));
        assert!(p.has_exceptions());
        let p = Patterns::parse("!README.md\n*.md\n");
        assert!(p.ignores("README.md"));
        let p = Patterns::parse("docs\n!docs/keep.txt\n");
        assert!(p.ignores("docs/other.txt") && !p.ignores("docs/keep.txt"));
    }
}
