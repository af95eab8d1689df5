//! Content digests. Only `sha256:` followed by 64 lowercase hex digits is accepted: that is what every
//! registry and tool writes, and refusing everything else means a digest can be used as a file name.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

use crate::FormatError;

/// A sha256 content digest, always `sha256:` + 64 lowercase hex digits.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`; any other algorithm, length or case is refused.
    pub fn parse(s: &str) -> Result<Digest, FormatError> {
        let Some(hex) = s.strip_prefix("sha256:") else {
            return Err(FormatError::new(format!(
                "digest {:?} is not of the form sha256:<64 hex digits>",
                truncate(s)
            )));
        };
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(FormatError::new(format!(
                "digest {:?} must have 64 lowercase hex digits after sha256:",
                truncate(s)
            )));
        }
        Ok(Digest(s.to_owned()))
    }

    /// The 64 hex digits, without the `sha256:` prefix.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest::from_hasher(Sha256::new_with_prefix(bytes))
    }

    /// The digest a finished hasher has computed.
    pub(crate) fn from_hasher(hasher: Sha256) -> Digest {
        let sum = hasher.finalize();
        let mut s = String::with_capacity(71);
        s.push_str("sha256:");
        for b in sum {
            s.push_str(&format!("{b:02x}"));
        }
        Digest(s)
    }

    /// The digest as a string, `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// At most 80 characters of untrusted input in an error message.
pub(crate) fn truncate(s: &str) -> String {
    if s.chars().count() <= 80 {
        s.to_owned()
    } else {
        format!("{}...", s.chars().take(80).collect::<String>())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.0)
    }
}

impl FromStr for Digest {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Digest, FormatError> {
        Digest::parse(s)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn of_empty_input_is_the_well_known_sha256() {
        assert_eq!(Digest::of(b"").as_str(), EMPTY);
        assert_eq!(Digest::of(b"").hex(), &EMPTY[7..]);
    }

    #[test]
    fn parse_accepts_only_lowercase_sha256_of_the_right_length() {
        assert_eq!(Digest::parse(EMPTY).unwrap().to_string(), EMPTY);
        assert!(Digest::parse(&EMPTY.to_uppercase()).is_err());
        assert!(Digest::parse(&EMPTY.replace("sha256", "SHA256")).is_err());
        assert!(Digest::parse(&EMPTY[..70]).is_err());
        assert!(Digest::parse(&format!("{EMPTY}0")).is_err());
        assert!(Digest::parse(&EMPTY.replace("sha256", "sha512")).is_err());
        assert!(Digest::parse(&format!("sha256:../../{}", &EMPTY[13..])).is_err());
        assert!(Digest::parse("").is_err());
    }

    #[test]
    fn serde_round_trips_as_a_plain_string_and_refuses_bad_ones() {
        let d = Digest::parse(EMPTY).unwrap();
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, format!("\"{EMPTY}\""));
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);
        assert!(serde_json::from_str::<Digest>("\"sha256:abc\"").is_err());
        assert_eq!(EMPTY.parse::<Digest>().unwrap(), d);
    }
}
