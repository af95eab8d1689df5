//! Directory watches: inotify, on a thread of pid 1 per watch, as the requesting user.
//!
//! The thread takes the user's fsuid and capabilities first (as a file operation does), so a watch
//! reaches only directories the user may read; paths resolve in the sandbox's own root, and no
//! watch follows a symlink (`IN_DONT_FOLLOW`, and a walk that descends only into real directories).
//! The inotify descriptor stays in pid 1; the daemon sees events only.
//!
//! Bounded: at most [`MAX_WATCH_STREAMS`] watches at once and [`MAX_INOTIFY_WATCHES`] inotify
//! watches (one per directory) for the whole sandbox. Nothing is queued here: a thread blocked on a
//! slow control socket, or out of credit, leaves the events in the kernel's inotify queue, whose
//! overflow (`IN_Q_OVERFLOW`) is reported as an `overflow` event, as is a new subdirectory that could
//! not be watched for lack of room.
//!
//! Credit: a watch sends at most [`WATCH_CREDIT`] events the daemon has not given back
//! ([`sandlot_protocol::Request::WatchCredit`], as its client takes them). Without it, a watch nobody
//! reads would have the daemon decode, and drop, every change the sandbox makes: CPU outside any
//! cgroup, spent for the sandbox. Reads are sized so one read holds no more events than the credit
//! left (plus one name's worth).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sandlot_protocol::{Event, FileErrorKind, WatchKind, WATCH_CREDIT};

use crate::files::{become_user, checked_path, cstring, OpError};
use crate::{lock, spawn_thread, Outbox, Permit};

/// Watches running at once in one sandbox (each is a thread of pid 1).
pub(crate) const MAX_WATCH_STREAMS: usize = 8;
/// Directories watched at once in one sandbox, over all its watches (each costs kernel memory,
/// charged to the sandbox's user namespace, whose own inotify limits also apply).
pub(crate) const MAX_INOTIFY_WATCHES: usize = 10_000;

/// What an inotify watch reports. Writes are `IN_CLOSE_WRITE` (a finished write, not each
/// `write(2)`): a watcher wants to know when a file is ready, and a busy log would otherwise flood.
const MASK: u32 = libc::IN_CREATE
    | libc::IN_CLOSE_WRITE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW
    | libc::IN_EXCL_UNLINK;

/// A running watch's stop flag and its credit (events it may still send).
type WatchFlags = (Arc<AtomicBool>, Arc<AtomicU64>);

/// The sandbox's watches, keyed by the daemon's watch id.
#[derive(Clone, Default)]
pub(crate) struct Watches {
    /// Each watch's stop flag and the events it may still send.
    stops: Arc<Mutex<HashMap<u64, WatchFlags>>>,
    streams: Arc<AtomicUsize>,
    /// Inotify watches held by all watches.
    dirs: Arc<AtomicUsize>,
}

impl Watches {
    /// Starts watch `id` of `path` as `uid`; answered by `Watching` or `WatchFailed`.
    pub(crate) fn start(&self, out: &Outbox, id: u64, uid: u32, path: String, recursive: bool) {
        let fail = |kind, message: String| out.send(&Event::WatchFailed { id, kind, message }, &[]);
        let Some(permit) = Permit::take(&self.streams, MAX_WATCH_STREAMS) else {
            fail(
                FileErrorKind::Busy,
                format!("the sandbox already runs {MAX_WATCH_STREAMS} watches (the limit per sandbox); stop one first"),
            );
            return;
        };
        let stop = Arc::new(AtomicBool::new(false));
        let credit = Arc::new(AtomicU64::new(u64::from(WATCH_CREDIT)));
        {
            let mut stops = lock(&self.stops);
            if stops.contains_key(&id) {
                drop(stops);
                fail(FileErrorKind::Invalid, format!("watch id {id} is in use"));
                return;
            }
            stops.insert(id, (Arc::clone(&stop), Arc::clone(&credit)));
        }
        let (watches, out2) = (self.clone(), out.clone());
        let started = spawn_thread("watch", move || {
            let _permit = permit;
            let setup = become_user(uid).and_then(|()| {
                Watcher::new(id, &out2, Arc::clone(&watches.dirs), &checked_path(&path)?, recursive, stop, credit)
            });
            match setup {
                Ok(mut w) => {
                    out2.send(&Event::Watching { id }, &[]);
                    w.run();
                    drop(w);
                    out2.send(&Event::WatchEnded { id }, &[]);
                }
                Err(e) => out2.send(&Event::WatchFailed { id, kind: e.kind, message: e.message }, &[]),
            }
            lock(&watches.stops).remove(&id);
        });
        if let Err(e) = started {
            lock(&self.stops).remove(&id);
            fail(FileErrorKind::Busy, e.to_string());
        }
    }

    /// Stops watch `id` (its thread sees the flag within its poll interval).
    pub(crate) fn stop(&self, id: u64) {
        if let Some((stop, _)) = lock(&self.stops).get(&id) {
            stop.store(true, Ordering::SeqCst);
        }
    }

    /// Lets watch `id` send `events` more (never more than [`WATCH_CREDIT`] outstanding, whatever
    /// the daemon says).
    pub(crate) fn credit(&self, id: u64, events: u32) {
        if let Some((_, credit)) = lock(&self.stops).get(&id) {
            let _ = credit.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                Some(c.saturating_add(u64::from(events)).min(u64::from(WATCH_CREDIT)))
            });
        }
    }
}

/// One watch: its inotify descriptor and the directory of each inotify watch.
struct Watcher {
    id: u64,
    out: Outbox,
    fd: OwnedFd,
    recursive: bool,
    root: PathBuf,
    root_wd: i32,
    dirs: HashMap<i32, PathBuf>,
    /// The sandbox-wide count of inotify watches, this watcher's `dirs.len()` included.
    budget: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    /// Events it may still send before the daemon gives credit back.
    credit: Arc<AtomicU64>,
    /// A directory's `moved_from` that ended a read: its `moved_to` (same cookie) may open the next
    /// one, since a reader can come between the two halves of a rename. Settled by the next read,
    /// or as a move out of the tree once the queue has stayed empty for a poll interval.
    moved_from_last: Option<(u32, PathBuf)>,
}

/// A raw inotify event.
struct Raw {
    wd: i32,
    mask: u32,
    cookie: u32,
    name: Vec<u8>,
}

/// Splits a buffer of inotify events.
fn parse(mut buf: &[u8]) -> Vec<Raw> {
    let mut events = Vec::new();
    const HEAD: usize = 16;
    while buf.len() >= HEAD {
        let word = |i: usize| u32::from_ne_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
        let (wd, mask, cookie, len) = (word(0) as i32, word(4), word(8), word(12) as usize);
        let Some(name) = buf.get(HEAD..HEAD + len) else { break };
        let name = name.split(|b| *b == 0).next().unwrap_or_default().to_vec();
        events.push(Raw { wd, mask, cookie, name });
        buf = &buf[HEAD + len..];
    }
    events
}

/// The kind a change is reported as; `None` for what is not reported (a watched directory's own
/// deletion, reported by its parent, and `IN_IGNORED`).
fn kind_of(mask: u32) -> Option<WatchKind> {
    Some(if mask & libc::IN_Q_OVERFLOW != 0 {
        WatchKind::Overflow
    } else if mask & libc::IN_CREATE != 0 {
        WatchKind::Create
    } else if mask & libc::IN_CLOSE_WRITE != 0 {
        WatchKind::Write
    } else if mask & libc::IN_DELETE != 0 {
        WatchKind::Remove
    } else if mask & libc::IN_MOVED_FROM != 0 {
        WatchKind::RenameFrom
    } else if mask & libc::IN_MOVED_TO != 0 {
        WatchKind::RenameTo
    } else if mask & libc::IN_ATTRIB != 0 {
        WatchKind::Chmod
    } else {
        return None;
    })
}

impl Watcher {
    fn new(
        id: u64,
        out: &Outbox,
        budget: Arc<AtomicUsize>,
        path: &Path,
        recursive: bool,
        stop: Arc<AtomicBool>,
        credit: Arc<AtomicU64>,
    ) -> Result<Self, OpError> {
        let meta = std::fs::symlink_metadata(path).map_err(|e| OpError::io(path, e))?;
        if !meta.is_dir() {
            return Err(OpError::new(
                FileErrorKind::Invalid,
                format!(
                    "{}: not a directory; a watch is on a directory (watch its parent for one file)",
                    path.display()
                ),
            ));
        }
        // SAFETY: plain syscall; the result is checked before it is owned.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(OpError::new(
                FileErrorKind::Busy,
                format!("cannot create an inotify instance: {}", io::Error::last_os_error()),
            ));
        }
        let mut w = Watcher {
            id,
            out: out.clone(),
            // SAFETY: just created, owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            recursive,
            root: path.to_path_buf(),
            root_wd: -1,
            dirs: HashMap::new(),
            budget,
            stop,
            credit,
            moved_from_last: None,
        };
        w.root_wd = w.add(path)?;
        if recursive && !w.add_below(path, false) {
            return Err(OpError::new(
                FileErrorKind::TooLarge,
                format!(
                    "{} holds more directories than the {MAX_INOTIFY_WATCHES} the sandbox may watch at once; \
                     watch a smaller tree, or without recursive",
                    path.display()
                ),
            ));
        }
        Ok(w)
    }

    /// Adds an inotify watch on directory `dir`; its watch descriptor.
    fn add(&mut self, dir: &Path) -> Result<i32, OpError> {
        if self.budget.fetch_add(1, Ordering::SeqCst) >= MAX_INOTIFY_WATCHES {
            self.budget.fetch_sub(1, Ordering::SeqCst);
            return Err(OpError::new(
                FileErrorKind::TooLarge,
                format!("the sandbox watches {MAX_INOTIFY_WATCHES} directories (its limit)"),
            ));
        }
        let c = cstring(dir)?;
        // SAFETY: a valid fd and NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), MASK) };
        if wd < 0 {
            self.budget.fetch_sub(1, Ordering::SeqCst);
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENOSPC) => OpError::new(
                    FileErrorKind::TooLarge,
                    format!("{}: the kernel's inotify watch limit for the sandbox is reached", dir.display()),
                ),
                _ => OpError::io(dir, e),
            });
        }
        // The same directory twice (a bind mount, a rename race) gives the same wd: count it once.
        if self.dirs.insert(wd, dir.to_path_buf()).is_some() {
            self.budget.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(wd)
    }

    /// Watches every directory below `top` (iteratively: depth costs no stack). With `report`, each
    /// entry found is sent as `create` (a directory just created may have been filled before its
    /// watch was in place). `false` when the watch budget ran out.
    fn add_below(&mut self, top: &Path, report: bool) -> bool {
        let mut todo = vec![top.to_path_buf()];
        while let Some(dir) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                if report {
                    self.send(WatchKind::Create, &path);
                }
                // The entry's own type (d_type or lstat): a symlink to a directory is not descended.
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                match self.add(&path) {
                    Ok(_) => todo.push(path),
                    Err(e) if e.kind == FileErrorKind::TooLarge => return false,
                    // Gone meanwhile, or not readable by this user: nothing to watch there.
                    Err(_) => {}
                }
            }
        }
        true
    }

    fn send(&self, kind: WatchKind, path: &Path) {
        let path = path.to_string_lossy().into_owned();
        let _ = self.credit.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| c.checked_sub(1));
        self.out.send(&Event::WatchEvent { id: self.id, kind, path }, &[]);
    }

    /// Relays events until stopped or the watched directory goes away.
    fn run(&mut self) {
        let mut buf = vec![0u8; 64 << 10];
        while !self.stop.load(Ordering::SeqCst) {
            let credit = self.credit.load(Ordering::SeqCst);
            if credit == 0 {
                // Nothing read until the daemon's client takes what was sent: the kernel keeps the
                // rest (and reports its overflow).
                std::thread::sleep(std::time::Duration::from_millis(20));
                continue;
            }
            // An event is at least 16 bytes: a read this size holds at most `credit` events, plus
            // what one more with the longest name needs (a smaller buffer would be EINVAL).
            let want = (credit.min(4096) as usize * 16 + 16 + 256).min(buf.len());
            let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: poll on one valid pollfd.
            if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
                // Nothing for a poll interval: a rename's second half would have come by now.
                if let Some((_, from)) = self.moved_from_last.take() {
                    self.unwatch_below(&from);
                }
                continue;
            }
            // SAFETY: read into a buffer of the given length from a valid fd.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), want) };
            if n <= 0 {
                continue;
            }
            if !self.handle(parse(&buf[..n as usize])) {
                return;
            }
        }
    }

    /// Reports one batch of events; `false` once the watched directory itself is gone.
    fn handle(&mut self, batch: Vec<Raw>) -> bool {
        // A directory renamed within the tree keeps its watch: the kernel queues a rename's
        // `moved_from` and `moved_to` (same cookie) one after the other, and the path is updated when
        // the second comes. A `moved_from` not followed by its `moved_to` moved out of the tree: its
        // watches go at once, before the events after it, so that what is written in it afterwards
        // (already queued behind it) is not reported under a path it no longer has.
        let mut renaming: Option<(u32, PathBuf)> = None;
        let mut batch = batch.into_iter().peekable();
        if let Some((cookie, from)) = self.moved_from_last.take() {
            if batch.peek().is_some_and(|n| n.mask & libc::IN_MOVED_TO != 0 && n.cookie == cookie) {
                renaming = Some((cookie, from));
            } else {
                self.unwatch_below(&from);
            }
        }
        while let Some(ev) = batch.next() {
            if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                let root = self.root.clone();
                self.send(WatchKind::Overflow, &root);
                continue;
            }
            if ev.mask & libc::IN_IGNORED != 0 {
                if self.dirs.remove(&ev.wd).is_some() {
                    self.budget.fetch_sub(1, Ordering::SeqCst);
                }
                if ev.wd == self.root_wd {
                    return false;
                }
                continue;
            }
            let Some(dir) = self.dirs.get(&ev.wd) else { continue };
            let path = if ev.name.is_empty() { dir.clone() } else { dir.join(OsStr::from_bytes(&ev.name)) };
            let is_dir = ev.mask & libc::IN_ISDIR != 0;
            if let Some(kind) = kind_of(ev.mask) {
                self.send(kind, &path);
            }
            if !(self.recursive && is_dir) {
                continue;
            }
            if ev.mask & libc::IN_MOVED_FROM != 0 {
                match batch.peek() {
                    Some(n) if n.mask & libc::IN_MOVED_TO != 0 && n.cookie == ev.cookie => {
                        renaming = Some((ev.cookie, path));
                    }
                    // Moved out (or the rename's halves were parted by another event: then the
                    // `moved_to` watches it again as a new directory, its entries reported as created).
                    Some(_) => self.unwatch_below(&path),
                    // The last of this read: the next one says which it was.
                    None => self.moved_from_last = Some((ev.cookie, path)),
                }
            } else if ev.mask & libc::IN_MOVED_TO != 0 {
                match renaming.take() {
                    Some((cookie, from)) if cookie == ev.cookie => self.rename_dirs(&from, &path),
                    _ => self.add_new_dir(&path),
                }
            } else if ev.mask & libc::IN_CREATE != 0 {
                self.add_new_dir(&path);
            }
        }
        true
    }

    /// Watches a directory that appeared in the tree, and what it already holds.
    fn add_new_dir(&mut self, path: &Path) {
        let added = match self.add(path) {
            Ok(_) => self.add_below(path, true),
            Err(e) => e.kind != FileErrorKind::TooLarge,
        };
        if !added {
            // What happens below it from now on cannot be seen: say so rather than go quiet.
            self.send(WatchKind::Overflow, path);
        }
    }

    fn rename_dirs(&mut self, from: &Path, to: &Path) {
        for dir in self.dirs.values_mut() {
            if let Ok(rest) = dir.strip_prefix(from) {
                *dir = to.join(rest);
            }
        }
    }

    /// Forgets the watches of a directory moved out of the tree, at once: events already queued for
    /// them would carry paths that are no longer where the files are, so they are dropped (their
    /// watch descriptors are unknown from here on).
    fn unwatch_below(&mut self, top: &Path) {
        let wds: Vec<i32> = self.dirs.iter().filter(|(_, d)| d.starts_with(top)).map(|(wd, _)| *wd).collect();
        for wd in wds {
            self.dirs.remove(&wd);
            self.budget.fetch_sub(1, Ordering::SeqCst);
            // SAFETY: plain syscall on a valid fd.
            unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Closing the descriptor removes every watch it holds.
        self.budget.fetch_sub(self.dirs.len(), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events `handle` sent for what is queued on the watcher's own inotify descriptor, read
    /// at once and handed over as one batch, or (`one_by_one`) as if each event came in a read
    /// of its own.
    fn handled(
        w: &mut Watcher,
        events: &mut std::os::unix::net::UnixStream,
        one_by_one: bool,
    ) -> Vec<(WatchKind, String)> {
        let mut buf = vec![0u8; 64 << 10];
        // SAFETY: read into a buffer of its length from a valid fd.
        let n = unsafe { libc::read(w.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n > 0, "no inotify events queued");
        let batch = parse(&buf[..n as usize]);
        if one_by_one {
            for ev in batch {
                assert!(w.handle(vec![ev]));
            }
        } else {
            assert!(w.handle(batch));
        }
        events.set_nonblocking(true).unwrap();
        let mut seen = Vec::new();
        while let Ok(frame) = sandlot_protocol::read_frame::<Event, _>(events) {
            if let Event::WatchEvent { kind, path, .. } = frame.header {
                seen.push((kind, path));
            }
        }
        events.set_nonblocking(false).unwrap();
        seen
    }

    /// A recursive watcher of `root` (holding `sub`), beside a directory `outside` the tree, with the
    /// socket its events come out of.
    struct Tree {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
        w: Watcher,
        events: std::os::unix::net::UnixStream,
        stop: Arc<AtomicBool>,
    }

    impl Tree {
        fn new() -> Tree {
            let tmp = tempfile::tempdir().unwrap();
            let (root, outside) = (tmp.path().join("w"), tmp.path().join("outside"));
            std::fs::create_dir_all(root.join("sub")).unwrap();
            std::fs::create_dir(&outside).unwrap();
            let (a, events) = std::os::unix::net::UnixStream::pair().unwrap();
            let out = Outbox { sock: Arc::new(Mutex::new(a)) };
            let stop = Arc::new(AtomicBool::new(false));
            let credit = Arc::new(AtomicU64::new(u64::MAX));
            let w = Watcher::new(1, &out, Arc::new(AtomicUsize::new(0)), &root, true, stop.clone(), credit).unwrap();
            Tree { _tmp: tmp, root, outside, w, events, stop }
        }
    }

    /// What is written in a directory after it moved out of the tree is not reported, and a rename
    /// within the tree keeps the directory watched under its new path, however the events fall
    /// into reads: all in one (the moved-out directory's events used to come under its old path),
    /// or each in its own (a rename's halves in two reads used to lose the directory's watch).
    #[test]
    fn a_directory_moved_out_is_unwatched_before_the_events_queued_behind_it() {
        for one_by_one in [false, true] {
            let Tree { _tmp, root, outside, mut w, mut events, .. } = Tree::new();

            // All of it before the watcher reads.
            std::fs::rename(root.join("sub"), root.join("sub2")).unwrap();
            std::fs::write(root.join("sub2/d"), "y").unwrap();
            std::fs::rename(root.join("sub2"), outside.join("sub2")).unwrap();
            std::fs::write(outside.join("sub2/e"), "z").unwrap();
            std::fs::write(root.join("end"), "").unwrap();
            let at = |p: &str| root.join(p).to_string_lossy().into_owned();
            let want = vec![
                (WatchKind::RenameFrom, at("sub")),
                (WatchKind::RenameTo, at("sub2")),
                (WatchKind::Create, at("sub2/d")),
                (WatchKind::Write, at("sub2/d")),
                (WatchKind::RenameFrom, at("sub2")),
                (WatchKind::Create, at("end")),
                (WatchKind::Write, at("end")),
            ];
            assert_eq!(handled(&mut w, &mut events, one_by_one), want, "one by one: {one_by_one}");
            assert_eq!(w.dirs.len(), 1, "only the root is watched: {:?}", w.dirs);
        }
    }

    /// A watch out of credit reads nothing more: its events stay in the kernel's queue until the
    /// daemon gives credit back, and a read never holds much more than the credit left.
    #[test]
    fn a_watch_sends_no_more_than_its_credit() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, mut events) = std::os::unix::net::UnixStream::pair().unwrap();
        let out = Outbox { sock: Arc::new(Mutex::new(a)) };
        let (stop, credit) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(5)));
        let mut w =
            Watcher::new(1, &out, Arc::new(AtomicUsize::new(0)), tmp.path(), false, stop.clone(), credit.clone())
                .unwrap();
        for i in 0..100 {
            std::fs::write(tmp.path().join(format!("f{i:02}")), "").unwrap();
        }
        let runner = std::thread::spawn(move || w.run());
        let count = |events: &mut std::os::unix::net::UnixStream| {
            std::thread::sleep(std::time::Duration::from_millis(400));
            events.set_nonblocking(true).unwrap();
            let mut n = 0;
            while let Ok(frame) = sandlot_protocol::read_frame::<Event, _>(events) {
                n += usize::from(matches!(frame.header, Event::WatchEvent { .. }));
            }
            n
        };
        let first = count(&mut events);
        // 200 events are queued (a create and a finished write per file); 5 of credit, and what one
        // read of 5 × 16 + 272 bytes holds (events of 32 bytes here: 11).
        assert!((5..=5 + 17).contains(&first), "{first} events sent on a credit of 5");
        assert_eq!(credit.load(Ordering::SeqCst), 0);
        credit.store(1000, Ordering::SeqCst);
        let rest = count(&mut events);
        assert_eq!(first + rest, 200, "the queued events come once there is credit");
        stop.store(true, Ordering::SeqCst);
        runner.join().unwrap();
    }

    /// A directory's `moved_from` that ends a read, with nothing after it for a poll interval,
    /// was a move out of the tree: its watch goes.
    #[test]
    fn a_move_out_that_ends_a_read_is_settled_when_the_queue_stays_empty() {
        let Tree { _tmp, root, outside, mut w, mut events, stop } = Tree::new();
        std::fs::rename(root.join("sub"), outside.join("sub")).unwrap();
        let seen = handled(&mut w, &mut events, false);
        assert_eq!(seen, vec![(WatchKind::RenameFrom, root.join("sub").to_string_lossy().into_owned())]);
        assert_eq!(w.dirs.len(), 2, "undecided until the next read or a quiet poll");
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(350));
            stop.store(true, Ordering::SeqCst);
        });
        w.run();
        stopper.join().unwrap();
        assert_eq!(w.dirs.len(), 1, "only the root is watched: {:?}", w.dirs);
    }

    fn raw(wd: i32, mask: u32, cookie: u32, name: &[u8], pad: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for w in [wd as u32, mask, cookie, (name.len() + pad) as u32] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b.extend_from_slice(name);
        b.extend(std::iter::repeat_n(0u8, pad));
        b
    }

    #[test]
    fn a_batch_is_split_into_events_with_names_unpadded_and_a_torn_tail_is_dropped() {
        let mut buf = raw(1, libc::IN_CREATE, 0, b"a.txt", 11);
        buf.extend(raw(2, libc::IN_Q_OVERFLOW, 0, b"", 0));
        buf.extend(raw(1, libc::IN_MOVED_FROM, 7, b"dir", 13));
        let torn = raw(1, libc::IN_DELETE, 0, b"zzzz", 12);
        buf.extend_from_slice(&torn[..20]);
        let events = parse(&buf);
        assert_eq!(events.len(), 3);
        assert_eq!((events[0].wd, events[0].name.as_slice()), (1, &b"a.txt"[..]));
        assert_eq!((events[1].mask, events[1].name.len()), (libc::IN_Q_OVERFLOW, 0));
        assert_eq!((events[2].cookie, events[2].name.as_slice()), (7, &b"dir"[..]));
    }

    #[test]
    fn each_change_has_its_kind_and_the_rest_none() {
        assert_eq!(kind_of(libc::IN_CREATE | libc::IN_ISDIR), Some(WatchKind::Create));
        assert_eq!(kind_of(libc::IN_CLOSE_WRITE), Some(WatchKind::Write));
        assert_eq!(kind_of(libc::IN_DELETE), Some(WatchKind::Remove));
        assert_eq!(kind_of(libc::IN_MOVED_FROM), Some(WatchKind::RenameFrom));
        assert_eq!(kind_of(libc::IN_MOVED_TO), Some(WatchKind::RenameTo));
        assert_eq!(kind_of(libc::IN_ATTRIB), Some(WatchKind::Chmod));
        assert_eq!(kind_of(libc::IN_Q_OVERFLOW), Some(WatchKind::Overflow));
        assert_eq!(kind_of(libc::IN_DELETE_SELF), None);
        assert_eq!(kind_of(libc::IN_IGNORED), None);
    }
}
