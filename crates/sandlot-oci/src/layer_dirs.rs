//! Which paths of an image being built are directories, read from its layers: what `COPY f /dest`
//! needs to know to put `f` *inside* an existing directory `/dest`, as Docker does, rather than as a
//! file named `/dest`.
//!
//! The layers are hostile input like any other (an image someone pushed): only tar headers are read,
//! nothing is unpacked, and the index is bounded ([`MAX_ENTRIES`] paths, then the builder answers
//! "not known to be a directory" and the copy falls back to the file rule, which cannot escape
//! anything: the layer `COPY` writes is unpacked beneath the root like every layer).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read};

/// Most directories and links remembered for one build; past it new ones are not recorded.
pub const MAX_ENTRIES: usize = 1 << 20;
/// Most symbolic links followed while resolving one path (as the kernel's 40).
const MAX_LINKS: usize = 40;

/// The directories and symbolic links of an image's layers applied in order (whiteouts included).
#[derive(Debug, Default, Clone)]
pub struct LayerDirs {
    dirs: BTreeSet<String>,
    links: BTreeMap<String, String>,
}

impl LayerDirs {
    /// Applies one layer, a tar stream (plain, gzip or zstd: sniffed), over what is known so far.
    pub fn apply(&mut self, layer: impl Read) -> io::Result<()> {
        let reader = crate::archive::decompressing(layer)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        // The tar crate reads a long name or PAX member whole: a layer's are checked as they pass.
        let reader = crate::archive::HeaderGuard::new(reader);
        let mut archive = tar::Archive::new(reader);
        for entry in archive.entries()? {
            let entry = entry?;
            let raw = entry.path_bytes();
            let Some(path) = clean(&String::from_utf8_lossy(&raw)) else { continue };
            let (parent, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            if name == ".wh..wh..opq" {
                self.remove_below(parent);
                continue;
            }
            if let Some(gone) = name.strip_prefix(".wh.") {
                let gone = if parent.is_empty() { gone.to_string() } else { format!("{parent}/{gone}") };
                self.remove(&gone);
                continue;
            }
            // Whatever was at the path is replaced by this entry.
            let kind = entry.header().entry_type();
            if !kind.is_dir() {
                self.remove(&path);
            }
            if self.dirs.len() + self.links.len() >= MAX_ENTRIES {
                continue;
            }
            if kind.is_dir() {
                self.links.remove(&path);
                self.dirs.insert(path);
            } else if kind.is_symlink() {
                if let Some(target) = entry.link_name_bytes() {
                    self.links.insert(path, String::from_utf8_lossy(&target).into_owned());
                }
            }
        }
        Ok(())
    }

    /// Whether `path` (absolute) names a directory, following symbolic links inside the image
    /// (`/bin` → `usr/bin` on a merged-/usr system) as a copy into it would.
    pub fn is_dir(&self, path: &str) -> bool {
        let Some(mut p) = clean(path) else { return false };
        if p.is_empty() {
            return true;
        }
        for _ in 0..MAX_LINKS {
            match self.resolve_once(&p) {
                Some(next) if next != p => p = next,
                Some(_) => return p.is_empty() || self.dirs.contains(&p),
                None => return false,
            }
        }
        false
    }

    /// `p` with its first symbolic link (the longest prefix that is one) replaced by its target, or
    /// `p` itself when no component is a link; `None` when a link leads outside the names we know.
    fn resolve_once(&self, p: &str) -> Option<String> {
        let parts: Vec<&str> = p.split('/').collect();
        for i in 1..=parts.len() {
            let prefix = parts[..i].join("/");
            if let Some(target) = self.links.get(&prefix) {
                let base = if target.starts_with('/') { String::new() } else { parts[..i - 1].join("/") };
                let rest = parts[i..].join("/");
                let joined = [base.as_str(), target.as_str(), rest.as_str()]
                    .iter()
                    .filter(|s| !s.is_empty())
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("/");
                return clean(&format!("/{joined}"));
            }
        }
        Some(p.to_string())
    }

    fn remove(&mut self, path: &str) {
        self.dirs.remove(path);
        self.links.remove(path);
        self.remove_below(path);
    }

    fn remove_below(&mut self, dir: &str) {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let doomed: Vec<String> =
            self.dirs.range(prefix.clone()..).take_while(|d| d.starts_with(&prefix)).cloned().collect();
        for d in doomed {
            self.dirs.remove(&d);
        }
        let doomed: Vec<String> = self
            .links
            .range(prefix.clone()..)
            .take_while(|(d, _)| d.starts_with(&prefix))
            .map(|(d, _)| d.clone())
            .collect();
        for d in doomed {
            self.links.remove(&d);
        }
    }
}

/// `path` without leading `/` or `./`, `.` components and trailing `/`; `..` climbs (never above the
/// root). The root itself is the empty string. `None` for a NUL.
fn clean(path: &str) -> Option<String> {
    if path.contains('\0') {
        return None;
    }
    Some(crate::lexical_components(path).join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(entries: &[(&str, tar::EntryType, Option<&str>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_size(0);
            h.set_mode(0o755);
            match link {
                Some(l) => b.append_link(&mut h, path, l).unwrap(),
                None => b.append_data(&mut h, path, io::empty()).unwrap(),
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn directories_links_and_whiteouts_are_followed_in_layer_order() {
        use tar::EntryType::{Directory, Regular, Symlink};
        let mut d = LayerDirs::default();
        d.apply(
            &layer(&[
                ("usr/", Directory, None),
                ("usr/bin/", Directory, None),
                ("bin", Symlink, Some("usr/bin")),
                ("opt/", Directory, None),
                ("opt/tool/", Directory, None),
                ("etc/", Directory, None),
                ("etc/passwd", Regular, None),
            ])[..],
        )
        .unwrap();
        assert!(d.is_dir("/usr/bin") && d.is_dir("/bin") && d.is_dir("/bin/") && d.is_dir("/"));
        assert!(d.is_dir("/opt/tool") && !d.is_dir("/etc/passwd") && !d.is_dir("/nowhere"));
        // A later layer: a whiteout, an opaque directory, a directory replaced by a file.
        d.apply(
            &layer(&[("opt/.wh.tool", Regular, None), ("usr/.wh..wh..opq", Regular, None), ("etc", Regular, None)])[..],
        )
        .unwrap();
        assert!(!d.is_dir("/opt/tool") && d.is_dir("/opt"));
        assert!(d.is_dir("/usr") && !d.is_dir("/usr/bin") && !d.is_dir("/bin"), "{d:?}");
        assert!(!d.is_dir("/etc"));
    }

    #[test]
    fn a_long_name_past_the_header_bound_is_refused_before_it_is_read() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.set_mode(0o755);
        let long = "d/".repeat(600_000);
        b.append_data(&mut h, &long, io::empty()).unwrap();
        let tar = b.into_inner().unwrap();
        let err = LayerDirs::default().apply(&tar[..]).unwrap_err();
        assert!(err.to_string().contains("metadata member"), "{err}");
        // Under the bound, the same shape is read.
        let mut b = tar::Builder::new(Vec::new());
        b.append_data(&mut h, "d/".repeat(2_000), io::empty()).unwrap();
        let mut d = LayerDirs::default();
        d.apply(&b.into_inner().unwrap()[..]).unwrap();
        assert!(d.is_dir(&"/d".repeat(2_000)));
    }

    #[test]
    fn a_link_loop_or_a_link_out_of_the_root_is_no_directory() {
        use tar::EntryType::{Directory, Symlink};
        let mut d = LayerDirs::default();
        d.apply(
            &layer(&[
                ("a", Symlink, Some("b")),
                ("b", Symlink, Some("a")),
                ("up", Symlink, Some("../../..")),
                ("x/", Directory, None),
            ])[..],
        )
        .unwrap();
        assert!(!d.is_dir("/a"));
        // `..` never climbs above the root: the link leads to the root, a directory.
        assert!(d.is_dir("/up"));
        assert!(d.is_dir("/up/x"));
    }
}
