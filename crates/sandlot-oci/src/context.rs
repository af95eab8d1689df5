//! A build context: the tar a client uploads with `POST /v1/images/build`, and the layers `COPY` and
//! `ADD` make from it.
//!
//! The context is the tenant's input and is never unpacked on the host. [`Context::open`] indexes the
//! tar once (each entry's kind, mode, size and where its data starts in the spooled file) and a copy
//! writes a new layer tar from that index, reading file data at its offset. Names are normalised
//! (`./a//b` is `a/b`); a `..` component or an absolute escape is refused naming the entry, as are
//! names that are not UTF-8. Owners in the context are ignored: what is copied belongs to root, or to
//! `--chown`. Devices, FIFOs and sockets in the context are left out of copies (they are not files).

use std::collections::{BTreeMap, HashMap};
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

impl Kind {
    fn of(t: tar::EntryType) -> Kind {
        match t {
            tar::EntryType::Regular | tar::EntryType::Continuous => Kind::File,
            tar::EntryType::Directory => Kind::Dir,
            tar::EntryType::Symlink => Kind::Symlink,
            tar::EntryType::Link => Kind::HardLink,
            _ => Kind::Other,
        }
    }
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
    uid: u64,
    gid: u64,
    /// Whether its data is in the file (a stage's files beneath no copied source are indexed only).
    has_data: bool,
}

/// An indexed build context.
pub struct Context {
    file: File,
    entries: BTreeMap<String, Entry>,
    /// Whether a copy keeps each entry's owner (a stage of the build, for `COPY --from`) or gives it
    /// to root (an uploaded context, whose owners are the client machine's).
    keep_owners: bool,
}

/// How `COPY` writes what it copies: `--chown` and `--chmod`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CopyOptions {
    /// The owner of everything copied (else root, or the stage's owners for `--from`).
    pub chown: Option<Chown>,
    /// The permission bits of every file and directory copied (links keep theirs).
    pub chmod: Option<u32>,
    /// The destination is not a directory of the image yet: a directory source makes it (owned by
    /// `--chown`'s owner, mode 0755), as Docker does, so an empty one is copied too.
    pub make_dest: bool,
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
                // PAX and GNU long-name records are consumed by the tar reader itself.
                if h.entry_type() == tar::EntryType::XGlobalHeader {
                    continue;
                }
                let kind = Kind::of(h.entry_type());
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
                    uid: h.uid().unwrap_or(0),
                    gid: h.gid().unwrap_or(0),
                    has_data: true,
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
        Ok(Context { file, entries, keep_owners: false })
    }

    /// Leaves out of every later copy what the context's `.dockerignore` names (read here; after the
    /// Dockerfile was read, which Docker sends whatever the file says). Answers how many entries went.
    pub fn apply_dockerignore(&mut self) -> Result<usize, ContextError> {
        let Some(text) = self.read_file(".dockerignore", crate::dockerignore::MAX_DOCKERIGNORE_BYTES)? else {
            return Ok(0);
        };
        let patterns =
            crate::dockerignore::Patterns::parse(&String::from_utf8_lossy(&text)).map_err(ContextError::Invalid)?;
        let before = self.entries.len();
        self.entries.retain(|k, _| !patterns.ignores(k));
        Ok(before - self.entries.len())
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

    /// Writes a layer tar to `out` holding `sources` (context paths, wildcards allowed) copied to
    /// `dest` (absolute; a trailing `/` means "into this directory") as `COPY` does: a file goes to
    /// `dest`, or into it; a directory's contents go into `dest`. Owners are `--chown`'s, else root's
    /// (an uploaded context) or the entries' own (a stage); modes are `--chmod`'s or the entries'.
    pub fn copy_layer(
        &self,
        sources: &[String],
        dest: &str,
        opts: CopyOptions,
        out: impl Write,
    ) -> Result<Copied, ContextError> {
        let mut picked = Vec::new();
        for src in sources {
            let key = normalise(src)
                .ok_or_else(|| ContextError::Invalid(format!("source {src:?} climbs out of the context")))?;
            if !has_wildcard(&key) {
                picked.push((src.clone(), key));
                continue;
            }
            let matched = self.matching(&key);
            if matched.is_empty() {
                return Err(ContextError::Missing(src.clone()));
            }
            picked.extend(matched.into_iter().map(|k| (src.clone(), k)));
        }
        picked.sort();
        picked.dedup_by(|a, b| a.1 == b.1);
        if picked.len() > MAX_CONTEXT_ENTRIES {
            return Err(ContextError::Invalid(format!(
                "the sources name more than {MAX_CONTEXT_ENTRIES} entries; copy their directory"
            )));
        }
        if picked.len() > 1 && !dest.ends_with('/') {
            return Err(ContextError::Invalid(format!(
                "{} sources (wildcards expanded) go to {dest:?}: write the destination as a directory, ending in `/`",
                picked.len()
            )));
        }
        let mut tar = tar::Builder::new(out);
        tar.mode(tar::HeaderMode::Complete);
        let mut copied = Copied::default();
        let mut written = HashMap::new();
        let dest_dir = dest.trim_end_matches('/');
        for (src, key) in picked {
            // A source that is a link is copied as what it points to (within the context), under its
            // own name: Docker's and buildah's rule for the paths COPY names.
            let base = key.rsplit('/').next().unwrap_or(&key).to_string();
            let key = self.follow(&key);
            if self.is_dir(&key) {
                let prefix = if key.is_empty() { String::new() } else { format!("{key}/") };
                let under: Vec<(&String, &Entry)> =
                    self.entries.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).collect();
                let path = dest_dir.trim_start_matches('/');
                if opts.make_dest && !path.is_empty() {
                    let mut h = tar::Header::new_gnu();
                    let owner = opts.chown.unwrap_or(Chown { uid: 0, gid: 0 });
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_uid(owner.uid.into());
                    h.set_gid(owner.gid.into());
                    h.set_mode(0o755);
                    h.set_size(0);
                    h.set_mtime(self.entries.get(&key).map_or(0, |e| e.mtime));
                    tar.append_data(&mut h, format!("{path}/"), io::empty())?;
                    copied.entries += 1;
                }
                for (k, e) in under {
                    if k.is_empty() {
                        continue;
                    }
                    let target = format!("{dest_dir}/{}", &k[prefix.len()..]);
                    self.append(&mut tar, k, e, &target, opts, &mut written, &mut copied)?;
                }
                continue;
            }
            let Some(e) = self.entries.get(&key) else {
                return Err(ContextError::Missing(src));
            };
            let target = if dest.ends_with('/') { format!("{dest_dir}/{base}") } else { dest.to_string() };
            self.append(&mut tar, &key, e, &target, opts, &mut written, &mut copied)?;
        }
        tar.into_inner()?.flush()?;
        Ok(copied)
    }

    /// The entries a wildcard source names: each component matched as Go's `filepath.Match` (what
    /// Docker and buildah use), in name order.
    fn matching(&self, pattern: &str) -> Vec<String> {
        let parts: Vec<&str> = pattern.split('/').collect();
        // Only names as deep as the pattern can match; the literal prefix narrows the range.
        let literal: Vec<&str> = parts.iter().take_while(|p| !has_wildcard(p)).copied().collect();
        let prefix = if literal.is_empty() { String::new() } else { format!("{}/", literal.join("/")) };
        let mut out = Vec::new();
        let mut implied = std::collections::BTreeSet::new();
        for (k, _) in self.entries.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)) {
            let names: Vec<&str> = k.split('/').collect();
            // A directory with files but no entry of its own matches as well.
            if names.len() > parts.len() {
                let dir = names[..parts.len()].join("/");
                if !self.entries.contains_key(&dir) && component_match(&parts, &names[..parts.len()]) {
                    implied.insert(dir);
                }
                continue;
            }
            if names.len() == parts.len() && component_match(&parts, &names) {
                out.push(k.clone());
            }
        }
        out.extend(implied);
        out.sort();
        out
    }

    /// `key` with the links among its last component followed inside the context (a relative target
    /// from the link's directory, an absolute one from the context's root), at most MAX_LINKS; a link
    /// that leads out or nowhere is left as it is.
    fn follow(&self, key: &str) -> String {
        let mut key = key.to_string();
        for _ in 0..MAX_LINKS {
            let Some(e) = self.entries.get(&key).filter(|e| e.kind == Kind::Symlink) else { break };
            let target = e.link.as_deref().unwrap_or_default();
            let joined = match (target.starts_with('/'), key.rsplit_once('/')) {
                (false, Some((dir, _))) => format!("{dir}/{target}"),
                _ => target.to_string(),
            };
            match normalise(&joined) {
                Some(next) if self.entries.contains_key(&next) || self.is_dir(&next) => key = next,
                _ => break,
            }
        }
        key
    }

    #[allow(clippy::too_many_arguments)]
    fn append<W: Write>(
        &self,
        tar: &mut tar::Builder<W>,
        key: &str,
        e: &Entry,
        target: &str,
        opts: CopyOptions,
        written: &mut HashMap<u64, String>,
        copied: &mut Copied,
    ) -> Result<(), ContextError> {
        let path = target.trim_start_matches('/');
        if path.is_empty() {
            return Ok(());
        }
        let owner = |e: &Entry| match (opts.chown, self.keep_owners) {
            (Some(c), _) => (c.uid.into(), c.gid.into()),
            (None, true) => (e.uid, e.gid),
            (None, false) => (0, 0),
        };
        let mut h = tar::Header::new_gnu();
        let (uid, gid) = owner(e);
        h.set_uid(uid);
        h.set_gid(gid);
        h.set_mtime(e.mtime);
        match e.kind {
            Kind::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(opts.chmod.unwrap_or(e.mode));
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
                if !data.has_data {
                    return Err(ContextError::Invalid(format!("{key:?} is outside what the copy read")));
                }
                let (uid, gid) = owner(data);
                h.set_uid(uid);
                h.set_gid(gid);
                // Names of one file (hard links) copied together stay one file, as buildah keeps them.
                if let Some(first) = written.get(&data.offset).filter(|_| data.size > 0) {
                    h.set_entry_type(tar::EntryType::Link);
                    h.set_mode(opts.chmod.unwrap_or(data.mode));
                    h.set_size(0);
                    tar.append_link(&mut h, path, first)?;
                    copied.entries += 1;
                    return Ok(());
                }
                written.insert(data.offset, path.to_string());
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(opts.chmod.unwrap_or(data.mode));
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

/// A layer of directories `paths` (relative, parents first), owned by root with mode 0755: what
/// `WORKDIR` makes when the image lacks its directory.
pub fn directories_layer(paths: &[String], out: impl Write) -> io::Result<()> {
    let mut tar = tar::Builder::new(out);
    for p in paths {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(0);
        tar.append_data(&mut h, format!("{}/", p.trim_matches('/')), io::empty())?;
    }
    tar.into_inner()?.flush()
}

/// Most symbolic links followed while resolving one source of a stage (as the kernel's 40).
const MAX_LINKS: usize = 40;

impl Context {
    /// The files of an image's layers, applied in order (whiteouts and opaque directories included),
    /// as a context: what `COPY --from` copies from an earlier stage or another image. Like an
    /// uploaded context it is never unpacked on the host: every layer's headers are indexed, then the
    /// data of the regular files beneath `sources` is spooled into `spool` (at most `max_bytes`).
    /// `open(i)` reads layer `i` (plain, gzip or zstd). Answers the context and `sources` with the
    /// image's own symbolic links resolved in their directories (`/lib/x` of a merged-/usr image is
    /// `usr/lib/x`), as a copy from them must name them. Owners are the layers'.
    pub fn from_layers<R: Read>(
        mut open: impl FnMut(usize) -> io::Result<R>,
        layers: usize,
        sources: &[String],
        spool: File,
        max_bytes: u64,
    ) -> Result<(Context, Vec<String>), ContextError> {
        let mut entries: BTreeMap<String, (usize, Entry)> = BTreeMap::new();
        let mut index_bytes = 0usize;
        let mut members = 0u64;
        for layer in 0..layers {
            each_member(open(layer)?, |path, e| {
                let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
                let under = |d: &str| if d.is_empty() { String::new() } else { format!("{d}/") };
                members += 1;
                if members > MAX_CONTEXT_ENTRIES as u64 * 4 {
                    return Err(ContextError::Invalid(format!(
                        "the stage's layers hold more than {} members",
                        MAX_CONTEXT_ENTRIES * 4
                    )));
                }
                if name == ".wh..wh..opq" {
                    let prefix = under(parent);
                    let lower: Vec<String> = entries
                        .range(prefix.clone()..)
                        .take_while(|(k, _)| k.starts_with(&prefix))
                        .filter(|(k, (l, _))| k.len() > prefix.len() && *l < layer)
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in lower {
                        entries.remove(&k);
                    }
                    return Ok(());
                }
                if let Some(gone) = name.strip_prefix(".wh.") {
                    let gone = if parent.is_empty() { gone.to_string() } else { format!("{parent}/{gone}") };
                    remove_tree(&mut entries, &gone);
                    return Ok(());
                }
                let entry = index_entry(path, e)?;
                let replaces_dir = entries.get(path).is_some_and(|(_, old)| old.kind == Kind::Dir);
                if entry.kind != Kind::Dir || !replaces_dir {
                    remove_tree(&mut entries, path);
                }
                index_bytes += ENTRY_COST + path.len() + entry.link.as_ref().map_or(0, String::len);
                if index_bytes > MAX_CONTEXT_INDEX_BYTES || entries.len() >= MAX_CONTEXT_ENTRIES {
                    return Err(ContextError::Invalid(format!(
                        "the stage holds more than {MAX_CONTEXT_ENTRIES} entries or {} MiB of names",
                        MAX_CONTEXT_INDEX_BYTES >> 20
                    )));
                }
                entries.insert(path.to_string(), (layer, entry));
                Ok(())
            })?;
        }
        let resolved: Vec<String> = sources
            .iter()
            .map(|src| {
                let key = normalise(src)
                    .ok_or_else(|| ContextError::Invalid(format!("source {src:?} climbs out of the image")))?;
                let mut key = resolve_parents(&entries, &key)?;
                // A last component that is a link is copied as what it points to: read that.
                for _ in 0..MAX_LINKS {
                    let Some((_, e)) = entries.get(&key).filter(|(_, e)| e.kind == Kind::Symlink) else { break };
                    let target = e.link.as_deref().unwrap_or_default();
                    let joined = match (target.starts_with('/'), key.rsplit_once('/')) {
                        (false, Some((dir, _))) => format!("{dir}/{target}"),
                        _ => target.to_string(),
                    };
                    let next = match lexical(&joined) {
                        Some(next) => resolve_parents(&entries, &next)?,
                        None => break,
                    };
                    if !entries.contains_key(&next) {
                        break;
                    }
                    key = next;
                }
                Ok(key)
            })
            .collect::<Result<_, ContextError>>()?;
        // The files whose data a copy of `resolved` reads, by the layer that holds their last version.
        let wanted: Vec<String> = resolved
            .iter()
            .map(|k| k.split('/').take_while(|c| !has_wildcard(c)).collect::<Vec<_>>().join("/"))
            .collect();
        let inside = |k: &str| wanted.iter().any(|w| w.is_empty() || k == w || k.starts_with(&format!("{w}/")));
        let mut needed: BTreeMap<String, usize> = BTreeMap::new();
        for (k, (layer, e)) in &entries {
            if !inside(k) {
                continue;
            }
            match e.kind {
                Kind::File => {
                    needed.insert(k.clone(), *layer);
                }
                Kind::HardLink => {
                    if let Some((l, t)) = e.link.as_ref().and_then(|t| entries.get(t).map(|(l, _)| (*l, t))) {
                        needed.insert(t.clone(), l);
                    }
                }
                _ => {}
            }
        }
        let mut out = io::BufWriter::new(&spool);
        let mut written = 0u64;
        for layer in 0..layers {
            if !needed.values().any(|l| *l == layer) {
                continue;
            }
            each_member(open(layer)?, |path, e| {
                if needed.get(path) != Some(&layer) || !e.header().entry_type().is_file() {
                    return Ok(());
                }
                let size = e.size();
                if written.saturating_add(size) > max_bytes {
                    return Err(ContextError::Invalid(format!(
                        "the files copied from the stage are more than {} MiB",
                        max_bytes >> 20
                    )));
                }
                let n = io::copy(&mut e.take(size), &mut out)?;
                if n != size {
                    return Err(ContextError::Invalid(format!("layer {layer} ends inside {path:?}")));
                }
                if let Some((_, entry)) = entries.get_mut(path) {
                    entry.offset = written;
                    entry.size = size;
                    entry.has_data = true;
                }
                written += size;
                Ok(())
            })?;
        }
        out.flush()?;
        drop(out);
        let entries = entries.into_iter().map(|(k, (_, e))| (k, e)).collect();
        Ok((Context { file: spool, entries, keep_owners: true }, resolved))
    }
}

/// Calls `f` with each member of a layer (its name normalised; members with `..` or no name left
/// out, as an unpack leaves them out).
fn each_member<R: Read>(
    layer: R,
    mut f: impl FnMut(&str, &mut tar::Entry<'_, &mut dyn Read>) -> Result<(), ContextError>,
) -> Result<(), ContextError> {
    let reader = crate::archive::decompressing(layer).map_err(|e| ContextError::Invalid(format!("a layer: {e}")))?;
    let mut guarded = crate::archive::HeaderGuard::new(reader);
    let mut archive = tar::Archive::new(&mut guarded as &mut dyn Read);
    let invalid = |e: io::Error| ContextError::Invalid(format!("a layer is not a tar: {e}"));
    for e in archive.entries().map_err(invalid)? {
        let mut e = e.map_err(invalid)?;
        let raw = e.path_bytes().into_owned();
        let Ok(name) = std::str::from_utf8(&raw) else { continue };
        let Some(key) = normalise(name).filter(|k| !k.is_empty() && k.len() <= MAX_CONTEXT_NAME) else { continue };
        if e.header().entry_type() == tar::EntryType::XGlobalHeader {
            continue;
        }
        f(&key, &mut e)?;
    }
    Ok(())
}

/// The index entry of a layer member (its data not read yet).
fn index_entry<R: Read>(path: &str, e: &tar::Entry<'_, R>) -> Result<Entry, ContextError> {
    let h = e.header();
    let kind = Kind::of(h.entry_type());
    let link = match kind {
        Kind::Symlink | Kind::HardLink => {
            let l = e.link_name_bytes().ok_or_else(|| ContextError::Invalid(format!("link {path:?} has no target")))?;
            let l = String::from_utf8_lossy(&l).into_owned();
            if l.len() > MAX_CONTEXT_NAME {
                return Err(ContextError::Invalid(format!(
                    "link {path:?} has a target longer than {MAX_CONTEXT_NAME}"
                )));
            }
            match kind {
                Kind::HardLink => Some(normalise(&l).unwrap_or_default()),
                _ => Some(l),
            }
        }
        _ => None,
    };
    Ok(Entry {
        kind,
        mode: h.mode().unwrap_or(0o644) & 0o7777,
        size: 0,
        offset: 0,
        link,
        mtime: h.mtime().unwrap_or(0),
        uid: h.uid().unwrap_or(0),
        gid: h.gid().unwrap_or(0),
        has_data: kind != Kind::File,
    })
}

/// Removes `path` and everything beneath it.
fn remove_tree<V>(entries: &mut BTreeMap<String, V>, path: &str) {
    entries.remove(path);
    let prefix = format!("{path}/");
    let below: Vec<String> =
        entries.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).map(|(k, _)| k.clone()).collect();
    for k in below {
        entries.remove(&k);
    }
}

/// `key` with the symbolic links among its directories replaced by what they point to, inside the
/// image (an absolute target starts again at its root; `..` stops there), at most MAX_LINKS of them;
/// refused when it grows past a path's bounds (a chain of links made to blow it up).
fn resolve_parents(entries: &BTreeMap<String, (usize, Entry)>, key: &str) -> Result<String, ContextError> {
    let mut parts: Vec<String> = key.split('/').filter(|c| !c.is_empty()).map(str::to_string).collect();
    let mut hops = 0;
    // `here` is parts[..=i] joined, kept as it grows rather than joined again at each step.
    let mut i = 0;
    let mut here = String::new();
    while i + 1 < parts.len() {
        if !here.is_empty() {
            here.push('/');
        }
        here.push_str(&parts[i]);
        match entries.get(&here) {
            Some((_, e)) if e.kind == Kind::Symlink && hops < MAX_LINKS && !has_wildcard(&here) => {
                hops += 1;
                let target = e.link.as_deref().unwrap_or_default();
                let base = if target.starts_with('/') { String::new() } else { parts[..i].join("/") };
                let mut next: Vec<String> = lexical(&format!("{base}/{target}"))
                    .map_or_else(Vec::new, |p| p.split('/').map(str::to_string).collect());
                next.extend_from_slice(&parts[i + 1..]);
                if next.len() > MAX_CONTEXT_DEPTH || next.iter().map(|c| c.len() + 1).sum::<usize>() > MAX_CONTEXT_NAME
                {
                    return Err(ContextError::Invalid(format!(
                        "{key:?} resolves, through the stage's links, to a path longer than {MAX_CONTEXT_NAME} bytes"
                    )));
                }
                parts = next;
                i = 0;
                here.clear();
            }
            _ => i += 1,
        }
    }
    Ok(parts.join("/"))
}

/// `path` without `.` and empty components, `..` taking one off (stopping at the root).
fn lexical(path: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    (!out.is_empty()).then(|| out.join("/"))
}

/// Whether a path (or one component) has a wildcard of Go's `filepath.Match`.
fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

fn component_match(patterns: &[&str], names: &[&str]) -> bool {
    patterns.iter().zip(names).all(|(p, n)| wildcard_match(p.as_bytes(), n.as_bytes()))
}

/// One path component against one pattern component: `*` any run of bytes, `?` one byte, `[...]` a
/// class (`^` negates; ranges `a-z`), `\\` escapes. A malformed class matches nothing. Iterative,
/// with one backtrack point for the last `*` (the classic linear-space glob): a hostile pattern of
/// many stars costs at most pattern × name steps, never a deep recursion.
pub(crate) fn wildcard_match(p: &[u8], n: &[u8]) -> bool {
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        // One pattern element against n[ni]: Some(next pattern index) when it matches.
        let step = match p.get(pi) {
            Some(b'*') => {
                star = Some((pi + 1, ni));
                pi += 1;
                continue;
            }
            Some(b'?') => Some(pi + 1),
            Some(b'[') => match class_match(&p[pi + 1..], n[ni]) {
                Some((true, after)) => Some(p.len() - after.len()),
                _ => None,
            },
            Some(b'\\') if pi + 1 < p.len() => (p[pi + 1] == n[ni]).then_some(pi + 2),
            Some(&b) => (b == n[ni]).then_some(pi + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                pi = next;
                ni += 1;
            }
            (None, Some((after_star, from))) => {
                // Let the last `*` take one more byte and try again from there.
                pi = after_star;
                ni = from + 1;
                star = Some((after_star, from + 1));
            }
            (None, None) => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Whether `c` is in the class that starts at `p` (just after `[`), and the pattern after the class.
fn class_match(p: &[u8], c: u8) -> Option<(bool, &[u8])> {
    let (negate, mut p) = match p.first() {
        Some(b'^') => (true, &p[1..]),
        _ => (false, p),
    };
    let mut hit = false;
    let mut first = true;
    loop {
        let (&lo, rest) = p.split_first()?;
        if lo == b']' && !first {
            return Some((hit != negate, rest));
        }
        first = false;
        let (lo, rest) = if lo == b'\\' { (*rest.first()?, &rest[1..]) } else { (lo, rest) };
        p = rest;
        if p.first() == Some(&b'-') && p.get(1).is_some_and(|&b| b != b']') {
            let hi = p[1];
            p = &p[2..];
            hit |= lo <= c && c <= hi;
        } else {
            hit |= lo == c;
        }
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
        c.copy_layer(&["a.txt".into()], "/opt/x", CopyOptions::default(), &mut out).unwrap();
        assert_eq!(listing(&out), [("opt/x".into(), Regular, 0, 0o640, "A".into())]);
        let mut out = Vec::new();
        let opts = CopyOptions { chown: Some(Chown { uid: 1000, gid: 1000 }), ..Default::default() };
        c.copy_layer(&["a.txt".into(), "b".into()], "/d/", opts, &mut out).unwrap();
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
        let copied = c.copy_layer(&["src".into()], "/app", CopyOptions::default(), &mut out).unwrap();
        assert_eq!(copied.skipped, ["src/p"]);
        let got: Vec<(String, tar::EntryType, String)> =
            listing(&out).into_iter().map(|(p, k, _, _, s)| (p, k, s)).collect();
        assert_eq!(
            got,
            [
                ("app/f".into(), Regular, "data".into()),
                // One file with two names stays one: the second name links to the first copied.
                ("app/h".into(), Link, "app/f".into()),
                ("app/l".into(), Symlink, "f".into()),
                ("app/sub/g".into(), Regular, "g".into()),
            ]
        );
        // `.` is the whole context.
        let mut out = Vec::new();
        c.copy_layer(&[".".into()], "/", CopyOptions::default(), &mut out).unwrap();
        assert!(listing(&out).iter().any(|e| e.0 == "other"));
    }

    #[test]
    fn missing_sources_and_escaping_names_are_refused() {
        use tar::EntryType::*;
        let c = context(&[("a", Regular, b"A", None)]);
        let e = c.copy_layer(&["nope".into()], "/x", CopyOptions::default(), Vec::new()).unwrap_err();
        assert!(e.to_string().contains("\"nope\" is not in the build context"), "{e}");
        assert!(c.copy_layer(&["../etc/passwd".into()], "/x", CopyOptions::default(), Vec::new()).is_err());
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

    #[test]
    fn wildcards_match_each_component_as_go_filepath_match_does() {
        for (p, n, want) in [
            ("*.txt", "a.txt", true),
            ("*.txt", "a.md", false),
            ("file?.cfg", "file1.cfg", true),
            ("file?.cfg", "file10.cfg", false),
            ("[ab].txt", "b.txt", true),
            ("[ab].txt", "c.txt", false),
            ("[^ab].txt", "c.txt", true),
            ("[a-c]x", "bx", true),
            ("[a-c]x", "dx", false),
            ("\\*", "*", true),
            ("\\*", "a", false),
            ("[", "[", false),
            ("*", "", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("*x", "abx", true),
        ] {
            assert_eq!(wildcard_match(p.as_bytes(), n.as_bytes()), want, "{p} against {n}");
        }
        // Hostile patterns: a deep run of stars and a backtracking one end at once (no recursion).
        let stars = "*".repeat(100_000);
        assert!(wildcard_match(stars.as_bytes(), b"anything"));
        let back = format!("{}b", "*a".repeat(20));
        assert!(!wildcard_match(back.as_bytes(), "a".repeat(4096).as_bytes()));
        use tar::EntryType::*;
        let c = context(&[
            ("a.txt", Regular, b"A", None),
            ("b.txt", Regular, b"B", None),
            ("c.md", Regular, b"C", None),
            ("src/x.py", Regular, b"X", None),
            ("src/deep/y.py", Regular, b"Y", None),
        ]);
        let mut out = Vec::new();
        c.copy_layer(&["*.txt".into(), "src/*.py".into()], "/d/", CopyOptions::default(), &mut out).unwrap();
        let names: Vec<String> = listing(&out).into_iter().map(|e| e.0).collect();
        assert_eq!(names, ["d/a.txt", "d/b.txt", "d/x.py"]);
        // A directory matched by a wildcard (here one with no entry of its own) copies its contents.
        let mut out = Vec::new();
        c.copy_layer(&["s*".into()], "/d/", CopyOptions::default(), &mut out).unwrap();
        let names: Vec<String> = listing(&out).into_iter().map(|e| e.0).collect();
        assert_eq!(names, ["d/deep/y.py", "d/x.py"]);
        let e = c.copy_layer(&["*.rs".into()], "/d/", CopyOptions::default(), Vec::new()).unwrap_err();
        assert!(e.to_string().contains("\"*.rs\" is not in the build context"), "{e}");
        let e = c.copy_layer(&["*.txt".into()], "/file", CopyOptions::default(), Vec::new()).unwrap_err();
        assert!(e.to_string().contains("ending in `/`"), "{e}");
    }

    #[test]
    fn chmod_sets_files_and_directories_but_not_links() {
        use tar::EntryType::*;
        let c =
            context(&[("d/", Directory, b"", None), ("d/f", Regular, b"F", None), ("d/l", Symlink, b"", Some("f"))]);
        let mut out = Vec::new();
        let opts = CopyOptions { chmod: Some(0o700), ..Default::default() };
        c.copy_layer(&["d".into()], "/t", opts, &mut out).unwrap();
        let modes: Vec<(String, u32)> = listing(&out).into_iter().map(|e| (e.0, e.3)).collect();
        assert_eq!(modes, [("t/f".into(), 0o700), ("t/l".into(), 0o777)]);
    }

    /// `(name, kind, data, link target, owner)` of a layer member.
    type Member<'a> = (&'a str, tar::EntryType, &'a [u8], Option<&'a str>, u64);

    fn layer_tar(entries: &[Member<'_>]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data, link, uid) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o640);
            h.set_uid(*uid);
            h.set_gid(*uid);
            h.set_size(data.len() as u64);
            match link {
                Some(l) => b.append_link(&mut h, name, l).unwrap(),
                None => b.append_data(&mut h, name, *data).unwrap(),
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn a_stage_is_its_layers_applied_in_order_with_whiteouts_owners_and_links() {
        use tar::EntryType::*;
        let layers = [
            layer_tar(&[
                ("usr/lib/", Directory, b"", None, 0),
                ("usr/lib/libx.so", Regular, b"lower", None, 0),
                ("lib", Symlink, b"", Some("usr/lib"), 0),
                ("out/", Directory, b"", None, 0),
                ("out/gone", Regular, b"gone", None, 0),
                ("out/old/", Directory, b"", None, 0),
                ("out/old/a", Regular, b"a", None, 0),
            ]),
            layer_tar(&[
                ("out/.wh.gone", Regular, b"", None, 0),
                ("out/old/.wh..wh..opq", Regular, b"", None, 0),
                ("out/old/b", Regular, b"b", None, 1000),
                ("out/keep", Regular, b"kept", None, 1000),
                ("out/hard", Link, b"", Some("out/keep"), 1000),
                ("usr/lib/libx.so", Regular, b"upper", None, 7),
                ("current", Symlink, b"", Some("lib/libx.so"), 0),
            ]),
        ];
        let spool = tempfile::tempfile().unwrap();
        let sources = ["/out".to_string(), "lib/libx.so".to_string(), "/current".to_string()];
        let (c, resolved) =
            Context::from_layers(|i| Ok(&layers[i][..]), layers.len(), &sources, spool, 1 << 20).unwrap();
        // `current` links to a file in another directory: what it points to is read, and copied.
        assert_eq!(resolved, ["out", "usr/lib/libx.so", "usr/lib/libx.so"]);
        let mut out = Vec::new();
        c.copy_layer(&resolved[..1], "/o", CopyOptions::default(), &mut out).unwrap();
        let got: Vec<(String, u64, String)> = listing(&out).into_iter().map(|e| (e.0, e.2, e.4)).collect();
        assert_eq!(
            got,
            [
                ("o/hard".into(), 1000, "kept".into()),
                ("o/keep".into(), 1000, "o/hard".into()),
                ("o/old/".into(), 0, "".into()),
                ("o/old/b".into(), 1000, "b".into()),
            ]
        );
        let mut out = Vec::new();
        c.copy_layer(&resolved[1..], "/l", CopyOptions::default(), &mut out).unwrap();
        assert_eq!(listing(&out), [("l".into(), Regular, 7, 0o640, "upper".into())]);
        // What a copy may read is bounded.
        let spool = tempfile::tempfile().unwrap();
        let e = Context::from_layers(|i| Ok(&layers[i][..]), layers.len(), &sources, spool, 3).err().unwrap();
        assert!(e.to_string().contains("more than"), "{e}");
    }

    #[test]
    fn a_linked_source_copies_what_it_points_to_and_a_new_destination_directory_is_made() {
        use tar::EntryType::*;
        let c = context(&[
            ("target.txt", Regular, b"T", None),
            ("link", Symlink, b"", Some("target.txt")),
            ("empty/", Directory, b"", None),
        ]);
        let mut out = Vec::new();
        c.copy_layer(&["link".into()], "/d/", CopyOptions::default(), &mut out).unwrap();
        assert_eq!(listing(&out), [("d/link".into(), Regular, 0, 0o640, "T".into())]);
        // An empty directory copied to a path the image lacks makes it, owned by --chown's owner.
        let mut out = Vec::new();
        let opts = CopyOptions { chown: Some(Chown { uid: 7, gid: 7 }), make_dest: true, ..Default::default() };
        c.copy_layer(&["empty".into()], "/e", opts, &mut out).unwrap();
        assert_eq!(listing(&out), [("e/".into(), Directory, 7, 0o755, "".into())]);
        let mut out = Vec::new();
        c.copy_layer(&["empty".into()], "/e", CopyOptions::default(), &mut out).unwrap();
        assert!(listing(&out).is_empty(), "an existing destination keeps its own mode and owner");
    }
}
