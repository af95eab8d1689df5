//! Applying OCI / Docker image layers, which are hostile input, onto a host directory.
//!
//! The daemon (host root) applies each layer, a tar stream, onto a directory that is a btrfs snapshot
//! of the layers below it, so the lower layers' files are already there. Anyone who can publish an
//! image writes every byte of the stream, so nothing in it may touch a host path, gain a host
//! privilege or exhaust the host. The rules, each with its reason:
//!
//! - **The tar crate parses, this module creates.** `tar::Archive::entries` reads headers (PAX, GNU
//!   long names, GNU sparse maps), but tar's own `unpack` is never called: it resolves paths through
//!   the tree it writes. Every file is created here, relative to a directory descriptor.
//! - **Paths.** A leading `./` or `/` is stripped and empty or `.` components are skipped (`a//b` is
//!   `a/b`); any `..` component, a NUL byte, a component longer than 255 bytes, more than
//!   `max_depth` components or more than `max_path_bytes` bytes refuse the layer, naming the entry.
//!   A directory entry naming the root itself (`./`, which most layers start with) sets the root's
//!   owner, mode and time; any other kind naming the root is refused.
//! - **Parents are resolved inside the root.** Real images rely on symlinked parents (merged /usr:
//!   `bin -> usr/bin`, or `-> /usr/bin`), so a parent is opened with `openat2(root, parent,
//!   RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`: the kernel resolves every `..` and
//!   every symlink, absolute ones included, as if `root` were `/`, so no resolution leaves it. A
//!   missing parent is created one component at a time (mode 0755, owned by image root) the same way.
//! - **The final component is never followed.** Whatever has the name is removed first (unlinked, or
//!   a directory replaced by a non-directory removed with [`tree::remove_beneath`], which follows no
//!   link), then the entry is made with `O_CREAT | O_EXCL | O_NOFOLLOW`, `mkdirat`, `symlinkat`,
//!   `mknodat` or `linkat`. A directory entry over a directory keeps it (and updates its metadata).
//! - **Every entry costs the volume**, data or not: [`ENTRY_COST`] plus its path and link target
//!   and its kept xattrs are counted against `max_bytes` as it is read (a layer of 200,000 empty files
//!   adds ~266 MiB of metadata to the volume; a layer of only file bytes would be charged 0).
//! - **Regular files** get exactly their declared size, counted against `max_bytes` *before* any byte
//!   is written, so a 2^40-byte header (a GNU sparse file, which the tar crate hands over as data with
//!   its holes as zeros, or a decompression bomb) is refused at once. Runs of zeros become holes
//!   again. Data of other kinds (which no real tool writes) is read and discarded against the same
//!   budget.
//! - **Owners** are the header's numeric ids (user and group names are ignored: they would be looked
//!   up in the host's databases); ids of 65536 and above are refused, and id N is stored as
//!   [`IMAGE_IDS_BASE`] + N, an unprivileged host id no host user or sandbox slot has. Modes keep the
//!   setuid, setgid and sticky bits: a setuid-root file of an image is setuid to that unprivileged
//!   id on the host, so it grants nothing there. `fchmod` runs after `fchown`, which clears set-id bits.
//! - **xattrs** (PAX `SCHILY.xattr.NAME`): `user.*` is kept (at most `max_xattr_bytes` per entry);
//!   `security.capability` is dropped (a file capability is honoured by the host kernel, so it would
//!   be a host privilege), and so are other `security.*` (SELinux labels of the publisher's host) and
//!   `trusted.*` (host-root-only namespace); each is recorded in [`Unpacked::dropped`]. They are set
//!   with `fsetxattr` on the descriptor of the file just created; symlinks and FIFOs take no `user.*`
//!   xattrs (the kernel refuses them), so theirs are dropped and recorded.
//! - **Hard links** resolve their target beneath the root like a parent (`RESOLVE_IN_ROOT`) and link
//!   it with `linkat` from the target's parent descriptor without `AT_SYMLINK_FOLLOW`, so both ends
//!   are inside the root and a hard link can never name a host file. A missing target or a directory
//!   is refused.
//! - **Symlinks** are created with any target text: they are only ever resolved inside the sandbox or
//!   with `RESOLVE_IN_ROOT`.
//! - **Device nodes** are dropped (sandboxes get `/dev` from sandlot) and recorded; **FIFOs** are
//!   created; anything else (sockets, volume labels, unknown types) is dropped and recorded.
//! - **mtimes** are set on the descriptor (`futimens`) or with `utimensat(AT_SYMLINK_NOFOLLOW)`;
//!   directories get theirs at the end, since creating their children changes them again. A
//!   directory this layer writes into without an entry of its own keeps the time of the unpack (as
//!   with Docker and containerd; umoci restores the old time).
//! - **Whiteouts** (OCI image spec, layer.md): `DIR/.wh.NAME` removes `NAME` (any kind, recursively,
//!   following no link) unless this layer itself wrote that path, and creates nothing; a missing name
//!   is fine. `DIR/.wh..wh..opq` removes every child of `DIR` that this layer did not write, wherever
//!   the marker stands among this layer's entries. What this layer wrote is tracked in a tree of path
//!   components, one node per path (at most `max_entries` nodes), keyed by the entry's path as
//!   written (a file written through a symlinked parent is kept under the symlink's path). Other
//!   `.wh..wh.` names are ignored and recorded; `.wh..` and `.wh...` (the directory itself, its
//!   parent) are refused. Each directory is emptied once per layer (by device and inode, however
//!   many markers or symlinked aliases name it), so markers cannot make the work quadratic.
//! - **Bounded resources.** No recursion on tree depth; a handful of descriptors open (the cached
//!   parent of the current entry and a duplicate of it, two while creating missing parents, one for a
//!   hard link's target directory; a removal walk adds at most 16); memory bounded by `max_entries` (the written
//!   tree, names ≤ 255 bytes) and by a cap on what the tar crate reads into memory for one entry's
//!   headers (PAX records, GNU long names, sparse maps: `2 × max_path_bytes + max_xattr_bytes` + 1 MiB),
//!   enforced by counting those reads. zstd frames asking for a window over 128 MiB (zstd's own
//!   default limit) are refused, since the decoder keeps a window's worth of output in memory.
//! - **Names with newlines or invalid UTF-8** are legal on Linux and created as given; they are only
//!   escaped (`\xNN`) when printed.
//!
//! A stream cut exactly at an entry boundary, without tar's two end-of-archive blocks, reads as a
//! complete archive (Go's archive/tar, which most image tools use, reads it the same way); the
//! caller checks the layer's digest, which such a cut cannot match. A cut anywhere else is an error.
//!
//! An error mid-layer leaves the tree partly applied. That is by design: the caller applies each
//! layer into a fresh subvolume and deletes it when this fails.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::rc::Rc;

use nix::fcntl::{openat, openat2, AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstatat, mkdirat, mknodat, FileStat, Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchownat, Gid, Uid};

use crate::tree;

/// Host uid/gid that image id 0 is stored as; image id N is stored as IMAGE_IDS_BASE + N (N < 65536).
/// Just below the first sandbox slot range (ids.rs: slot n = 0x1000_0000 + n * 65536), so a setuid-root
/// file of an image is owned by an unprivileged host id that no host user or sandbox slot has.
pub const IMAGE_IDS_BASE: u32 = 0x0FFF_0000;

/// Ids an image may use: 0 ..= 65535, the size of a sandbox's uid map.
const IMAGE_IDS: u64 = 65536;

/// How many dropped entries [`Unpacked::dropped`] lists (all are counted).
const DROPPED_LISTED: usize = 20;

/// Linux's NAME_MAX: no component can be longer.
const NAME_MAX: usize = 255;

/// Largest zstd window accepted, zstd's own default decoder limit (`ZSTD_WINDOWLOG_LIMIT_DEFAULT`, 27).
const ZSTD_MAX_WINDOW: u64 = 1 << 27;

/// Header bytes the tar crate may read into memory for one entry beyond paths and xattrs: the 512-byte
/// headers themselves, other PAX records, a GNU sparse map (21 extents per 512 bytes, so ~43,000).
const HEADER_SLACK: u64 = 1 << 20;

/// What one entry costs the layers volume beyond its file data, charged against `max_bytes`: btrfs
/// keeps an inode item, a directory entry and its index, and an inode ref for every path, plus the
/// tree blocks around them (metadata is stored twice). Measured: 200,000 empty files grew the volume
/// by 266 MiB, ~1.3 KiB each; 2 KiB leaves room for fuller names and extended refs.
pub const ENTRY_COST: u64 = 2 << 10;

/// Bytes of file data copied at a time.
const COPY_CHUNK: usize = 128 << 10;

/// Bounds on what one layer may make the daemon do.
#[derive(Debug, Clone)]
pub struct UnpackLimits {
    /// Tar entries in the layer, and paths this layer writes (default 500,000: Debian's largest
    /// images hold ~100,000 paths over all their layers).
    pub max_entries: u64,
    /// Total bytes charged to this layer (default 64 GiB): file bytes (apparent sizes) written, data
    /// of other entries read and discarded, and [`ENTRY_COST`] plus the path, link target and kept
    /// xattrs of every entry.
    pub max_bytes: u64,
    /// Path components of an entry (default 128).
    pub max_depth: usize,
    /// Bytes of an entry's path, and of a link's target (default 4096, PATH_MAX).
    pub max_path_bytes: usize,
    /// Bytes of the xattr names and values kept for one entry (default 64 KiB).
    pub max_xattr_bytes: usize,
    /// When set, the unpack stops with an error at the first entry read after it (the image store
    /// also checks it on every read of the layer's stream, which bounds one huge entry): what one
    /// layer may cost in CPU and disk time, whatever its size allows (default none).
    pub deadline: Option<std::time::Instant>,
}

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits {
            max_entries: 500_000,
            max_bytes: 64 << 30,
            max_depth: 128,
            max_path_bytes: 4096,
            max_xattr_bytes: 64 << 10,
            deadline: None,
        }
    }
}

/// What applying a layer did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Unpacked {
    /// Tar entries applied (including whiteouts).
    pub entries: u64,
    /// File bytes written (apparent sizes).
    pub bytes: u64,
    /// Everything counted against `max_bytes`: file bytes, discarded data and each entry's
    /// metadata cost. What the layer is charged on the layers volume.
    pub charged: u64,
    /// The first 20 entries (or parts of entries, such as an xattr) skipped on purpose, each
    /// "PATH: why" with the path escaped for printing.
    pub dropped: Vec<String>,
    /// How many were skipped in all.
    pub dropped_count: u64,
}

/// A layer that could not be applied: which entry (escaped for printing: newlines, control bytes and
/// invalid UTF-8 as \xNN) and why. `entry` is None for stream-level errors (bad compression, truncated tar).
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(.entry.as_deref(), .reason, .source.as_ref()))]
pub struct UnpackError {
    /// The entry's path, escaped; `None` when the stream itself is at fault.
    pub entry: Option<String>,
    /// What is wrong, in words.
    pub reason: String,
    /// The system or decoder error behind it, if any.
    #[source]
    pub source: Option<io::Error>,
}

fn describe(entry: Option<&str>, reason: &str, source: Option<&io::Error>) -> String {
    let mut s = match entry {
        Some(e) => format!("layer entry \"{e}\": {reason}"),
        None => format!("layer: {reason}"),
    };
    if let Some(src) = source {
        let _ = write!(s, ": {src}");
    }
    s
}

impl UnpackError {
    fn stream(reason: impl Into<String>, source: Option<io::Error>) -> Self {
        UnpackError { entry: None, reason: reason.into(), source }
    }
}

/// Escapes a name for printing: printable UTF-8 as is, `\` and `"` backslashed, control characters
/// and invalid UTF-8 as `\xNN` per byte.
pub(crate) fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        let _ = write!(out, "\\x{b:02x}");
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

fn own(fd: std::os::fd::RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful open call and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

// ---------------------------------------------------------------------------------------------------
// Decompression
// ---------------------------------------------------------------------------------------------------

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Wraps `r` in a gzip or zstd decoder if its first bytes say so (magic 1f 8b / 28 b5 2f fd), else passes
/// it through (plain tar). The media type is not trusted; the bytes are.
///
/// gzip streams of several members and zstd streams of several frames (skippable ones skipped) are
/// decoded whole. A zstd frame asking for a window over 128 MiB is refused when it is reached.
pub fn decompress<'a>(r: impl io::Read + 'a) -> io::Result<Box<dyn io::Read + 'a>> {
    let mut src = Peekable { inner: r, buf: Vec::new(), pos: 0 };
    let head = src.peek(4)?;
    if head.starts_with(&GZIP_MAGIC) {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(src)))
    } else if head == ZSTD_MAGIC {
        Ok(Box::new(ZstdFrames { src: Some(src), frame: None, decoder: None }))
    } else {
        Ok(Box::new(src))
    }
}

/// A reader that can look ahead without consuming.
struct Peekable<R> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
}

impl<R: Read> Peekable<R> {
    /// Up to `n` bytes ahead (fewer only at the end of the stream).
    fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        while self.buf.len() < n {
            let mut chunk = [0u8; 64];
            let want = (n - self.buf.len()).min(chunk.len());
            let got = match self.inner.read(&mut chunk[..want]) {
                Ok(0) => break,
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.buf.extend_from_slice(&chunk[..got]);
        }
        Ok(&self.buf[..self.buf.len().min(n)])
    }

    /// Consumes exactly `n` bytes.
    fn skip(&mut self, n: u64) -> io::Result<()> {
        let skipped = io::copy(&mut self.by_ref().take(n), &mut io::sink())?;
        if skipped != n {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the stream ends inside a skippable zstd frame"));
        }
        Ok(())
    }
}

impl<R: Read> Read for Peekable<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.buf.len() {
            let n = (self.buf.len() - self.pos).min(out.len());
            out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        self.inner.read(out)
    }
}

/// A zstd stream of one or more frames. ruzstd's decoder reads one frame; this checks each frame's
/// window before handing it over and starts the next frame when one ends.
struct ZstdFrames<R: Read> {
    /// The compressed stream between frames.
    src: Option<Peekable<R>>,
    /// The frame being decoded (owning the stream meanwhile).
    frame: Option<ruzstd::decoding::StreamingDecoder<Peekable<R>, ruzstd::decoding::FrameDecoder>>,
    /// A finished frame's decoder, reused for the next (its buffers are allocated once).
    decoder: Option<ruzstd::decoding::FrameDecoder>,
}

fn zstd_error(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("zstd: {what}"))
}

/// The window a zstd frame header (magic included) asks for, per RFC 8878 section 3.1.1.1.
fn zstd_window(h: &[u8]) -> io::Result<u64> {
    let short = || zstd_error("the stream ends inside a frame header");
    let descriptor = *h.get(4).ok_or_else(short)?;
    let single_segment = descriptor & 0x20 != 0;
    if !single_segment {
        let wd = *h.get(5).ok_or_else(short)?;
        let base = 1u64 << (10 + u32::from(wd >> 3));
        return Ok(base + base / 8 * u64::from(wd & 7));
    }
    // A single-segment frame's window is its content size.
    let dict_id_bytes = [0, 1, 2, 4][usize::from(descriptor & 3)];
    let size_bytes = [1, 2, 4, 8][usize::from(descriptor >> 6)];
    let at = 5 + dict_id_bytes;
    let field = h.get(at..at + size_bytes).ok_or_else(short)?;
    let mut size = field.iter().rev().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    if size_bytes == 2 {
        size += 256;
    }
    Ok(size)
}

impl<R: Read> Read for ZstdFrames<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some(frame) = self.frame.as_mut() {
                let n = frame.read(out)?;
                if n > 0 {
                    return Ok(n);
                }
                let (src, decoder) = self.frame.take().expect("checked above").into_parts();
                self.src = Some(src);
                self.decoder = Some(decoder);
            }
            let mut src = self.src.take().expect("the stream is held between frames");
            // Magic, descriptor, window byte, dictionary id (≤ 4), content size (≤ 8).
            let head = src.peek(18)?;
            if head.is_empty() {
                self.src = Some(src);
                return Ok(0);
            }
            let magic = u32::from_le_bytes(
                head.get(..4)
                    .ok_or_else(|| zstd_error("the stream ends inside a frame's magic number"))?
                    .try_into()
                    .expect("4 bytes"),
            );
            if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
                let len = head.get(4..8).ok_or_else(|| zstd_error("the stream ends inside a skippable frame"))?;
                let len = u32::from_le_bytes(len.try_into().expect("4 bytes"));
                src.skip(8 + u64::from(len))?;
                self.src = Some(src);
                continue;
            }
            if head[..4] != ZSTD_MAGIC {
                return Err(zstd_error("bytes after a frame are neither a zstd frame nor a skippable one"));
            }
            let window = zstd_window(head)?;
            if window > ZSTD_MAX_WINDOW {
                return Err(zstd_error(format!(
                    "a frame asks for a {window}-byte window, over the {ZSTD_MAX_WINDOW}-byte limit (zstd's own \
                     default); recompress the layer without --long or with a smaller window"
                )));
            }
            let decoder = self.decoder.take().unwrap_or_default();
            let frame = ruzstd::decoding::StreamingDecoder::new_with_decoder(src, decoder).map_err(zstd_error)?;
            self.frame = Some(frame);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Bounding what the tar crate reads into memory
// ---------------------------------------------------------------------------------------------------

/// Counts what the tar crate reads while it parses headers (`Entries::next`), which it keeps in
/// memory whole (a PAX record set, a GNU long name, a sparse map). Entry data is read by this module
/// itself, against `max_bytes`, so only header reads are capped here.
#[derive(Default)]
struct HeaderBudget {
    /// Bytes still allowed while parsing headers; `None` while data is being read.
    left: Cell<Option<u64>>,
    /// Set when the cap was hit, to name the cause instead of the tar crate's generic error.
    exceeded: Cell<bool>,
}

struct Counted<R> {
    inner: R,
    budget: Rc<HeaderBudget>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let Some(left) = self.budget.left.get() else {
            return self.inner.read(out);
        };
        if left == 0 {
            self.budget.exceeded.set(true);
            return Err(io::Error::other("an entry's headers are over the size cap"));
        }
        let want = out.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut out[..want])?;
        self.budget.left.set(Some(left - n as u64));
        Ok(n)
    }
}

// ---------------------------------------------------------------------------------------------------
// What this layer wrote
// ---------------------------------------------------------------------------------------------------

/// One path this layer wrote or wrote beneath.
struct Node {
    parent: u32,
    name: Box<[u8]>,
    /// This layer made it (a file, a new directory): everything below it is this layer's too. When
    /// false, it is a directory that existed before and this layer only wrote into it.
    made: bool,
    /// A directory's mtime, set once all entries are applied.
    mtime: Option<i64>,
}

/// The paths this layer wrote, as a tree of components (node 0 is the root).
struct Written {
    nodes: Vec<Node>,
    children: HashMap<(u32, Box<[u8]>), u32>,
    cap: u64,
}

const ROOT_NODE: u32 = 0;

impl Written {
    fn new(cap: u64) -> Self {
        Written {
            nodes: vec![Node { parent: ROOT_NODE, name: Box::default(), made: false, mtime: None }],
            children: HashMap::new(),
            cap,
        }
    }

    fn child(&self, parent: u32, name: &[u8]) -> Option<u32> {
        self.children.get(&(parent, Box::from(name))).copied()
    }

    /// The node of `name` in `parent`, added (with `made`) if new. `Err` when the cap is reached.
    fn add(&mut self, parent: u32, name: &[u8], made: bool) -> Result<u32, ()> {
        if let Some(id) = self.child(parent, name) {
            if made {
                self.nodes[id as usize].made = true;
            }
            return Ok(id);
        }
        if self.nodes.len() as u64 > self.cap {
            return Err(());
        }
        let id = u32::try_from(self.nodes.len()).map_err(|_| ())?;
        self.nodes.push(Node { parent, name: Box::from(name), made, mtime: None });
        self.children.insert((parent, Box::from(name)), id);
        Ok(id)
    }

    /// The node of a path, if this layer wrote it or beneath it.
    fn find(&self, comps: &[&[u8]]) -> Option<u32> {
        comps.iter().try_fold(ROOT_NODE, |at, c| self.child(at, c))
    }

    /// The path of a node, `/`-joined (empty for the root).
    fn path(&self, mut id: u32) -> Vec<u8> {
        let mut parts = Vec::new();
        while id != ROOT_NODE {
            let n = &self.nodes[id as usize];
            parts.push(&n.name[..]);
            id = n.parent;
        }
        parts.reverse();
        parts.join(&b'/')
    }
}

// ---------------------------------------------------------------------------------------------------
// Applying a layer
// ---------------------------------------------------------------------------------------------------

/// Applies one layer (an uncompressed tar stream) onto the directory `root` (a descriptor the caller
/// opened with tree::open_root). Owners are stored as IMAGE_IDS_BASE + id (ids >= 65536 are refused).
///
/// See the module documentation for what is refused, dropped and kept, and why.
pub fn apply_layer(root: BorrowedFd<'_>, tar: impl io::Read, limits: &UnpackLimits) -> Result<Unpacked, UnpackError> {
    let budget = Rc::new(HeaderBudget::default());
    let header_cap = (2 * limits.max_path_bytes + limits.max_xattr_bytes) as u64 + HEADER_SLACK;
    let mut archive = tar::Archive::new(Counted { inner: tar, budget: budget.clone() });
    let mut entries = archive.entries().map_err(|e| UnpackError::stream("the layer is not a tar stream", Some(e)))?;
    let mut layer = Layer {
        root,
        limits,
        out: Unpacked::default(),
        seen: 0,
        consumed: 0,
        written: Written::new(limits.max_entries),
        parent: None,
        data_read: false,
        cleaned: HashSet::new(),
        copy_buf: Vec::new(),
    };
    loop {
        budget.left.set(Some(header_cap));
        let next = entries.next();
        budget.left.set(None);
        let Some(entry) = next else { break };
        let mut entry = entry.map_err(|e| {
            if budget.exceeded.get() {
                UnpackError::stream(
                    format!(
                        "an entry's headers (PAX records, long names, sparse map) are over {header_cap} bytes, \
                         which no real image needs"
                    ),
                    None,
                )
            } else {
                UnpackError::stream(
                    "cannot read the next tar header (corrupt compression, or a malformed or truncated tar)",
                    Some(e),
                )
            }
        })?;
        layer.seen += 1;
        if limits.deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(UnpackError::stream(
                format!("the layer was still unpacking at its deadline, after {} entries", layer.seen - 1),
                None,
            ));
        }
        if layer.seen > limits.max_entries {
            return Err(UnpackError::stream(format!("more than {} entries (max_entries)", limits.max_entries), None));
        }
        let path = entry.path_bytes().into_owned();
        let link = entry.link_name_bytes().map_or(0, |l| l.len() as u64);
        layer.charge(&path, ENTRY_COST + path.len() as u64 + link)?;
        layer.apply(&mut entry, &path)?;
        layer.drain(&mut entry, &path)?;
    }
    layer.finish()?;
    layer.out.charged = layer.consumed;
    Ok(layer.out)
}

/// The kind of entry, as this module handles it.
enum Kind {
    File,
    Dir,
    Symlink,
    HardLink,
    Fifo,
    Device,
    /// PAX global headers: metadata for the archive, not a file.
    Global,
    Other(u8),
}

fn kind(t: tar::EntryType) -> Kind {
    use tar::EntryType as T;
    match t {
        // POSIX: a contiguous file is a regular file to every implementation that has no special
        // support; GNU sparse files come out of the tar crate as their full data.
        T::Regular | T::Continuous | T::GNUSparse => Kind::File,
        T::Directory => Kind::Dir,
        T::Symlink => Kind::Symlink,
        T::Link => Kind::HardLink,
        T::Fifo => Kind::Fifo,
        T::Char | T::Block => Kind::Device,
        T::XGlobalHeader => Kind::Global,
        other => Kind::Other(other.as_byte()),
    }
}

/// Metadata every created entry gets.
struct Meta {
    uid: u32,
    gid: u32,
    mode: u32,
    mtime: i64,
    xattrs: Vec<(CString, Vec<u8>)>,
}

struct Layer<'r, 'l> {
    root: BorrowedFd<'r>,
    limits: &'l UnpackLimits,
    out: Unpacked,
    /// Tar entries read (applied or not), against `max_entries`.
    seen: u64,
    /// File bytes written plus other entries' data discarded, against `max_bytes`.
    consumed: u64,
    written: Written,
    /// The last entry's parent directory: its path and descriptor. Cleared whenever anything is
    /// removed, since a removal can change what a path resolves to.
    parent: Option<(Vec<u8>, OwnedFd)>,
    /// The current entry's data was read (by [`Layer::make_file`]).
    data_read: bool,
    /// Directories (device, inode) an opaque marker already emptied of lower entries.
    cleaned: HashSet<(u64, u64)>,
    /// The copy buffer of [`Layer::make_file`], kept between files.
    copy_buf: Vec<u8>,
}

/// A path split into components, checked.
struct EntryPath<'p> {
    comps: Vec<&'p [u8]>,
}

impl<'p> EntryPath<'p> {
    fn parent(&self) -> &[&'p [u8]] {
        &self.comps[..self.comps.len().saturating_sub(1)]
    }

    fn name(&self) -> Option<&'p [u8]> {
        self.comps.last().copied()
    }
}

fn cstring(b: &[u8]) -> CString {
    CString::new(b).expect("NUL bytes are refused when the path is checked")
}

impl Layer<'_, '_> {
    fn refuse(&self, path: &[u8], reason: impl Into<String>, source: Option<io::Error>) -> UnpackError {
        UnpackError { entry: Some(escape(path)), reason: reason.into(), source }
    }

    fn dropped(&mut self, path: &[u8], why: &str) {
        self.out.dropped_count += 1;
        if self.out.dropped.len() < DROPPED_LISTED {
            self.out.dropped.push(format!("{}: {why}", escape(path)));
        }
    }

    /// Splits and checks a path of the layer (an entry's or a hard link's target).
    fn split<'p>(&self, path: &[u8], raw: &'p [u8]) -> Result<EntryPath<'p>, UnpackError> {
        if raw.is_empty() {
            return Err(self.refuse(path, "empty name", None));
        }
        if raw.contains(&0) {
            return Err(self.refuse(path, "the name contains a NUL byte", None));
        }
        if raw.len() > self.limits.max_path_bytes {
            return Err(self.refuse(
                path,
                format!(
                    "the name is {} bytes, over the {}-byte limit (max_path_bytes)",
                    raw.len(),
                    self.limits.max_path_bytes
                ),
                None,
            ));
        }
        let mut comps = Vec::new();
        for c in raw.split(|b| *b == b'/') {
            match c {
                b"" | b"." => {}
                b".." => return Err(self.refuse(path, "path leaves the image root (a `..` component)", None)),
                c if c.len() > NAME_MAX => {
                    return Err(self.refuse(
                        path,
                        format!("a component is {} bytes, over Linux's {NAME_MAX}", c.len()),
                        None,
                    ))
                }
                c => comps.push(c),
            }
        }
        if comps.len() > self.limits.max_depth {
            return Err(self.refuse(
                path,
                format!("{} components deep, over the limit of {} (max_depth)", comps.len(), self.limits.max_depth),
                None,
            ));
        }
        Ok(EntryPath { comps })
    }

    fn meta<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>, path: &[u8]) -> Result<Meta, UnpackError> {
        let h = entry.header();
        let bad = |what: &str, e: io::Error| self.refuse(path, format!("unreadable {what} in the header"), Some(e));
        let uid = h.uid().map_err(|e| bad("uid", e))?;
        let gid = h.gid().map_err(|e| bad("gid", e))?;
        let mode = h.mode().map_err(|e| bad("mode", e))? & 0o7777;
        let mtime = h.mtime().map_err(|e| bad("mtime", e))?;
        for (what, id) in [("uid", uid), ("gid", gid)] {
            if id >= IMAGE_IDS {
                return Err(self.refuse(
                    path,
                    format!("owner {what} {id} is outside the {IMAGE_IDS} ids an image may use (0-65535)"),
                    None,
                ));
            }
        }
        let mut xattrs = Vec::new();
        let mut xattr_bytes = 0usize;
        let mut dropped = Vec::new();
        if let Some(pax) = entry.pax_extensions().map_err(|e| self.refuse(path, "unreadable PAX records", Some(e)))? {
            for rec in pax {
                let rec = rec.map_err(|e| self.refuse(path, "malformed PAX record", Some(e)))?;
                let Some(name) = rec.key_bytes().strip_prefix(b"SCHILY.xattr.") else { continue };
                let shown = escape(name);
                if name.starts_with(b"user.") && !name.contains(&0) {
                    xattr_bytes += name.len() + rec.value_bytes().len();
                    if xattr_bytes > self.limits.max_xattr_bytes {
                        dropped.push(format!(
                            "xattr {shown} dropped: the entry's xattrs are over {} bytes (max_xattr_bytes)",
                            self.limits.max_xattr_bytes
                        ));
                        continue;
                    }
                    self.charge(path, (name.len() + rec.value_bytes().len()) as u64)?;
                    xattrs.push((cstring(name), rec.value_bytes().to_vec()));
                } else if name == b"security.capability" {
                    dropped
                        .push("xattr security.capability dropped (a file capability would be a host privilege)".into());
                } else {
                    dropped.push(format!("xattr {shown} dropped (only user.* xattrs are kept)"));
                }
            }
        }
        for d in dropped {
            self.dropped(path, &d);
        }
        Ok(Meta { uid: uid as u32, gid: gid as u32, mode, mtime: i64::try_from(mtime).unwrap_or(i64::MAX), xattrs })
    }

    fn apply<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>, path: &[u8]) -> Result<(), UnpackError> {
        let kind = kind(entry.header().entry_type());
        if let Kind::Global = kind {
            // Archive-wide PAX metadata (git archive writes a commit id here): nothing to create.
            return Ok(());
        }
        let p = self.split(path, path)?;
        // Whiteouts first: they create nothing, whatever their header's type says.
        if let Some(name) = p.name() {
            if name == b".wh..wh..opq" {
                self.opaque(path, p.parent())?;
                self.out.entries += 1;
                return Ok(());
            }
            if name.starts_with(b".wh..wh.") {
                self.dropped(path, "unknown whiteout marker ignored");
                return Ok(());
            }
            if let Some(hidden) = name.strip_prefix(b".wh.") {
                if matches!(hidden, b"" | b"." | b"..") {
                    // `.wh..` and `.wh...` would name the directory itself or its parent.
                    return Err(self.refuse(path, "a whiteout that names no entry (empty, `.` or `..`)", None));
                }
                self.whiteout(path, p.parent(), hidden)?;
                self.out.entries += 1;
                return Ok(());
            }
        }
        match kind {
            Kind::Device => {
                self.dropped(path, "device node dropped (sandboxes get /dev from sandlot)");
                return Ok(());
            }
            Kind::Other(t) => {
                let what =
                    format!("entry of tar type {:?} dropped (not a file, directory, link or FIFO)", char::from(t));
                self.dropped(path, &what);
                return Ok(());
            }
            _ => {}
        }
        let meta = self.meta(entry, path)?;
        let Some(name) = p.name() else {
            // The root itself (`./`).
            if !matches!(kind, Kind::Dir) {
                return Err(self.refuse(path, "only a directory can name the image root", None));
            }
            self.set_owner_mode(path, self.root, &meta)?;
            self.written.nodes[ROOT_NODE as usize].mtime = Some(meta.mtime);
            self.out.entries += 1;
            return Ok(());
        };
        let parent_node = self.parent_dir(path, p.parent())?;
        let parent = self
            .parent
            .as_ref()
            .expect("parent_dir caches it")
            .1
            .try_clone()
            .map_err(|e| self.refuse(path, "cannot duplicate the parent directory's descriptor", Some(e)))?;
        let cname = cstring(name);
        match kind {
            Kind::Dir => self.make_dir(path, parent.as_fd(), &cname, parent_node, name, &meta)?,
            Kind::File => {
                self.add_written(path, parent_node, name, true)?;
                self.make_file(entry, path, parent.as_fd(), &cname, &meta)?;
            }
            Kind::Symlink => {
                self.add_written(path, parent_node, name, true)?;
                self.make_symlink(entry, path, parent.as_fd(), &cname, &meta)?;
            }
            Kind::HardLink => {
                self.add_written(path, parent_node, name, true)?;
                self.make_hard_link(entry, path, parent.as_fd(), &cname)?;
            }
            Kind::Fifo => {
                self.add_written(path, parent_node, name, true)?;
                self.make_fifo(path, parent.as_fd(), &cname, &meta)?;
            }
            Kind::Device | Kind::Other(_) | Kind::Global => unreachable!("handled above"),
        }
        self.out.entries += 1;
        Ok(())
    }

    fn add_written(&mut self, path: &[u8], parent: u32, name: &[u8], made: bool) -> Result<u32, UnpackError> {
        let id = self.written.add(parent, name, made).map_err(|()| {
            self.refuse(
                path,
                format!("the layer writes more than {} paths (max_entries)", self.limits.max_entries),
                None,
            )
        })?;
        if made {
            // A non-directory, or a directory made anew: an mtime recorded for an older directory of
            // this name is not for this one.
            self.written.nodes[id as usize].mtime = None;
        }
        Ok(id)
    }

    /// Reads and discards what is left of an entry's data (data of entries that are not files),
    /// against `max_bytes`, so the tar crate never skips it while its header reads are counted.
    fn drain<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>, path: &[u8]) -> Result<(), UnpackError> {
        let left = if std::mem::take(&mut self.data_read) { 0 } else { entry.size() };
        if left == 0 {
            return Ok(());
        }
        self.charge(path, left)?;
        let n = io::copy(&mut entry.by_ref().take(left), &mut io::sink())
            .map_err(|e| UnpackError::stream(format!("reading the data of \"{}\"", escape(path)), Some(e)))?;
        if n != left {
            return Err(truncated(path));
        }
        Ok(())
    }

    fn charge(&mut self, path: &[u8], bytes: u64) -> Result<(), UnpackError> {
        match self.consumed.checked_add(bytes) {
            Some(total) if total <= self.limits.max_bytes => {
                self.consumed = total;
                Ok(())
            }
            _ => Err(self.refuse(
                path,
                format!(
                    "{bytes} more bytes (data, or the entry's cost on the volume) would bring the layer over {} \
                     bytes (max_bytes); {} already charged",
                    self.limits.max_bytes, self.consumed
                ),
                None,
            )),
        }
    }

    /// Opens (creating what is missing) the directory `comps` beneath the root, caches it as the
    /// current parent and returns its node in [`Written`].
    fn parent_dir(&mut self, path: &[u8], comps: &[&[u8]]) -> Result<u32, UnpackError> {
        let key = comps.join(&b'/');
        let mut node = ROOT_NODE;
        // Record the chain as written beneath (keeps an opaque marker of an ancestor from removing
        // what this layer writes); the parts this call creates are marked made below.
        for c in comps {
            node = self.add_written(path, node, c, false)?;
        }
        if matches!(&self.parent, Some((k, _)) if *k == key) {
            return Ok(node);
        }
        self.parent = None;
        let fd = match resolve_dir(self.root, &key) {
            Ok(fd) => fd,
            Err(nix::Error::ENOENT) => self.make_parents(path, comps)?,
            Err(e) => return Err(self.parent_error(path, &key, e)),
        };
        self.parent = Some((key, fd));
        Ok(node)
    }

    fn parent_error(&self, path: &[u8], dir: &[u8], e: nix::Error) -> UnpackError {
        let reason = match e {
            nix::Error::ENOTDIR => format!("its parent \"{}\" is not a directory", escape(dir)),
            nix::Error::ELOOP => format!("its parent \"{}\" is a chain of too many symlinks", escape(dir)),
            nix::Error::ENOENT => {
                format!("its parent \"{}\" is a symlink whose target does not exist in the image", escape(dir))
            }
            _ => format!("cannot open its parent \"{}\"", escape(dir)),
        };
        self.refuse(path, reason, Some(errno(e)))
    }

    /// Creates the missing directories of `comps`. The deepest prefix that exists is found by
    /// resolving shorter and shorter prefixes inside the root (usually one step, so a deep path
    /// costs O(depth) lookups, not O(depth²)); below it every component is created with `mkdirat`
    /// and opened with `O_NOFOLLOW` from its parent's descriptor: a directory just made holds nothing
    /// a lookup could follow.
    fn make_parents(&mut self, path: &[u8], comps: &[&[u8]]) -> Result<OwnedFd, UnpackError> {
        let mut existing = comps.len();
        let mut at = loop {
            // `comps` itself did not resolve (the caller's ENOENT): try shorter prefixes.
            existing -= 1;
            let prefix = comps[..existing].join(&b'/');
            match resolve_dir(self.root, &prefix) {
                Ok(fd) => break fd,
                Err(nix::Error::ENOENT) if existing > 0 => {}
                Err(e) => return Err(self.parent_error(path, &prefix, e)),
            }
        };
        let mut node = self.written.find(&comps[..existing]).expect("parent_dir recorded the chain");
        for (i, c) in comps.iter().enumerate().skip(existing) {
            let prefix = comps[..=i].join(&b'/');
            node = self.written.child(node, c).expect("parent_dir recorded the chain");
            let name = cstring(c);
            match mkdirat(Some(at.as_raw_fd()), name.as_c_str(), Mode::from_bits_truncate(0o755)) {
                Ok(()) => {}
                // The name exists but did not resolve: a symlink to nothing.
                Err(nix::Error::EEXIST) => return Err(self.parent_error(path, &prefix, nix::Error::ENOENT)),
                Err(e) => {
                    return Err(self.refuse(
                        path,
                        format!("cannot create directory \"{}\"", escape(&prefix)),
                        Some(errno(e)),
                    ))
                }
            }
            self.written.nodes[node as usize].made = true;
            let fd = open_here(at.as_fd(), &name, OFlag::O_DIRECTORY | OFlag::O_RDONLY).map_err(|e| {
                self.refuse(path, format!("cannot open new directory \"{}\"", escape(&prefix)), Some(e))
            })?;
            let implied = Meta { uid: 0, gid: 0, mode: 0o755, mtime: 0, xattrs: Vec::new() };
            self.set_owner_mode(path, fd.as_fd(), &implied)?;
            at = fd;
        }
        Ok(at)
    }

    /// Owner, then mode (chown clears set-id bits), then xattrs, on a descriptor of a file or directory.
    fn set_owner_mode(&self, path: &[u8], fd: BorrowedFd<'_>, meta: &Meta) -> Result<(), UnpackError> {
        nix::unistd::fchown(
            fd.as_raw_fd(),
            Some(Uid::from_raw(IMAGE_IDS_BASE + meta.uid)),
            Some(Gid::from_raw(IMAGE_IDS_BASE + meta.gid)),
        )
        .map_err(|e| self.refuse(path, "cannot set the owner", Some(errno(e))))?;
        nix::sys::stat::fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(meta.mode))
            .map_err(|e| self.refuse(path, "cannot set the mode", Some(errno(e))))?;
        for (name, value) in &meta.xattrs {
            // SAFETY: `name` is NUL-terminated and `value` is a live buffer of the given length; the
            // kernel only reads them.
            let rc = unsafe { libc::fsetxattr(fd.as_raw_fd(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
            if rc != 0 {
                return Err(self.refuse(
                    path,
                    format!("cannot set xattr {}", name.to_string_lossy()),
                    Some(io::Error::last_os_error()),
                ));
            }
        }
        Ok(())
    }

    /// Removes whatever has `name` in `dir` so a new entry can take it. Returns whether a directory
    /// is there and was kept (`keep_dir`).
    fn clear(&mut self, path: &[u8], dir: BorrowedFd<'_>, name: &CStr, keep_dir: bool) -> Result<bool, UnpackError> {
        let st = match fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(nix::Error::ENOENT) => return Ok(false),
            Err(e) => return Err(self.refuse(path, "cannot inspect what has its name", Some(errno(e)))),
        };
        if is_dir(&st) && keep_dir {
            return Ok(true);
        }
        // Removing may change what a cached parent path resolves to (the caller holds its own
        // descriptor of this entry's parent, which is not what is removed).
        self.parent = None;
        tree::remove_beneath(dir, name)
            .map_err(|e| self.refuse(path, "cannot remove what had its name before", Some(e)))?;
        Ok(false)
    }

    fn make_dir(
        &mut self,
        path: &[u8],
        dir: BorrowedFd<'_>,
        name: &CStr,
        parent_node: u32,
        raw: &[u8],
        meta: &Meta,
    ) -> Result<(), UnpackError> {
        let kept = self.clear(path, dir, name, true)?;
        let node = self.add_written(path, parent_node, raw, !kept)?;
        if !kept {
            mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(0o700))
                .map_err(|e| self.refuse(path, "cannot create the directory", Some(errno(e))))?;
        }
        let fd = open_here(dir, name, OFlag::O_DIRECTORY | OFlag::O_RDONLY)
            .map_err(|e| self.refuse(path, "cannot open the directory", Some(e)))?;
        self.set_owner_mode(path, fd.as_fd(), meta)?;
        self.written.nodes[node as usize].mtime = Some(meta.mtime);
        Ok(())
    }

    fn make_file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &[u8],
        dir: BorrowedFd<'_>,
        name: &CStr,
        meta: &Meta,
    ) -> Result<(), UnpackError> {
        let size = entry.size();
        // Before anything is created or written: a refused size costs nothing.
        self.charge(path, size)?;
        self.clear(path, dir, name, false)?;
        let fd = openat(
            Some(dir.as_raw_fd()),
            name,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| self.refuse(path, "cannot create the file", Some(errno(e))))?;
        let mut file = File::from(own(fd));
        // One copy buffer for the whole layer (a layer of a million small files would otherwise
        // allocate a million).
        let mut buf = std::mem::take(&mut self.copy_buf);
        buf.resize(COPY_CHUNK, 0);
        let copied = self.copy(entry, path, &mut file, &mut buf, size);
        self.copy_buf = buf;
        copied?;
        file.set_len(size).map_err(|e| self.refuse(path, "cannot set the file's size", Some(e)))?;
        self.data_read = true;
        self.out.bytes += size;
        self.set_owner_mode(path, file.as_fd(), meta)?;
        let t = TimeSpec::new(meta.mtime, 0);
        nix::sys::stat::futimens(file.as_raw_fd(), &t, &t)
            .map_err(|e| self.refuse(path, "cannot set the mtime", Some(errno(e))))?;
        Ok(())
    }

    /// Copies exactly `size` bytes of the entry's data into `file`, leaving runs of zeros as holes.
    fn copy<R: Read>(
        &self,
        entry: &mut tar::Entry<'_, R>,
        path: &[u8],
        file: &mut File,
        buf: &mut [u8],
        size: u64,
    ) -> Result<(), UnpackError> {
        let mut left = size;
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = match entry.read(&mut buf[..want]) {
                Ok(0) => return Err(truncated(path)),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(UnpackError::stream(format!("reading the data of \"{}\"", escape(path)), Some(e)))
                }
            };
            let chunk = &buf[..n];
            // Runs of zeros (a sparse file's holes, which tar hands over as zeros) stay holes.
            let res = if chunk.iter().all(|b| *b == 0) {
                file.seek(io::SeekFrom::Current(n as i64)).map(drop)
            } else {
                file.write_all(chunk)
            };
            res.map_err(|e| self.refuse(path, "cannot write the file", Some(e)))?;
            left -= n as u64;
        }
        Ok(())
    }

    fn make_symlink<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &[u8],
        dir: BorrowedFd<'_>,
        name: &CStr,
        meta: &Meta,
    ) -> Result<(), UnpackError> {
        let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
        if target.is_empty() || target.contains(&0) || target.len() > self.limits.max_path_bytes {
            return Err(self.refuse(
                path,
                format!(
                    "a symlink's target must be 1 to {} bytes without NUL (max_path_bytes)",
                    self.limits.max_path_bytes
                ),
                None,
            ));
        }
        self.clear(path, dir, name, false)?;
        let target = cstring(&target);
        nix::unistd::symlinkat(target.as_c_str(), Some(dir.as_raw_fd()), name)
            .map_err(|e| self.refuse(path, "cannot create the symlink", Some(errno(e))))?;
        self.chown_at(path, dir, name, meta)?;
        self.xattrs_unsupported(path, meta, "a symlink");
        self.mtime_at(path, dir, name, meta.mtime)
    }

    fn make_fifo(&mut self, path: &[u8], dir: BorrowedFd<'_>, name: &CStr, meta: &Meta) -> Result<(), UnpackError> {
        self.clear(path, dir, name, false)?;
        mknodat(Some(dir.as_raw_fd()), name, SFlag::S_IFIFO, Mode::from_bits_truncate(0o600), 0)
            .map_err(|e| self.refuse(path, "cannot create the FIFO", Some(errno(e))))?;
        self.chown_at(path, dir, name, meta)?;
        // fchmod takes no O_PATH descriptor and opening a FIFO for reading or writing could block, so
        // the mode is set through /proc/self/fd of an O_PATH descriptor opened without following links.
        let fd =
            openat(Some(dir.as_raw_fd()), name, OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(|e| self.refuse(path, "cannot open the FIFO", Some(errno(e))))?;
        let fd = own(fd);
        let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
        nix::sys::stat::fchmodat(
            None,
            proc.as_str(),
            Mode::from_bits_truncate(meta.mode),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map_err(|e| self.refuse(path, "cannot set the FIFO's mode", Some(errno(e))))?;
        self.xattrs_unsupported(path, meta, "a FIFO");
        self.mtime_at(path, dir, name, meta.mtime)
    }

    fn make_hard_link<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &[u8],
        dir: BorrowedFd<'_>,
        name: &CStr,
    ) -> Result<(), UnpackError> {
        let raw = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
        let target = self.split(path, &raw)?;
        let Some(tname) = target.name() else {
            return Err(self.refuse(path, "a hard link to the image root (a directory)", None));
        };
        let shown = escape(&raw);
        let tdir = resolve_dir(self.root, &target.parent().join(&b'/')).map_err(|e| {
            self.refuse(path, format!("hard link target \"{shown}\" does not exist in the image"), Some(errno(e)))
        })?;
        let tname = cstring(tname);
        let tst = match fstatat(Some(tdir.as_raw_fd()), tname.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) => {
                return Err(self.refuse(
                    path,
                    format!("hard link target \"{shown}\" does not exist in the image"),
                    Some(errno(e)),
                ))
            }
        };
        if is_dir(&tst) {
            return Err(self.refuse(path, format!("hard link target \"{shown}\" is a directory"), None));
        }
        if let Ok(st) = fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            if (st.st_dev, st.st_ino) == (tst.st_dev, tst.st_ino) {
                // Already the same file (a link to itself, or a repeated entry).
                return Ok(());
            }
        }
        self.clear(path, dir, name, false)?;
        nix::unistd::linkat(Some(tdir.as_raw_fd()), tname.as_c_str(), Some(dir.as_raw_fd()), name, AtFlags::empty())
            .map_err(|e| self.refuse(path, format!("cannot link to \"{shown}\""), Some(errno(e))))
    }

    fn xattrs_unsupported(&mut self, path: &[u8], meta: &Meta, what: &str) {
        for (name, _) in &meta.xattrs {
            let why = format!("xattr {} dropped (the kernel keeps no user.* xattrs on {what})", name.to_string_lossy());
            self.dropped(path, &why);
        }
    }

    fn chown_at(&self, path: &[u8], dir: BorrowedFd<'_>, name: &CStr, meta: &Meta) -> Result<(), UnpackError> {
        fchownat(
            Some(dir.as_raw_fd()),
            name,
            Some(Uid::from_raw(IMAGE_IDS_BASE + meta.uid)),
            Some(Gid::from_raw(IMAGE_IDS_BASE + meta.gid)),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| self.refuse(path, "cannot set the owner", Some(errno(e))))
    }

    fn mtime_at(&self, path: &[u8], dir: BorrowedFd<'_>, name: &CStr, mtime: i64) -> Result<(), UnpackError> {
        let t = TimeSpec::new(mtime, 0);
        nix::sys::stat::utimensat(Some(dir.as_raw_fd()), name, &t, &t, UtimensatFlags::NoFollowSymlink)
            .map_err(|e| self.refuse(path, "cannot set the mtime", Some(errno(e))))
    }

    /// `.wh.NAME` in `parent`: removes NAME unless this layer wrote it.
    fn whiteout(&mut self, path: &[u8], parent: &[&[u8]], hidden: &[u8]) -> Result<(), UnpackError> {
        let mut comps = parent.to_vec();
        comps.push(hidden);
        if self.written.find(&comps).is_some() {
            // OCI layer.md: a whiteout hides only what lower layers hold.
            return Ok(());
        }
        let dir = match resolve_dir(self.root, &parent.join(&b'/')) {
            Ok(fd) => fd,
            // Nothing below a missing (or non-directory) parent to hide.
            Err(nix::Error::ENOENT | nix::Error::ENOTDIR) => return Ok(()),
            Err(e) => return Err(self.parent_error(path, &parent.join(&b'/'), e)),
        };
        self.parent = None;
        tree::remove_beneath(dir.as_fd(), &cstring(hidden))
            .map_err(|e| self.refuse(path, "cannot remove the whited-out entry", Some(e)))
    }

    /// `.wh..wh..opq` in `dir`: removes every child this layer did not write; in directories that
    /// existed before and that this layer wrote into, the same one level down, and so on.
    fn opaque(&mut self, path: &[u8], dir: &[&[u8]]) -> Result<(), UnpackError> {
        self.parent = None;
        let mut todo = vec![(dir.join(&b'/'), self.written.find(dir))];
        while let Some((rel, node)) = todo.pop() {
            let fd = match resolve_dir(self.root, &rel) {
                Ok(fd) => fd,
                Err(nix::Error::ENOENT | nix::Error::ENOTDIR) => continue,
                Err(e) => return Err(self.parent_error(path, &rel, e)),
            };
            // Each directory is cleaned once per layer, however many markers or aliases (symlinked
            // paths) name it: after that it holds only this layer's entries, and a layer of N markers
            // in a directory of N entries would otherwise cost N² work.
            let st = nix::sys::stat::fstat(fd.as_raw_fd())
                .map_err(|e| self.refuse(path, "cannot inspect the opaque directory", Some(errno(e))))?;
            if !self.cleaned.insert((st.st_dev, st.st_ino)) {
                continue;
            }
            let names = list(fd.as_fd()).map_err(|e| self.refuse(path, "cannot list the opaque directory", Some(e)))?;
            for child in names {
                let written = node.and_then(|n| self.written.child(n, child.to_bytes()));
                match written {
                    Some(id) if self.written.nodes[id as usize].made => {}
                    Some(id) => todo.push((self.written.path(id), Some(id))),
                    None => tree::remove_beneath(fd.as_fd(), &child)
                        .map_err(|e| self.refuse(path, "cannot remove a hidden entry", Some(e)))?,
                }
            }
        }
        Ok(())
    }

    /// Sets the directories' mtimes, now that no entry changes them any more.
    fn finish(&mut self) -> Result<(), UnpackError> {
        self.parent = None;
        for id in 0..self.written.nodes.len() {
            let Some(mtime) = self.written.nodes[id].mtime else { continue };
            let t = TimeSpec::new(mtime, 0);
            if id == ROOT_NODE as usize {
                nix::sys::stat::futimens(self.root.as_raw_fd(), &t, &t)
                    .map_err(|e| self.refuse(b".", "cannot set the mtime", Some(errno(e))))?;
                continue;
            }
            let path = self.written.path(id as u32);
            let (parent, name) = match path.iter().rposition(|b| *b == b'/') {
                Some(i) => (&path[..i], &path[i + 1..]),
                None => (&b""[..], &path[..]),
            };
            // A directory removed or replaced by a later entry has nothing to set.
            let Ok(dir) = resolve_dir(self.root, parent) else { continue };
            let name = cstring(name);
            match fstatat(Some(dir.as_raw_fd()), name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) if is_dir(&st) => self.mtime_at(&path, dir.as_fd(), &name, mtime)?,
                _ => {}
            }
        }
        Ok(())
    }
}

fn truncated(path: &[u8]) -> UnpackError {
    UnpackError::stream(format!("the tar stream ends inside the data of \"{}\" (truncated layer)", escape(path)), None)
}

fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}

/// Opens directory `rel` beneath `root` (`""` is the root), resolving every symlink and `..` as if
/// `root` were `/`, never through a magic link, never onto another mount.
fn resolve_dir(root: BorrowedFd<'_>, rel: &[u8]) -> nix::Result<OwnedFd> {
    let rel = if rel.is_empty() { CString::from(c".") } else { cstring(rel) };
    let how = OpenHow::new()
        .flags(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS | ResolveFlag::RESOLVE_NO_XDEV);
    // EAGAIN: a concurrent rename anywhere on the system made the kernel unsure the walk stayed
    // inside the root; trying again is the documented answer.
    let mut tries = 0;
    loop {
        match openat2(root.as_raw_fd(), rel.as_c_str(), how) {
            Err(nix::Error::EAGAIN) if tries < 16 => tries += 1,
            other => return other.map(own),
        }
    }
}

/// Opens `name` in `dir` without following a link in it.
fn open_here(dir: BorrowedFd<'_>, name: &CStr, flags: OFlag) -> io::Result<OwnedFd> {
    openat(Some(dir.as_raw_fd()), name, flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
        .map(own)
        .map_err(errno)
}

/// The names in directory `dir` (without `.` and `..`).
fn list(dir: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    let mut d = nix::dir::Dir::openat(
        Some(dir.as_raw_fd()),
        ".",
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    let mut names = Vec::new();
    for ent in d.iter() {
        let ent = ent.map_err(errno)?;
        let name = ent.file_name();
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    use std::path::{Path, PathBuf};
    use tar::{EntryType, Header};

    const MTIME: u64 = 1_000_000;

    /// A canary entry: path, owner, mode, link count, size, content.
    type CanaryEntry = (Vec<u8>, u32, u32, u64, u64, Vec<u8>);

    /// A fresh image root next to a canary directory that no layer may touch; both removed on drop.
    struct Fixture {
        base: PathBuf,
        root: PathBuf,
        canary: PathBuf,
        canary_before: Vec<CanaryEntry>,
    }

    impl Fixture {
        fn new(tag: &str) -> Fixture {
            let base = std::env::temp_dir().join(format!("sandlot-unpack-{tag}-{}", std::process::id()));
            let _ = tree::remove_tree(&base);
            let root = base.join("root");
            let canary = base.join("canary");
            std::fs::create_dir_all(&root).unwrap();
            std::fs::create_dir_all(canary.join("sub")).unwrap();
            std::fs::write(canary.join("keep"), "canary").unwrap();
            std::fs::write(canary.join("sub").join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
            let mut f = Fixture { base, root, canary, canary_before: Vec::new() };
            f.canary_before = f.canary_state();
            f
        }

        /// Every entry of the canary with owner, mode, link count, size and content.
        fn canary_state(&self) -> Vec<CanaryEntry> {
            let mut out = Vec::new();
            let mut todo = vec![self.canary.clone()];
            while let Some(p) = todo.pop() {
                let m = std::fs::symlink_metadata(&p).unwrap();
                let body = if m.is_file() { std::fs::read(&p).unwrap() } else { Vec::new() };
                out.push((p.as_os_str().as_bytes().to_vec(), m.uid(), m.mode(), m.nlink(), m.size(), body));
                if m.is_dir() {
                    for e in std::fs::read_dir(&p).unwrap() {
                        todo.push(e.unwrap().path());
                    }
                }
            }
            out.sort();
            out
        }

        fn assert_canary(&self) {
            assert_eq!(self.canary_state(), self.canary_before, "the canary outside the root changed");
            assert_eq!(
                std::fs::read_dir(&self.base).unwrap().count(),
                2,
                "nothing may appear next to the root: {:?}",
                std::fs::read_dir(&self.base).unwrap().map(|e| e.unwrap().path()).collect::<Vec<_>>()
            );
        }

        fn apply(&self, tar: &[u8]) -> Result<Unpacked, UnpackError> {
            self.apply_with(tar, &UnpackLimits::default())
        }

        fn apply_with(&self, tar: &[u8], limits: &UnpackLimits) -> Result<Unpacked, UnpackError> {
            let fd = tree::open_root(&self.root).unwrap();
            apply_layer(fd.as_fd(), tar, limits)
        }

        fn at(&self, rel: impl AsRef<Path>) -> PathBuf {
            self.root.join(rel)
        }

        fn lstat(&self, rel: impl AsRef<Path>) -> std::fs::Metadata {
            std::fs::symlink_metadata(self.at(rel)).unwrap()
        }

        fn exists(&self, rel: impl AsRef<Path>) -> bool {
            std::fs::symlink_metadata(self.at(rel)).is_ok()
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = tree::remove_tree(&self.base);
        }
    }

    /// A header with `name` written as raw bytes (the tar crate's setters refuse `..` and absolute
    /// paths, which is exactly what these tests need to send).
    fn header(name: &[u8], kind: EntryType, size: u64, mode: u32) -> Header {
        let mut h = Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(MTIME);
        h
    }

    /// PAX records, each "LEN KEY=VALUE\n" where LEN counts itself.
    fn pax(records: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in records {
            let body = k.len() + v.len() + 3;
            let mut len = body + body.to_string().len();
            if len.to_string().len() != body.to_string().len() {
                len += 1;
            }
            out.extend_from_slice(format!("{len} {k}=").as_bytes());
            out.extend_from_slice(v);
            out.push(b'\n');
        }
        out
    }

    #[derive(Default)]
    struct Layer(Vec<u8>);

    impl Layer {
        fn raw(mut self, mut h: Header, data: &[u8]) -> Self {
            h.set_cksum();
            self.0.extend_from_slice(h.as_bytes());
            self.0.extend_from_slice(data);
            self.0.resize(self.0.len().div_ceil(512) * 512, 0);
            self
        }
        fn file(self, name: &[u8], body: &[u8]) -> Self {
            self.raw(header(name, EntryType::Regular, body.len() as u64, 0o644), body)
        }
        fn file_mode(self, name: &[u8], mode: u32, uid: u64) -> Self {
            let mut h = header(name, EntryType::Regular, 1, mode);
            h.set_uid(uid);
            h.set_gid(uid);
            self.raw(h, b"x")
        }
        fn dir(self, name: &[u8]) -> Self {
            self.raw(header(name, EntryType::Directory, 0, 0o755), b"")
        }
        fn link(self, name: &[u8], kind: EntryType, target: &[u8]) -> Self {
            let mut h = header(name, kind, 0, 0o777);
            h.as_old_mut().linkname[..target.len()].copy_from_slice(target);
            self.raw(h, b"")
        }
        fn symlink(self, name: &[u8], target: &[u8]) -> Self {
            self.link(name, EntryType::Symlink, target)
        }
        fn pax(self, records: &[(&str, &[u8])]) -> Self {
            let data = pax(records);
            self.raw(header(b"PaxHeader", EntryType::XHeader, data.len() as u64, 0o644), &data)
        }
        fn done(mut self) -> Vec<u8> {
            self.0.extend_from_slice(&[0; 1024]);
            self.0
        }
    }

    fn refused(r: Result<Unpacked, UnpackError>) -> UnpackError {
        match r {
            Ok(u) => panic!("the layer was applied: {u:?}"),
            Err(e) => e,
        }
    }

    fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
        let p = CString::new(path.as_os_str().as_bytes()).unwrap();
        let n = CString::new(name).unwrap();
        let mut buf = vec![0u8; 1024];
        // SAFETY: both strings are NUL-terminated and `buf` is writable for its length.
        let len = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if len < 0 {
            return None;
        }
        buf.truncate(len as usize);
        Some(buf)
    }

    #[test]
    fn dot_dot_paths_are_refused_by_name() {
        let f = Fixture::new("dotdot");
        for name in [&b"../x"[..], b"a/../../x", b"./../canary/keep"] {
            let err = refused(f.apply(&Layer::default().file(name, b"owned").done()));
            assert_eq!(err.entry.as_deref(), Some(escape(name).as_str()));
            assert!(err.to_string().contains("path leaves the image root"), "{err}");
            f.assert_canary();
        }
        // A hard link to `../x` is refused the same way.
        let err = refused(f.apply(&Layer::default().link(b"l", EntryType::Link, b"../canary/keep").done()));
        assert!(err.to_string().contains("leaves the image root"), "{err}");
        f.assert_canary();
    }

    #[test]
    fn absolute_paths_land_inside_the_root() {
        let f = Fixture::new("abs");
        let canary_keep = f.canary.join("keep");
        let layer = Layer::default().file(b"/etc/motd", b"hi").file(canary_keep.as_os_str().as_bytes(), b"owned");
        let u = f.apply(&layer.done()).unwrap();
        assert_eq!(u.entries, 2);
        assert_eq!(std::fs::read(f.at("etc/motd")).unwrap(), b"hi");
        let inside = f.root.join(canary_keep.strip_prefix("/").unwrap());
        assert_eq!(std::fs::read(inside).unwrap(), b"owned");
        f.assert_canary();
    }

    #[test]
    fn a_file_through_a_symlink_to_outside_never_leaves_the_root() {
        let f = Fixture::new("symlink");
        // Absolute target: resolved as if the root were `/`, where it does not exist.
        let canary = f.canary.as_os_str().as_bytes();
        let err = refused(f.apply(&Layer::default().symlink(b"evil", canary).file(b"evil/owned", b"x").done()));
        assert_eq!(err.entry.as_deref(), Some("evil/owned"));
        assert!(err.to_string().contains("symlink whose target does not exist"), "{err}");
        assert_eq!(std::fs::read_link(f.at("evil")).unwrap().as_os_str().as_bytes(), canary);
        f.assert_canary();
        // Relative target climbing out: `..` stops at the root, so the file lands in the root.
        let u = f.apply(&Layer::default().symlink(b"up", b"../../..").file(b"up/owned", b"x").done()).unwrap();
        assert_eq!(u.entries, 2);
        assert_eq!(std::fs::read(f.at("owned")).unwrap(), b"x");
        f.assert_canary();
        // The last component is never followed: a file entry over a symlink replaces the link.
        std::os::unix::fs::symlink(f.canary.join("keep"), f.at("over")).unwrap();
        f.apply(&Layer::default().file(b"over", b"new").done()).unwrap();
        assert!(f.lstat("over").is_file());
        f.assert_canary();
    }

    #[test]
    fn hard_links_resolve_both_ends_inside_the_root() {
        let f = Fixture::new("hardlink");
        let passwd = f.canary.join("sub/passwd");
        let err =
            refused(f.apply(&Layer::default().link(b"pw", EntryType::Link, passwd.as_os_str().as_bytes()).done()));
        assert_eq!(err.entry.as_deref(), Some("pw"));
        assert!(err.to_string().contains("does not exist in the image"), "{err}");
        assert!(!f.exists("pw"));
        f.assert_canary();
        // Through a symlinked parent pointing outside: still resolved inside the root.
        let layer = Layer::default().symlink(b"out", f.canary.as_os_str().as_bytes()).link(
            b"pw2",
            EntryType::Link,
            b"out/keep",
        );
        let err = refused(f.apply(&layer.done()));
        assert!(err.to_string().contains("does not exist in the image"), "{err}");
        f.assert_canary();
        // A link to a symlink links the symlink itself (linkat without AT_SYMLINK_FOLLOW).
        let layer = Layer::default().file(b"real", b"data").link(b"again", EntryType::Link, b"/real").link(
            b"linklink",
            EntryType::Link,
            b"out",
        );
        f.apply(&layer.done()).unwrap();
        assert_eq!(f.lstat("again").ino(), f.lstat("real").ino());
        assert!(f.lstat("linklink").file_type().is_symlink());
        assert_eq!(f.lstat("linklink").ino(), f.lstat("out").ino());
        // A directory target is refused.
        let err = refused(f.apply(&Layer::default().dir(b"d/").link(b"dl", EntryType::Link, b"d").done()));
        assert!(err.to_string().contains("is a directory"), "{err}");
        f.assert_canary();
    }

    #[test]
    fn device_nodes_are_dropped_and_reported_and_fifos_created() {
        let f = Fixture::new("dev");
        let mut null = header(b"dev/null", EntryType::Char, 0, 0o666);
        null.set_device_major(1).unwrap();
        null.set_device_minor(3).unwrap();
        let mut sda = header(b"dev/sda", EntryType::Block, 0, 0o660);
        sda.set_device_major(8).unwrap();
        sda.set_device_minor(0).unwrap();
        let mut fifo = header(b"run/pipe", EntryType::Fifo, 0, 0o620);
        fifo.set_uid(5);
        fifo.set_gid(6);
        let u = f.apply(&Layer::default().raw(null, b"").raw(sda, b"").raw(fifo, b"").done()).unwrap();
        assert_eq!(u.entries, 1);
        assert_eq!(u.dropped_count, 2);
        assert_eq!(
            u.dropped,
            vec![
                "dev/null: device node dropped (sandboxes get /dev from sandlot)".to_string(),
                "dev/sda: device node dropped (sandboxes get /dev from sandlot)".to_string(),
            ]
        );
        assert!(!f.exists("dev"));
        let m = f.lstat("run/pipe");
        assert!(m.file_type().is_fifo());
        assert_eq!(m.mode() & 0o7777, 0o620);
        assert_eq!((m.uid(), m.gid()), (IMAGE_IDS_BASE + 5, IMAGE_IDS_BASE + 6));
        f.assert_canary();
    }

    #[test]
    fn setuid_files_keep_their_mode_and_are_owned_by_unprivileged_image_ids() {
        let f = Fixture::new("setuid");
        let layer =
            Layer::default().file_mode(b"usr/bin/su", 0o4755, 0).file_mode(b"usr/bin/wall", 0o2755, 1000).dir(b"tmp/");
        let mut tmp = header(b"tmp2/", EntryType::Directory, 0, 0o1777);
        tmp.set_uid(0);
        let u = f.apply(&layer.raw(tmp, b"").done()).unwrap();
        assert_eq!(u.entries, 4);
        let su = f.lstat("usr/bin/su");
        assert_eq!(su.mode() & 0o7777, 0o4755);
        assert_eq!((su.uid(), su.gid()), (IMAGE_IDS_BASE, IMAGE_IDS_BASE));
        let wall = f.lstat("usr/bin/wall");
        assert_eq!(wall.mode() & 0o7777, 0o2755);
        assert_eq!((wall.uid(), wall.gid()), (IMAGE_IDS_BASE + 1000, IMAGE_IDS_BASE + 1000));
        assert_eq!(f.lstat("tmp2").mode() & 0o7777, 0o1777);
        // Parents the layer did not list: 0755, image root.
        let usr = f.lstat("usr");
        assert_eq!((usr.mode() & 0o7777, usr.uid()), (0o755, IMAGE_IDS_BASE));
        assert_eq!(su.mtime(), MTIME as i64);
    }

    #[test]
    fn an_owner_outside_the_image_range_is_refused() {
        let f = Fixture::new("uid");
        let err = refused(f.apply(&Layer::default().file_mode(b"f", 0o644, 70000).done()));
        assert_eq!(err.entry.as_deref(), Some("f"));
        assert!(err.to_string().contains("owner uid 70000 is outside"), "{err}");
        assert!(!f.exists("f"));
        // A PAX uid (which overrides the header's) is checked the same way.
        let layer = Layer::default().pax(&[("uid", b"4294967295")]).file(b"g", b"x");
        let err = refused(f.apply(&layer.done()));
        assert!(err.to_string().contains("owner uid 4294967295"), "{err}");
    }

    #[test]
    fn a_huge_declared_size_is_refused_before_anything_is_written() {
        let f = Fixture::new("huge");
        // A plain header claiming 2^40 bytes, followed by none of them.
        let mut h = header(b"big", EntryType::Regular, 0, 0o644);
        h.set_size(1 << 40);
        let err = refused(f.apply(&Layer::default().raw(h, b"").done()));
        assert_eq!(err.entry.as_deref(), Some("big"));
        assert!(err.to_string().contains("over 68719476736 bytes (max_bytes)"), "{err}");
        assert!(!f.exists("big"));
        // A GNU sparse file of 2^40 bytes that stores one 512-byte block.
        let mut h = header(b"sparse", EntryType::GNUSparse, 512, 0o644);
        let gnu = h.as_gnu_mut().unwrap();
        gnu.sparse[0].set_offset(0);
        gnu.sparse[0].set_length(512);
        gnu.sparse[1].set_offset(1 << 40);
        gnu.sparse[1].set_length(0);
        gnu.set_real_size(1 << 40);
        let err = refused(f.apply(&Layer::default().raw(h, &[7u8; 512]).done()));
        assert_eq!(err.entry.as_deref(), Some("sparse"));
        assert!(err.to_string().contains("1099511627776 more bytes (data"), "{err}");
        assert!(!f.exists("sparse"));
        // The cap counts the layer's total: three 400-byte files (and their entries' cost) against
        // 1000 bytes more than three entries cost.
        let limits = UnpackLimits { max_bytes: 3 * (ENTRY_COST + 1) + 1000, ..UnpackLimits::default() };
        let layer = Layer::default().file(b"a", &[1; 400]).file(b"b", &[1; 400]).file(b"c", &[1; 400]);
        let err = refused(f.apply_with(&layer.done(), &limits));
        assert_eq!(err.entry.as_deref(), Some("c"));
        assert!(!f.exists("c"));
        f.assert_canary();
    }

    #[test]
    fn a_small_sparse_file_keeps_its_size_and_holes() {
        let f = Fixture::new("sparse");
        let mut h = header(b"s", EntryType::GNUSparse, 512, 0o644);
        let gnu = h.as_gnu_mut().unwrap();
        gnu.sparse[0].set_offset(1 << 20);
        gnu.sparse[0].set_length(512);
        gnu.set_real_size((1 << 20) + 512);
        let u = f.apply(&Layer::default().raw(h, &[7u8; 512]).done()).unwrap();
        assert_eq!(u.bytes, (1 << 20) + 512);
        let m = f.lstat("s");
        assert_eq!(m.size(), (1 << 20) + 512);
        assert!(m.blocks() * 512 < 1 << 20, "the hole was written as zeros: {} blocks", m.blocks());
        let body = std::fs::read(f.at("s")).unwrap();
        assert!(body[..1 << 20].iter().all(|b| *b == 0) && body[1 << 20..].iter().all(|b| *b == 7));
    }

    #[test]
    fn the_entry_count_and_depth_are_capped() {
        let f = Fixture::new("caps");
        let limits = UnpackLimits { max_entries: 5, ..UnpackLimits::default() };
        let mut layer = Layer::default();
        for i in 0..10 {
            layer = layer.file(format!("f{i}").as_bytes(), b"x");
        }
        let err = refused(f.apply_with(&layer.done(), &limits));
        assert_eq!(err.entry, None);
        assert!(err.to_string().contains("more than 5 entries (max_entries)"), "{err}");
        assert!(f.exists("f4") && !f.exists("f5"));
        // Paths count too: one entry 5 levels deep writes 5 paths.
        let limits = UnpackLimits { max_entries: 3, ..UnpackLimits::default() };
        let err = refused(f.apply_with(&Layer::default().file(b"p/q/r/s/t", b"x").done(), &limits));
        assert!(err.to_string().contains("writes more than 3 paths"), "{err}");

        let limits = UnpackLimits { max_depth: 4, ..UnpackLimits::default() };
        let err = refused(f.apply_with(&Layer::default().file(b"a/b/c/d/e", b"x").done(), &limits));
        assert_eq!(err.entry.as_deref(), Some("a/b/c/d/e"));
        assert!(err.to_string().contains("5 components deep, over the limit of 4"), "{err}");
        assert!(!f.exists("a"));
        let limits = UnpackLimits { max_path_bytes: 10, ..UnpackLimits::default() };
        let err = refused(f.apply_with(&Layer::default().file(b"0123456789a", b"x").done(), &limits));
        assert!(err.to_string().contains("11 bytes, over the 10-byte limit"), "{err}");
    }

    #[test]
    fn names_with_newlines_and_invalid_utf8_are_created_and_escaped_in_errors() {
        let f = Fixture::new("names");
        let u = f.apply(&Layer::default().file(b"new\nline", b"1").file(b"bad\xff\xfe", b"2").done()).unwrap();
        assert_eq!(u.entries, 2);
        assert_eq!(std::fs::read(f.root.join(std::ffi::OsStr::from_bytes(b"new\nline"))).unwrap(), b"1");
        assert_eq!(std::fs::read(f.root.join(std::ffi::OsStr::from_bytes(b"bad\xff\xfe"))).unwrap(), b"2");
        let err = refused(f.apply(&Layer::default().file(b"x\n\x1b[31m\xff\"/../y", b"x").done()));
        assert_eq!(err.entry.as_deref(), Some("x\\x0a\\x1b[31m\\xff\\\"/../y"));
        let text = err.to_string();
        assert!(!text.contains('\n') && !text.contains('\x1b'), "{text:?}");
        // Dropped entries are escaped too.
        let mut dev = header(b"dev/\nnull", EntryType::Char, 0, 0o666);
        dev.set_device_major(1).unwrap();
        let u = f.apply(&Layer::default().raw(dev, b"").done()).unwrap();
        assert!(u.dropped[0].starts_with("dev/\\x0anull: "), "{:?}", u.dropped);
    }

    #[test]
    fn file_capabilities_are_dropped_and_user_xattrs_kept() {
        let f = Fixture::new("xattr");
        let cap = [1u8, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let layer = Layer::default()
            .pax(&[
                ("SCHILY.xattr.security.capability", &cap),
                ("SCHILY.xattr.user.x", b"kept"),
                ("SCHILY.xattr.trusted.overlay.opaque", b"y"),
                ("SCHILY.xattr.security.selinux", b"system_u:object_r:bin_t"),
            ])
            .file(b"ping", b"\x7fELF");
        let u = f.apply(&layer.done()).unwrap();
        let ping = f.at("ping");
        assert_eq!(xattr(&ping, "user.x").as_deref(), Some(&b"kept"[..]));
        assert_eq!(xattr(&ping, "security.capability"), None);
        assert_eq!(xattr(&ping, "trusted.overlay.opaque"), None);
        assert_eq!(u.dropped_count, 3);
        assert!(u.dropped[0].starts_with("ping: xattr security.capability dropped"), "{:?}", u.dropped);
        // Over the per-entry cap: dropped, recorded.
        let limits = UnpackLimits { max_xattr_bytes: 16, ..UnpackLimits::default() };
        let layer = Layer::default().pax(&[("SCHILY.xattr.user.big", &[b'v'; 64])]).file(b"big", b"x");
        let u = f.apply_with(&layer.done(), &limits).unwrap();
        assert_eq!(xattr(&f.at("big"), "user.big"), None);
        assert!(u.dropped[0].contains("over 16 bytes (max_xattr_bytes)"), "{:?}", u.dropped);
    }

    #[test]
    fn oversized_headers_are_a_stream_error_not_an_allocation() {
        let f = Fixture::new("pax");
        let limits = UnpackLimits { max_path_bytes: 100, max_xattr_bytes: 100, ..UnpackLimits::default() };
        let big = vec![b'a'; 2 << 20];
        let layer = Layer::default().pax(&[("comment", &big)]).file(b"f", b"x");
        let err = refused(f.apply_with(&layer.done(), &limits));
        assert_eq!(err.entry, None);
        assert!(err.to_string().contains("headers (PAX records, long names, sparse map) are over"), "{err}");
    }

    #[test]
    fn decompress_detects_gzip_zstd_and_plain_tar_by_their_bytes() {
        let f = Fixture::new("decompress");
        let tar = Layer::default().file(b"hello", b"world").done();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&tar).unwrap();
        let gz = gz.finish().unwrap();
        let zst = ruzstd::encoding::compress_to_vec(&tar[..], ruzstd::encoding::CompressionLevel::Fastest);
        // Two frames with a skippable frame between them decode as one stream.
        let (a, b) = tar.split_at(700);
        let mut multi = ruzstd::encoding::compress_to_vec(a, ruzstd::encoding::CompressionLevel::Fastest);
        multi.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 9, 9, 9]);
        multi.extend(ruzstd::encoding::compress_to_vec(b, ruzstd::encoding::CompressionLevel::Fastest));
        for (what, bytes) in [("plain", &tar), ("gzip", &gz), ("zstd", &zst), ("zstd frames", &multi)] {
            let mut out = Vec::new();
            decompress(&bytes[..]).unwrap().read_to_end(&mut out).unwrap();
            assert_eq!(out, tar, "{what}");
            std::fs::remove_file(f.at("hello")).ok();
            let fd = tree::open_root(&f.root).unwrap();
            apply_layer(fd.as_fd(), decompress(&bytes[..]).unwrap(), &UnpackLimits::default()).unwrap();
            assert_eq!(std::fs::read(f.at("hello")).unwrap(), b"world", "{what}");
        }
        // Corrupt compressed data is a stream error.
        let mut bad = gz.clone();
        let mid = bad.len() / 2;
        bad[mid..].iter_mut().for_each(|b| *b ^= 0x55);
        let fd = tree::open_root(&f.root).unwrap();
        let err = apply_layer(fd.as_fd(), decompress(&bad[..]).unwrap(), &UnpackLimits::default()).unwrap_err();
        assert_eq!(err.entry, None, "{err}");
        // A zstd frame asking for a 2 TiB window is refused before it is decoded.
        let mut huge = ZSTD_MAGIC.to_vec();
        huge.extend_from_slice(&[0x00, 31 << 3, 0, 0, 0, 0]);
        let err = decompress(&huge[..]).unwrap().read_to_end(&mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("2199023255552-byte window, over the 134217728-byte limit"), "{err}");
    }

    #[test]
    fn whiteouts_remove_lower_files_and_trees_without_following_links() {
        let f = Fixture::new("whiteout");
        std::fs::create_dir_all(f.at("etc")).unwrap();
        std::fs::write(f.at("etc/old"), "lower").unwrap();
        std::fs::write(f.at("etc/kept"), "lower").unwrap();
        std::fs::create_dir_all(f.at("var/cache/deep/er")).unwrap();
        std::fs::write(f.at("var/cache/deep/er/x"), "lower").unwrap();
        std::os::unix::fs::symlink(&f.canary, f.at("var/cache/out")).unwrap();
        std::os::unix::fs::symlink(&f.canary, f.at("link")).unwrap();
        let layer = Layer::default()
            .file(b"etc/.wh.old", b"")
            .file(b"var/.wh.cache", b"")
            .file(b".wh.link", b"")
            .file(b"nothere/.wh.nothing", b"")
            .file(b"etc/.wh.missing", b"")
            .file(b"etc/new", b"this layer")
            .file(b"etc/.wh.new", b"");
        let u = f.apply(&layer.done()).unwrap();
        assert_eq!(u.entries, 7);
        assert!(!f.exists("etc/old") && f.exists("etc/kept"));
        assert!(!f.exists("var/cache") && f.exists("var"));
        assert!(!f.exists("link") && !f.exists("nothere"));
        // A whiteout hides lower layers only, not an entry of its own layer.
        assert_eq!(std::fs::read(f.at("etc/new")).unwrap(), b"this layer");
        assert!(!f.exists("etc/.wh.old"));
        f.assert_canary();
    }

    #[test]
    fn an_opaque_directory_keeps_only_this_layers_entries_before_and_after_the_marker() {
        let f = Fixture::new("opaque");
        std::fs::create_dir_all(f.at("d/sub")).unwrap();
        std::fs::write(f.at("d/old"), "lower").unwrap();
        std::fs::write(f.at("d/sub/old"), "lower").unwrap();
        std::fs::create_dir_all(f.at("d/merged")).unwrap();
        std::fs::write(f.at("d/merged/old"), "lower").unwrap();
        std::os::unix::fs::symlink(&f.canary, f.at("d/out")).unwrap();
        std::fs::write(f.at("outside-d"), "lower").unwrap();
        let layer = Layer::default()
            .dir(b"d/")
            .file(b"d/before", b"1")
            .file(b"d/merged/new", b"2")
            .file(b"d/.wh..wh..opq", b"")
            .file(b"d/after", b"3")
            .file(b"gone/.wh..wh..opq", b"");
        let u = f.apply(&layer.done()).unwrap();
        assert_eq!(u.entries, 6);
        let mut names: Vec<_> = std::fs::read_dir(f.at("d")).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["after", "before", "merged"]);
        let merged: Vec<_> = std::fs::read_dir(f.at("d/merged")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(merged, ["new"]);
        assert!(f.exists("outside-d"));
        f.assert_canary();
    }

    #[test]
    fn a_directory_replaced_by_a_file_and_a_file_by_a_directory() {
        let f = Fixture::new("replace");
        std::fs::create_dir_all(f.at("x/deep")).unwrap();
        std::fs::write(f.at("x/deep/f"), "lower").unwrap();
        std::os::unix::fs::symlink(&f.canary, f.at("x/out")).unwrap();
        std::fs::write(f.at("y"), "lower").unwrap();
        std::fs::create_dir_all(f.at("kept/child")).unwrap();
        let layer = Layer::default().file(b"x", b"file now").dir(b"y/").file(b"y/z", b"in dir").dir(b"kept/");
        f.apply(&layer.done()).unwrap();
        assert!(f.lstat("x").is_file());
        assert_eq!(std::fs::read(f.at("x")).unwrap(), b"file now");
        assert!(f.lstat("y").is_dir());
        assert_eq!(std::fs::read(f.at("y/z")).unwrap(), b"in dir");
        // A directory entry over a directory keeps its contents and takes the entry's owner.
        assert!(f.exists("kept/child"));
        assert_eq!(f.lstat("kept").uid(), IMAGE_IDS_BASE);
        f.assert_canary();
    }

    #[test]
    fn merged_usr_symlinked_parents_resolve_inside_the_root() {
        let f = Fixture::new("usrmerge");
        let layer = Layer::default()
            .dir(b"usr/")
            .dir(b"usr/bin/")
            .dir(b"usr/sbin/")
            .symlink(b"bin", b"usr/bin")
            .symlink(b"sbin", b"/usr/sbin")
            .file(b"bin/sh", b"shell")
            .file(b"./sbin/init", b"init");
        f.apply(&layer.done()).unwrap();
        assert!(f.lstat("bin").file_type().is_symlink());
        assert!(f.lstat("sbin").file_type().is_symlink());
        assert_eq!(std::fs::read(f.at("usr/bin/sh")).unwrap(), b"shell");
        assert_eq!(std::fs::read(f.at("usr/sbin/init")).unwrap(), b"init");
        f.assert_canary();
    }

    #[test]
    fn directory_mtimes_and_the_root_entry_are_applied() {
        let f = Fixture::new("mtime");
        let mut rootdir = header(b"./", EntryType::Directory, 0, 0o755);
        rootdir.set_mtime(42);
        let mut d = header(b"d/", EntryType::Directory, 0, 0o750);
        d.set_mtime(4242);
        let layer = Layer::default().raw(rootdir, b"").raw(d, b"").file(b"d/child", b"x");
        f.apply(&layer.done()).unwrap();
        let root = std::fs::symlink_metadata(&f.root).unwrap();
        assert_eq!((root.uid(), root.mode() & 0o7777, root.mtime()), (IMAGE_IDS_BASE, 0o755, 42));
        let d = f.lstat("d");
        assert_eq!((d.mode() & 0o7777, d.mtime()), (0o750, 4242));
        let err = refused(f.apply(&Layer::default().file(b"./", b"x").done()));
        assert!(err.to_string().contains("only a directory can name the image root"), "{err}");
    }

    #[test]
    fn a_truncated_tar_is_a_stream_error() {
        let f = Fixture::new("truncated");
        let tar = Layer::default().file(b"a", &[1; 2000]).file(b"b", b"x").done();
        // Inside a's data.
        let err = refused(f.apply(&tar[..512 + 1000]));
        assert_eq!(err.entry, None);
        assert!(err.to_string().contains("ends inside the data of \"a\""), "{err}");
        // Inside b's header.
        let err = refused(f.apply(&tar[..512 + 2048 + 100]));
        assert_eq!(err.entry, None);
        assert!(err.to_string().contains("a malformed or truncated tar"), "{err}");
    }

    #[test]
    fn whiteouts_of_dot_and_dot_dot_are_refused() {
        let f = Fixture::new("whdots");
        std::fs::create_dir_all(f.at("sub")).unwrap();
        std::fs::write(f.at("sub/lower"), "lower").unwrap();
        for name in [&b".wh.."[..], b".wh...", b"sub/.wh..", b"sub/.wh...", b".wh."] {
            let err = refused(f.apply(&Layer::default().file(name, b"").done()));
            assert_eq!(err.entry.as_deref(), Some(escape(name).as_str()));
            assert!(err.to_string().contains("a whiteout that names no entry"), "{err}");
            assert!(f.exists("sub/lower"));
            f.assert_canary();
        }
        let fd = tree::open_root(&f.root).unwrap();
        for name in [c"..", c".", c""] {
            let err = tree::remove_beneath(fd.as_fd(), name).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{name:?}");
        }
        f.assert_canary();
    }

    #[test]
    fn a_lower_tree_deeper_than_path_max_is_whited_out_and_a_128_deep_layer_applies() {
        let f = Fixture::new("deep");
        // 3,000 levels, built one level at a time (the whole path is longer than PATH_MAX).
        let mut fd = tree::open_root(&f.root).unwrap();
        mkdirat(Some(fd.as_raw_fd()), c"low", Mode::from_bits_truncate(0o755)).unwrap();
        fd = open_here(fd.as_fd(), c"low", OFlag::O_DIRECTORY | OFlag::O_RDONLY).unwrap();
        for _ in 0..3000 {
            mkdirat(Some(fd.as_raw_fd()), c"d", Mode::from_bits_truncate(0o755)).unwrap();
            fd = open_here(fd.as_fd(), c"d", OFlag::O_DIRECTORY | OFlag::O_RDONLY).unwrap();
        }
        let canary = cstring(f.canary.as_os_str().as_bytes());
        nix::unistd::symlinkat(canary.as_c_str(), Some(fd.as_raw_fd()), c"out").unwrap();
        drop(fd);
        let deep: Vec<u8> = ["x"; 127].join("/").into_bytes();
        let mut file = deep.clone();
        file.extend_from_slice(b"/leaf");
        let mut layer = Layer::default().file(b".wh.low", b"");
        // A 128-component name does not fit a 100-byte ustar name: a PAX path carries it.
        layer = layer.pax(&[("path", &file)]).file(b"placeholder", b"deep");
        let u = f.apply(&layer.done()).unwrap();
        assert_eq!(u.entries, 2);
        assert!(!f.exists("low"));
        let leaf = f.root.join(std::ffi::OsStr::from_bytes(&file));
        assert_eq!(std::fs::read(leaf).unwrap(), b"deep");
        f.assert_canary();
    }

    #[test]
    fn a_second_opaque_marker_through_a_symlinked_alias_keeps_this_layers_entries() {
        let f = Fixture::new("opqalias");
        std::fs::create_dir_all(f.at("d")).unwrap();
        std::fs::write(f.at("d/old"), "lower").unwrap();
        let layer = Layer::default()
            .symlink(b"alias", b"d")
            .file(b"d/.wh..wh..opq", b"")
            .file(b"d/a", b"1")
            .file(b"alias/.wh..wh..opq", b"")
            .file(b"d/b", b"2");
        f.apply(&layer.done()).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(f.at("d")).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn data_of_entries_that_are_not_files_is_skipped_against_max_bytes() {
        let f = Fixture::new("otherdata");
        let global = pax(&[("comment", b"git commit id")]);
        let mut link = header(b"l", EntryType::Symlink, 600, 0o777);
        link.as_old_mut().linkname[..6].copy_from_slice(b"target");
        let layer = Layer::default()
            .raw(header(b"pax_global_header", EntryType::XGlobalHeader, global.len() as u64, 0o644), &global)
            .raw(link, &[5; 600])
            .file(b"after", b"ok");
        let u = f.apply(&layer.done()).unwrap();
        assert_eq!(u.entries, 2, "the global header is no entry");
        assert!(!f.exists("pax_global_header"));
        assert_eq!(std::fs::read_link(f.at("l")).unwrap(), Path::new("target"));
        assert_eq!(std::fs::read(f.at("after")).unwrap(), b"ok");
        // The symlink's 600 bytes of data count against max_bytes.
        let mut link = header(b"l2", EntryType::Symlink, 600, 0o777);
        link.as_old_mut().linkname[..6].copy_from_slice(b"target");
        let limits = UnpackLimits { max_bytes: ENTRY_COST + 500, ..UnpackLimits::default() };
        let err = refused(f.apply_with(&Layer::default().raw(link, &[5; 600]).done(), &limits));
        assert!(err.to_string().contains("600 more bytes (data, or the entry's cost on the volume)"), "{err}");
    }

    #[test]
    fn every_entry_is_charged_its_cost_on_the_volume_as_it_is_read() {
        let f = Fixture::new("entrycost");
        // Empty files, directories and links hold no data, yet each costs the volume metadata.
        let mut layer = Layer::default();
        for i in 0..100 {
            layer = layer.file(format!("e{i:03}").as_bytes(), b"");
        }
        let u = f.apply(&layer.done()).unwrap();
        assert_eq!(u.bytes, 0);
        assert_eq!(u.charged, 100 * (ENTRY_COST + 4));
        // So a budget of 50 entries' cost stops a layer of 100 empty files part way, at the entry
        // that passes it, with nothing of that entry written.
        let f = Fixture::new("entrycost2");
        let mut layer = Layer::default();
        for i in 0..100 {
            layer = layer.file(format!("e{i:03}").as_bytes(), b"");
        }
        let limits = UnpackLimits { max_bytes: 50 * (ENTRY_COST + 4), ..UnpackLimits::default() };
        let err = refused(f.apply_with(&layer.done(), &limits));
        assert_eq!(err.entry.as_deref(), Some("e050"));
        assert!(err.to_string().contains("(max_bytes)"), "{err}");
        assert!(f.exists("e049") && !f.exists("e050"));
        // Kept xattrs are charged too.
        let f = Fixture::new("xattrcost");
        let layer = Layer::default().pax(&[("SCHILY.xattr.user.big", &[b'x'; 4000])]).file(b"x", b"");
        let u = f.apply(&layer.done()).unwrap();
        assert!(u.charged >= ENTRY_COST + 4000, "{}", u.charged);
    }

    #[test]
    fn a_layer_still_unpacking_at_its_deadline_is_refused() {
        let f = Fixture::new("deadline");
        let limits = UnpackLimits { deadline: Some(std::time::Instant::now()), ..UnpackLimits::default() };
        let err = refused(f.apply_with(&Layer::default().file(b"a", b"x").done(), &limits));
        assert!(err.to_string().contains("still unpacking at its deadline"), "{err}");
        assert!(!f.exists("a"));
    }
}
