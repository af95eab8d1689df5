//! Platforms (`linux/amd64`, `linux/arm64/v8`) and how an index entry is matched against the one wanted.

use std::fmt;

use crate::digest::truncate;
use crate::FormatError;

/// An OS, CPU architecture and optional variant, as in the OCI image index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Platform {
    /// `linux`.
    pub os: String,
    /// `amd64`, `arm64`, `arm`, ...
    pub architecture: String,
    /// `v8`, `v7`, ... when the architecture has variants.
    pub variant: Option<String>,
}

impl Platform {
    /// Parses `os/arch` or `os/arch/variant`.
    pub fn parse(s: &str) -> Result<Platform, FormatError> {
        let bad = || {
            FormatError::new(format!("platform {:?} must be os/arch or os/arch/variant, like linux/amd64", truncate(s)))
        };
        let word =
            |w: &str| !w.is_empty() && w.len() <= 32 && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let parts: Vec<&str> = s.split('/').collect();
        if !(2..=3).contains(&parts.len()) || !parts.iter().all(|p| word(p)) {
            return Err(bad());
        }
        Ok(Platform {
            os: parts[0].to_ascii_lowercase(),
            architecture: parts[1].to_ascii_lowercase(),
            variant: parts.get(2).map(|v| v.to_ascii_lowercase()),
        })
    }

    /// The platform this daemon runs on: `linux/amd64` on x86_64, `linux/arm64` on aarch64.
    pub fn host() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            other => other,
        };
        Platform { os: "linux".to_owned(), architecture: architecture.to_owned(), variant: None }
    }

    /// Whether an index entry for `self` can run where `wanted` is asked for: same OS and architecture,
    /// and the variant equal when `wanted` names one (arm64 without a variant is arm64/v8, as docker says).
    pub fn satisfies(&self, wanted: &Platform) -> bool {
        self.os == wanted.os
            && self.architecture == wanted.architecture
            && match &wanted.variant {
                None => true,
                Some(v) => self.normalised_variant().as_deref() == Some(v.as_str()),
            }
    }

    fn normalised_variant(&self) -> Option<String> {
        match (&self.variant, self.architecture.as_str()) {
            (None, "arm64") => Some("v8".to_owned()),
            (v, _) => v.clone(),
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Platform {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Platform, FormatError> {
        Platform::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_two_and_three_parts() {
        let p = Platform::parse("linux/amd64").unwrap();
        assert_eq!((p.os.as_str(), p.architecture.as_str(), p.variant), ("linux", "amd64", None));
        let p = Platform::parse("linux/arm64/v8").unwrap();
        assert_eq!(p.variant.as_deref(), Some("v8"));
        assert_eq!(p.to_string(), "linux/arm64/v8");
        for bad in ["linux", "linux/", "/amd64", "linux/amd64/v8/x", "linux/am d64", ""] {
            assert!(Platform::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn host_is_linux_amd64_on_x86_64() {
        if cfg!(target_arch = "x86_64") {
            assert_eq!(Platform::host(), Platform::parse("linux/amd64").unwrap());
        }
    }

    #[test]
    fn satisfies_matches_variants_like_docker() {
        let p = |s| Platform::parse(s).unwrap();
        assert!(p("linux/arm64").satisfies(&p("linux/arm64/v8")));
        assert!(p("linux/arm64/v8").satisfies(&p("linux/arm64")));
        assert!(p("linux/arm/v7").satisfies(&p("linux/arm")));
        assert!(!p("linux/arm/v6").satisfies(&p("linux/arm/v7")));
        assert!(!p("linux/amd64").satisfies(&p("linux/arm64")));
        assert!(!p("windows/amd64").satisfies(&p("linux/amd64")));
    }
}
