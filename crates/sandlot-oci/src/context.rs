//! A build context: the tar a client uploads with `POST /v1/images/build`, and the layers `COPY` and
//! `ADD` make from it.
//!
//! The context is the tenant's input and is never unpacked on the host. [`Context::open`] indexes the
//! tar once (each entry's kind, mode, size and where its data starts in the spooled file) and a copy
//! writes a new layer tar from that index, reading file data at its offset. Names are normalised
//! (`./a//b` is `a/b`); a `..` component or an absolute escape is refused naming the entry, as are
//! names that are not UTF-8. Owners in the context are ignored: what is copied belongs to root, or to
//! `--chown`. Devices, FIFOs and sockets in the context are left out of copies (they are not files).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;

use crate::dockerfile::Chown;

/// Most entries a context may hold.
pub const MAX_CONTEXT_ENTRIES: usize = 1_000_000;
/// Longest member name (and link target) of a context, bytes: Linux's PATH_MAX.
pub const MAX_CONTEXT_NAME: usize = 4096;
/// Most components in a member name.
pub const MAX_CONTEXT_DEPTH: usize = 128;
/// Memory the index of one context may take (names, link targets and a fixed cost per entry), bytes.
pub const MAX_CONTEXT_INDEX_BYTES: usize = 64 << 20;
/// What an entry of the index costs beyond its name and link: the entry and the map's node.
const ENTRY_COST: usize = 96;

/// A context that cannot be read or a copy that cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The upload is not a tar, or an entry in it is refused.
    #[error("the build context: {0}")]
    Invalid(String),
    /// A `COPY`/`ADD` source is not in the context.
    #[error("{0:?} is not in the build context (paths are relative to the context's root)")]
    Missing(String),
    /// Reading the spooled context or writing the layer failed.
    #[error("the build context: {0}")]
    Io(#[from] io::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
    /// A hard link: its data is the target's.
    HardLink,
    /// Devices, FIFOs and the like: indexed so a directory copy can say it left them out.
    Other,
}

#[derive(Debug, Clone)]
struct Entry {
    kind: Kind,
    mode: u32,
    size: u64,
    /// Where its data starts in the spooled tar.
    offset: u64,
    /// A symlink's target as written, or a hard link's target (normalised).
    link: Option<String>,
    mtime: u64,
}

/// An indexed build context.
pub struct Context {
    file: File,
    entries: BTreeMap<String, Entry>,
}

/// What a copy wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Copied {
    /// Entries written to the layer.
    pub entries: u64,
    /// Devices, FIFOs and sockets of the context that were left out.
    pub skipped: Vec<String>,
}

/// `name` without `./`, leading `/` or empty components; `None` when it climbs out with `..`.
fn normalise(name: &str) -> Option<String> {
    let mut parts = Vec::new();
    for c in name.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

impl Context {
    /// Indexes the tar in `file`.
    pub fn open(file: File) -> Result<Context, ContextError> {
        let mut entries = BTreeMap::new();
        let mut index_bytes = 0usize;
        // The tar crate reads long names and PAX headers whole: walk the headers first, as an import
        // does, so no member makes the daemon allocate more than a megabyte.
        let mut probe = file.try_clone()?;
        crate::archive::check_headers(&mut probe).map_err(|e| ContextError::Invalid(e.to_string()))?;
        {
            // Offsets are counted from where reading starts: the start of the file, wherever the
            // cursor was left.
            io::Seek::seek(&mut &file, io::SeekFrom::Start(0))?;
            let mut archive = tar::Archive::new(&file);
            let iter = archive.entries().map_err(|e| ContextError::Invalid(format!("not a tar archive: {e}")))?;
            for e in iter {
                let e = e.map_err(|e| ContextError::Invalid(format!("not a tar archive: {e}")))?;
                let raw = e.path_bytes();
                let name = std::str::from_utf8(&raw)
                    .map_err(|_| {
                        ContextError::Invalid(format!(
                            "entry {:?} has a name that is not UTF-8",
                            String::from_utf8_lossy(&raw)
                        ))
                    })?
                    .to_string();
                if name.len() > MAX_CONTEXT_NAME {
                    return Err(ContextError::Invalid(format!(
                        "an entry's name is {} bytes, more than the {MAX_CONTEXT_NAME} a path may have",
                        name.len()
                    )));
                }
                let key = normalise(&name).ok_or_else(|| {
                    ContextError::Invalid(format!("entry {name:?} climbs out of the context with `..`"))
                })?;
                if key.split('/').count() > MAX_CONTEXT_DEPTH {
                    return Err(ContextError::Invalid(format!(
                        "entry {name:?} is more than {MAX_CONTEXT_DEPTH} directories deep"
                    )));
                }
                let h = e.header();
                let kind = match h.entry_type() {
                    tar::EntryType::Regular | tar::EntryType::Continuous => Kind::File,
                    tar::EntryType::Directory => Kind::Dir,
                    tar::EntryType::Symlink => Kind::Symlink,
                    tar::EntryType::Link => Kind::HardLink,
                    // PAX and GNU long-name records are consumed by the tar reader itself.
                    tar::EntryType::XGlobalHeader => continue,
                    _ => Kind::Other,
                };
                let link = match kind {
                    Kind::Symlink | Kind::HardLink => {
                        let l = e
                            .link_name_bytes()
                            .ok_or_else(|| ContextError::Invalid(format!("link {name:?} has no target")))?;
                        if l.len() > MAX_CONTEXT_NAME {
                            return Err(ContextError::Invalid(format!(
                                "link {name:?} has a target of {} bytes, more than {MAX_CONTEXT_NAME}",
                                l.len()
                            )));
                        }
                        let l = std::str::from_utf8(&l)
                            .map_err(|_| {
                                ContextError::Invalid(format!("link {name:?} has a target that is not UTF-8"))
                            })?
                            .to_string();
                        if kind == Kind::HardLink {
                            Some(normalise(&l).ok_or_else(|| {
                                ContextError::Invalid(format!("hard link {name:?} points out of the context"))
                            })?)
                        } else {
                            Some(l)
                        }
                    }
                    _ => None,
                };
                let entry = Entry {
                    kind,
                    mode: h.mode().unwrap_or(0o644) & 0o7777,
                    size: if kind == Kind::File { e.size() } else { 0 },
                    offset: e.raw_file_position(),
                    link,
                    mtime: h.mtime().unwrap_or(0),
                };
                if key.is_empty() && kind != Kind::Dir {
                    return Err(ContextError::Invalid(format!("entry {name:?} names the context's root")));
                }
                index_bytes += ENTRY_COST + key.len() + entry.link.as_ref().map_or(0, String::len);
                if index_bytes > MAX_CONTEXT_INDEX_BYTES {
                    return Err(ContextError::Invalid(format!(
                        "the context's names take more than {} MiB; send fewer or shorter ones",
                        MAX_CONTEXT_INDEX_BYTES >> 20
                    )));
                }
                entries.insert(key, entry);
                if entries.len() > MAX_CONTEXT_ENTRIES {
                    return Err(ContextError::Invalid(format!("more than {MAX_CONTEXT_ENTRIES} entries")));
                }
            }
        }
        Ok(Context { file, entries })
    }

    /// The regular file `path` of the context (at most `max` bytes), or `None` if there is none.
    pub fn read_file(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>, ContextError> {
        let Some(key) = normalise(path) else { return Ok(None) };
        let Some(e) = self.resolve_file(&key)? else { return Ok(None) };
        if e.size > max {
            return Err(ContextError::Invalid(format!("{path} is {} bytes; at most {max} are read", e.size)));
        }
        let mut buf = vec![0; e.size as usize];
        self.file.read_exact_at(&mut buf, e.offset)?;
        Ok(Some(buf))
    }

    /// The entry whose data `key` has: itself if a file, its target if a hard link.
    fn resolve_file(&self, key: &str) -> Result<Option<&Entry>, ContextError> {
        match self.entries.get(key) {
            Some(e) if e.kind == Kind::File => Ok(Some(e)),
            Some(e) if e.kind == Kind::HardLink => {
                let target = e.link.as_deref().unwrap_or_default();
                match self.entries.get(target) {
                    Some(t) if t.kind == Kind::File => Ok(Some(t)),
                    _ => Err(ContextError::Invalid(format!("hard link {key:?} points to {target:?}, not a file"))),
                }
            }
            _ => Ok(None),
        }
    }

    fn is_dir(&self, key: &str) -> bool {
        if key.is_empty() {
            return true;
        }
        match self.entries.get(key) {
            Some(e) => e.kind == Kind::Dir,
            // A tar may hold a directory's files without an entry for the directory itself.
            None => {
                self.entries.range(format!("{key}/")..).next().is_some_and(|(k, _)| k.starts_with(&format!("{key}/")))
            }
        }
    }

    /// Writes a layer tar to `out` holding `sources` (context paths) copied to `dest` (absolute; a
    /// trailing `/` means "into this directory") as `COPY` does: a file goes to `dest`, or into it;
    /// a directory's contents go into `dest`. Owners are `chown`'s, or root.
    pub fn copy_layer(
        &self,
        sources: &[String],
        dest: &str,
        chown: Option<Chown>,
        out: impl Write,
    ) -> Result<Copied, ContextError> {
        let mut tar = tar::Builder::new(out);
        tar.mode(tar::HeaderMode::Complete);
        let mut copied = Copied::default();
        let owner = chown.unwrap_or(Chown { uid: 0, gid: 0 });
        let dest_dir = dest.trim_end_matches('/');
        for src in sources {
            let key = normalise(src)
                .ok_or_else(|| ContextError::Invalid(format!("source {src:?} climbs out of the context")))?;
            if self.is_dir(&key) {
                let prefix = if key.is_empty() { String::new() } else { format!("{key}/") };
                let under: Vec<(&String, &Entry)> =
                    self.entries.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).collect();
                for (k, e) in under {
                    if k.is_empty() {
                        continue;
                    }
                    let target = format!("{dest_dir}/{}", &k[prefix.len()..]);
                    self.append(&mut tar, k, e, &target, owner, &mut copied)?;
                }
                continue;
            }
            let Some(e) = self.entries.get(&key) else {
                return Err(ContextError::Missing(src.clone()));
            };
            let base = key.rsplit('/').next().unwrap_or(&key);
            let target = if dest.ends_with('/') { format!("{dest_dir}/{base}") } else { dest.to_string() };
            self.append(&mut tar, &key, e, &target, owner, &mut copied)?;
        }
        tar.into_inner()?.flush()?;
        Ok(copied)
    }

    fn append<W: Write>(
        &self,
        tar: &mut tar::Builder<W>,
        key: &str,
        e: &Entry,
        target: &str,
        owner: Chown,
        copied: &mut Copied,
    ) -> Result<(), ContextError> {
        let path = target.trim_start_matches('/');
        if path.is_empty() {
            return Ok(());
        }
        let mut h = tar::Header::new_gnu();
        h.set_uid(owner.uid.into());
        h.set_gid(owner.gid.into());
        h.set_mtime(e.mtime);
        match e.kind {
            Kind::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(e.mode);
                h.set_size(0);
                tar.append_data(&mut h, format!("{path}/"), io::empty())?;
            }
            Kind::Symlink => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                tar.append_link(&mut h, path, e.link.as_deref().unwrap_or_default())?;
            }
            Kind::File | Kind::HardLink => {
                let data = self.resolve_file(key)?.expect("a file or a link to one");
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(data.mode);
                h.set_size(data.size);
                let reader = At { file: &self.file, pos: data.offset, end: data.offset + data.size };
                tar.append_data(&mut h, path, reader)?;
            }
            Kind::Other => {
                copied.skipped.push(key.to_string());
                return Ok(());
            }
        }
        copied.entries += 1;
        Ok(())
    }
}

/// Reads `file` from `pos` to `end` without moving a shared cursor.
struct At<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (self.end - self.pos).min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the build context ended inside a file"));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Context {
        let mut f = tempfile::tempfile().unwrap();
        {
            let mut b = tar::Builder::new(&mut f);
            for (name, kind, data, link) in entries {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(*kind);
                h.set_mode(if *kind == tar::EntryType::Directory { 0o755 } else { 0o640 });
                h.set_uid(4242);
                h.set_size(data.len() as u64);
                match link {
                    Some(l) => b.append_link(&mut h, name, l).unwrap(),
                    None => b.append_data(&mut h, name, *data).unwrap(),
                }
            }
            b.finish().unwrap();
        }
        Context::open(f).unwrap()
    }

    fn open_names(names: &[String]) -> Result<Context, ContextError> {
        let mut f = tempfile::tempfile().unwrap();
        {
            let mut b = tar::Builder::new(&mut f);
            for name in names {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                h.set_size(0);
                b.append_data(&mut h, name, &b""[..]).unwrap();
            }
            b.finish().unwrap();
        }
        Context::open(f)
    }

    #[test]
    fn names_past_path_max_or_too_deep_are_refused() {
        let long = "a".repeat(MAX_CONTEXT_NAME + 1);
        let e = open_names(&[long]).err().unwrap();
        assert!(e.to_string().contains("more than the 4096 a path may have"), "{e}");
        let deep = vec!["d"; MAX_CONTEXT_DEPTH + 1].join("/");
        let e = open_names(&[deep]).err().unwrap();
        assert!(e.to_string().contains("directories deep"), "{e}");
        let ok = vec!["d"; MAX_CONTEXT_DEPTH].join("/");
        open_names(&[ok, "a".repeat(MAX_CONTEXT_NAME)]).unwrap();
    }

    /// `(path, kind, uid, mode, data or link target)` of every entry of a layer.
    fn listing(layer: &[u8]) -> Vec<(String, tar::EntryType, u64, u32, String)> {
        let mut a = tar::Archive::new(layer);
        a.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let h = e.header().clone();
                let mut s = String::new();
                match e.link_name().unwrap() {
                    Some(l) => s = l.to_string_lossy().into_owned(),
                    None => {
                        e.read_to_string(&mut s).unwrap();
                    }
                }
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    h.entry_type(),
                    h.uid().unwrap(),
                    h.mode().unwrap(),
                    s,
                )
            })
            .collect()
    }

    #[test]
    fn a_file_goes_to_its_destination_or_into_a_directory_one_owned_by_root_or_chown() {
        use tar::EntryType::*;
        let c = context(&[("./a.txt", Regular, b"A", None), ("b", Regular, b"B", None)]);
        let mut out = Vec::new();
        c.copy_layer(&["a.txt".into()], "/opt/x", None, &mut out).unwrap();
        assert_eq!(listing(&out), [("opt/x".into(), Regular, 0, 0o640, "A".into())]);
        let mut out = Vec::new();
        let chown = Some(Chown { uid: 1000, gid: 1000 });
        c.copy_layer(&["a.txt".into(), "b".into()], "/d/", chown, &mut out).unwrap();
        assert_eq!(
            listing(&out),
            [("d/a.txt".into(), Regular, 1000, 0o640, "A".into()), ("d/b".into(), Regular, 1000, 0o640, "B".into())]
        );
    }

    #[test]
    fn a_directory_copies_its_contents_with_links_and_leaves_out_fifos() {
        use tar::EntryType::*;
        let c = context(&[
            ("src/", Directory, b"", None),
            ("src/f", Regular, b"data", None),
            ("src/sub/g", Regular, b"g", None),
            ("src/l", Symlink, b"", Some("f")),
            ("src/h", Link, b"", Some("src/f")),
            ("src/p", Fifo, b"", None),
            ("other", Regular, b"no", None),
        ]);
        let mut out = Vec::new();
        let copied = c.copy_layer(&["src".into()], "/app", None, &mut out).unwrap();
        assert_eq!(copied.skipped, ["src/p"]);
        let got: Vec<(String, tar::EntryType, String)> =
            listing(&out).into_iter().map(|(p, k, _, _, s)| (p, k, s)).collect();
        assert_eq!(
            got,
            [
                ("app/f".into(), Regular, "data".into()),
                ("app/h".into(), Regular, "data".into()),
                ("app/l".into(), Symlink, "f".into()),
                ("app/sub/g".into(), Regular, "g".into()),
            ]
        );
        // `.` is the whole context.
        let mut out = Vec::new();
        c.copy_layer(&[".".into()], "/", None, &mut out).unwrap();
        assert!(listing(&out).iter().any(|e| e.0 == "other"));
    }

    #[test]
    fn missing_sources_and_escaping_names_are_refused() {
        use tar::EntryType::*;
        let c = context(&[("a", Regular, b"A", None)]);
        let e = c.copy_layer(&["nope".into()], "/x", None, Vec::new()).unwrap_err();
        assert!(e.to_string().contains("\"nope\" is not in the build context"), "{e}");
        assert!(c.copy_layer(&["../etc/passwd".into()], "/x", None, Vec::new()).is_err());
        assert_eq!(c.read_file("a", 10).unwrap().unwrap(), b"A");
        assert!(c.read_file("a", 0).is_err());
        assert!(c.read_file("b", 10).unwrap().is_none());
        let mut f = tempfile::tempfile().unwrap();
        {
            let mut b = tar::Builder::new(&mut f);
            let mut h = tar::Header::new_gnu();
            h.set_size(1);
            h.set_entry_type(Regular);
            // `append_data` refuses `..`; write the name into the header directly, as a hostile client would.
            h.as_gnu_mut().unwrap().name[..9].copy_from_slice(b"../escape");
            h.set_cksum();
            b.append(&h, &b"x"[..]).unwrap();
            b.finish().unwrap();
        }
        let e = Context::open(f).err().unwrap();
        assert!(e.to_string().contains("climbs out"), "{e}");
    }
}
