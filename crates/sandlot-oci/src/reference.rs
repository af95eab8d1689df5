//! Image references (`python:3.12`, `ghcr.io/a/b:t`, `127.0.0.1:5000/x@sha256:...`) parsed with docker's
//! rules, so a name means here what it means to `docker pull`.

use std::fmt;

use crate::digest::truncate;
use crate::{Digest, FormatError};

/// Docker Hub's name in references.
const DOCKER_HUB: &str = "docker.io";
/// Docker Hub's API host: `docker.io` itself serves no registry API.
const DOCKER_HUB_API: &str = "registry-1.docker.io";
/// The longest repository docker accepts (host excluded).
const MAX_REPOSITORY: usize = 255;
/// The longest tag the distribution spec allows.
const MAX_TAG: usize = 128;
/// The longest registry host (a DNS name is at most 253 characters, plus a port).
const MAX_REGISTRY: usize = 260;

/// A parsed image reference. `tag` is `Some("latest")` when neither a tag nor a digest was given.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Reference {
    /// The registry as written (`docker.io`, `ghcr.io`, `127.0.0.1:5000`).
    pub registry: String,
    /// The repository within it (`library/python`).
    pub repository: String,
    /// The tag, if any.
    pub tag: Option<String>,
    /// The digest, if pinned.
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parses `s` as docker does: a first component with a `.` or `:` or equal to `localhost` is a
    /// registry, otherwise the registry is `docker.io` and a single-component name gains `library/`.
    pub fn parse(s: &str) -> Result<Reference, FormatError> {
        let bad = |why: &str| FormatError::new(format!("image reference {:?}: {why}", truncate(s)));
        if s.is_empty() {
            return Err(bad("is empty"));
        }
        if s.len() > MAX_REGISTRY + 1 + MAX_REPOSITORY + 1 + MAX_TAG + 1 + 71 {
            return Err(bad("is too long"));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((rest, d)) => (rest, Some(Digest::parse(d).map_err(|e| bad(&e.0))?)),
            None => (s, None),
        };
        // A tag is what follows the last ':' after the last '/' (an earlier ':' is a port).
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(tag) = tag {
            check_tag(tag).map_err(|why| bad(&why))?;
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, remainder))
                if first.contains('.')
                    || first.contains(':')
                    || first == "localhost"
                    || first != first.to_lowercase() =>
            {
                (first.to_owned(), remainder.to_owned())
            }
            _ => (DOCKER_HUB.to_owned(), name.to_owned()),
        };
        let registry = if registry == "index.docker.io" { DOCKER_HUB.to_owned() } else { registry };
        check_registry(&registry).map_err(|why| bad(&why))?;
        let repository = if registry == DOCKER_HUB && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        check_repository(&repository).map_err(|why| bad(&why))?;
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_owned()),
            (None, Some(_)) => None,
            (None, None) => Some("latest".to_owned()),
        };
        Ok(Reference { registry, repository, tag, digest })
    }

    /// The host the registry API is served from: `registry-1.docker.io` for Docker Hub, else `registry`.
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_API
        } else {
            &self.registry
        }
    }

    /// The short form users type: `python:3.12`, `user/app:1`, `ghcr.io/a/b:t`.
    pub fn familiar(&self) -> String {
        let mut s = if self.registry == DOCKER_HUB {
            self.repository.strip_prefix("library/").unwrap_or(&self.repository).to_owned()
        } else {
            format!("{}/{}", self.registry, self.repository)
        };
        self.push_suffix(&mut s);
        s
    }

    /// What the registry API calls this image: the digest when pinned, else the tag.
    pub fn api_reference(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_owned(),
        }
    }

    fn push_suffix(&self, s: &mut String) {
        if let Some(tag) = &self.tag {
            s.push(':');
            s.push_str(tag);
        }
        if let Some(d) = &self.digest {
            s.push('@');
            s.push_str(d.as_str());
        }
    }
}

impl fmt::Display for Reference {
    /// The fully qualified form, `docker.io/library/python:3.12[@sha256:...]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = format!("{}/{}", self.registry, self.repository);
        self.push_suffix(&mut s);
        f.write_str(&s)
    }
}

impl std::str::FromStr for Reference {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Reference, FormatError> {
        Reference::parse(s)
    }
}

fn check_tag(tag: &str) -> Result<(), String> {
    let ok_first = tag.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
    let ok_rest = tag.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if tag.len() > MAX_TAG || !ok_first || !ok_rest {
        return Err(format!(
            "tag {:?} must be 1 to {MAX_TAG} characters of letters, digits, '_', '.', '-' (not starting with '.' or '-')",
            truncate(tag)
        ));
    }
    Ok(())
}

fn check_registry(host: &str) -> Result<(), String> {
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) if !host.starts_with('[') || n.ends_with(']') => (n, Some(p)),
        _ => (host, None),
    };
    let name_ok = if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !name.is_empty()
            && name.split('.').all(|l| {
                !l.is_empty()
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
    };
    let port_ok = port.is_none_or(|p| {
        !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()
    });
    if host.len() > MAX_REGISTRY || !name_ok || !port_ok {
        return Err(format!("registry {:?} is not a host name or address with an optional :port", truncate(host)));
    }
    Ok(())
}

fn check_repository(repo: &str) -> Result<(), String> {
    if repo.len() > MAX_REPOSITORY {
        return Err(format!("repository is longer than {MAX_REPOSITORY} characters"));
    }
    if repo.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err("repository name must be lowercase".to_owned());
    }
    for component in repo.split('/') {
        if !path_component_ok(component) {
            return Err(format!(
                "repository component {:?} must be lowercase letters and digits, separated by '.', '_', '__' or '-'",
                truncate(component)
            ));
        }
    }
    Ok(())
}

/// Docker's `[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*`.
fn path_component_ok(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn parts(s: &str) -> (String, String, Option<String>, Option<String>) {
        let r = Reference::parse(s).unwrap();
        (r.registry, r.repository, r.tag, r.digest.map(|d| d.to_string()))
    }

    #[test]
    fn docker_hub_names_are_normalised_as_docker_does() {
        assert_eq!(parts("python:3.12"), ("docker.io".into(), "library/python".into(), Some("3.12".into()), None));
        assert_eq!(parts("python"), ("docker.io".into(), "library/python".into(), Some("latest".into()), None));
        assert_eq!(parts("user/app"), ("docker.io".into(), "user/app".into(), Some("latest".into()), None));
        assert_eq!(
            parts("docker.io/python"),
            ("docker.io".into(), "library/python".into(), Some("latest".into()), None)
        );
        assert_eq!(
            parts("index.docker.io/library/python:3"),
            ("docker.io".into(), "library/python".into(), Some("3".into()), None)
        );
        let r = Reference::parse("python:3.12").unwrap();
        assert_eq!(r.api_host(), "registry-1.docker.io");
        assert_eq!(r.familiar(), "python:3.12");
        assert_eq!(r.to_string(), "docker.io/library/python:3.12");
        assert_eq!(Reference::parse("user/app").unwrap().familiar(), "user/app:latest");
    }

    #[test]
    fn other_registries_ports_and_digests() {
        assert_eq!(parts("ghcr.io/a/b:t"), ("ghcr.io".into(), "a/b".into(), Some("t".into()), None));
        assert_eq!(
            parts(&format!("127.0.0.1:5000/x@{D}")),
            ("127.0.0.1:5000".into(), "x".into(), None, Some(D.into()))
        );
        assert_eq!(parts("localhost/x"), ("localhost".into(), "x".into(), Some("latest".into()), None));
        assert_eq!(
            parts("localhost:5000/a/b/c:1.0-rc_1"),
            ("localhost:5000".into(), "a/b/c".into(), Some("1.0-rc_1".into()), None)
        );
        assert_eq!(
            parts(&format!("ghcr.io/a/b:t@{D}")),
            ("ghcr.io".into(), "a/b".into(), Some("t".into()), Some(D.into()))
        );
        assert_eq!(parts("[::1]:5000/x:y"), ("[::1]:5000".into(), "x".into(), Some("y".into()), None));
        let r = Reference::parse("ghcr.io/a/b:t").unwrap();
        assert_eq!(r.api_host(), "ghcr.io");
        assert_eq!(r.familiar(), "ghcr.io/a/b:t");
        let pinned = Reference::parse(&format!("python@{D}")).unwrap();
        assert_eq!(pinned.to_string(), format!("docker.io/library/python@{D}"));
        assert_eq!(pinned.api_reference(), D);
    }

    #[test]
    fn malformed_references_are_refused_with_the_reason() {
        let err = Reference::parse("Python:3").unwrap_err();
        assert!(err.0.contains("lowercase"), "{err}");
        for bad in [
            "",
            "python:",
            "python:-x",
            "a//b",
            "a/b/",
            "-a",
            "a..b",
            "python@sha256:abc",
            "ghcr.io/",
            "host:99999/x",
            "ghcr.io/a b",
            "python:3.12:4",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(Reference::parse(&format!("a/{}", "b".repeat(300))).is_err());
        assert!(Reference::parse(&format!("a:{}", "b".repeat(129))).is_err());
        assert!(Reference::parse(&format!("a:{}", "b".repeat(128))).is_ok());
        assert!(Reference::parse("a__b/c-----d/e.f_g").is_ok());
        assert!(Reference::parse("a___b").is_err());
    }
}
