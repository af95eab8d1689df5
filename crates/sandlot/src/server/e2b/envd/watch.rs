//! Directory watching, envd's two ways: `WatchDir` streams the events; `CreateWatcher` starts a
//! watch whose events are kept for `GetWatcherEvents` to collect and `RemoveWatcher` to end. Both
//! are `Control::watch` (inotify in the sandbox, run by its supervisor as the user: at most 8 per
//! sandbox, each with its own bounded queue there). A polled watcher keeps at most
//! [`MAX_KEPT_EVENTS`] events and [`MAX_KEPT_BYTES`] between two polls; past them the next poll says
//! events were lost. Polled watchers are bounded per sandbox, per tenant and on the server, ended
//! ones included: a watcher whose watch ended (its directory or sandbox gone) is removed once its last
//! events are collected, or [`ENDED_TTL`] after it ended when nobody collects them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Extension;
use sandlot_api::{User, WatchEvent, WatchKind};
use sandlot_control::WatchStream;

use super::connect::{self, Envelopes, ServerStream};
use super::proto::{self, watch_dir_response, EventType, FilesystemEvent};
use super::{basic_user, ConnectError, Target};
use crate::server::app::AppState;

type Reply = Result<Response, ConnectError>;

/// Events a polled watcher keeps between two polls.
const MAX_KEPT_EVENTS: usize = 1024;
/// Bytes of events a polled watcher keeps between two polls (names are up to 4 KiB each).
const MAX_KEPT_BYTES: usize = 256 * 1024;
/// Polled watchers of one sandbox, live or ended (the supervisor runs at most 8 watches).
const MAX_WATCHERS_PER_SANDBOX: usize = 8;
/// Polled watchers of one tenant, over all its sandboxes.
const MAX_WATCHERS_PER_TENANT: usize = 64;
/// Polled watchers on the server.
const MAX_WATCHERS: usize = 1024;
/// How long an ended watcher's uncollected events are kept.
const ENDED_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// What is kept for a polled watcher.
#[derive(Default, Debug)]
struct Kept {
    events: VecDeque<FilesystemEvent>,
    /// What `events` hold, counted as [`event_bytes`].
    bytes: usize,
    lost: bool,
    ended: bool,
}

/// What an event costs to keep.
fn event_bytes(e: &FilesystemEvent) -> usize {
    let entry = e.entry.as_ref().map_or(0, |i| {
        std::mem::size_of::<proto::EntryInfo>()
            + i.name.len()
            + i.path.len()
            + i.symlink_target.as_ref().map_or(0, String::len)
            + i.metadata.iter().map(|(k, v)| k.len() + v.len() + 48).sum::<usize>()
    });
    std::mem::size_of::<FilesystemEvent>() + e.name.len() + entry
}

impl Kept {
    /// Keeps `ev`, or marks events lost when the watcher holds its most already.
    fn push(&mut self, ev: FilesystemEvent) {
        let size = event_bytes(&ev);
        if self.events.len() < MAX_KEPT_EVENTS && self.bytes + size <= MAX_KEPT_BYTES {
            self.bytes += size;
            self.events.push_back(ev);
        } else {
            self.lost = true;
        }
    }

    fn take(&mut self) -> Vec<FilesystemEvent> {
        self.bytes = 0;
        self.events.drain(..).collect()
    }
}

struct Watcher {
    sandbox: String,
    tenant: String,
    kept: Arc<Mutex<Kept>>,
    /// The task that fills `kept`; `None` while the watch is being started.
    task: Option<tokio::task::AbortHandle>,
}

/// The polled watchers, by id (random, so one cannot be guessed; and tied to its sandbox).
#[derive(Default)]
struct Watchers(HashMap<String, Watcher>);

impl Watchers {
    /// A new watcher's id and its kept events, registered for `sandbox` of `tenant` within the
    /// bounds (checked and taken under one lock, so racing creates cannot pass them).
    fn reserve(&mut self, sandbox: &str, tenant: &str) -> Result<(String, Arc<Mutex<Kept>>), ConnectError> {
        let full = |what: String| ConnectError::new("resource_exhausted", StatusCode::TOO_MANY_REQUESTS, what);
        if self.0.len() >= MAX_WATCHERS {
            return Err(full(format!("this server holds {MAX_WATCHERS} watchers already: try again later")));
        }
        if self.0.values().filter(|w| w.sandbox == sandbox).count() >= MAX_WATCHERS_PER_SANDBOX {
            return Err(full(format!(
                "this sandbox has {MAX_WATCHERS_PER_SANDBOX} watchers already: remove ones you no longer poll"
            )));
        }
        if self.0.values().filter(|w| w.tenant == tenant).count() >= MAX_WATCHERS_PER_TENANT {
            return Err(full(format!(
                "your sandboxes have {MAX_WATCHERS_PER_TENANT} watchers already: remove ones you no longer poll"
            )));
        }
        let id = format!("{:032x}", rand::random::<u128>());
        let kept = Arc::new(Mutex::new(Kept::default()));
        let w = Watcher { sandbox: sandbox.into(), tenant: tenant.into(), kept: Arc::clone(&kept), task: None };
        self.0.insert(id.clone(), w);
        Ok((id, kept))
    }
}

static WATCHERS: LazyLock<Mutex<Watchers>> = LazyLock::new(Default::default);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The directory a watch is on, as the control layer resolves it (relative: in the user's home).
fn watched_dir(path: &str, user: User) -> String {
    let abs = if path.starts_with('/') { path.to_string() } else { format!("{}/{path}", user.home()) };
    let trimmed = abs.trim_end_matches('/');
    if trimmed.is_empty() {
        "/".into()
    } else {
        trimmed.to_string()
    }
}

/// envd's event for one of ours: `name` relative to the watched directory; a rename's arrival is a
/// create, as fsnotify reports it. `None` for an overflow (the caller reports the loss).
fn fs_event(dir: &str, e: &WatchEvent) -> Option<FilesystemEvent> {
    let kind = match e.kind {
        WatchKind::Create | WatchKind::RenameTo => EventType::Create,
        WatchKind::Write => EventType::Write,
        WatchKind::Remove => EventType::Remove,
        WatchKind::RenameFrom => EventType::Rename,
        WatchKind::Chmod => EventType::Chmod,
        WatchKind::Overflow => return None,
    };
    let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
    let name = e.path.strip_prefix(&prefix).unwrap_or(&e.path).to_string();
    Some(FilesystemEvent { name, r#type: kind as i32, entry: None })
}

fn lost_error() -> ConnectError {
    ConnectError::new(
        "data_loss",
        StatusCode::INTERNAL_SERVER_ERROR,
        format!(
            "directory events were lost (more than the sandbox's queue or {MAX_KEPT_EVENTS} between two polls): \
             what changed meanwhile is unknown; poll more often or watch fewer directories"
        ),
    )
}

/// A started watch: its events, the directory it is on, and who watches (for entry stats).
struct Started {
    stream: WatchStream,
    dir: String,
    user: User,
}

/// Starts the watch `req` asks. `allow_network_mounts` needs nothing: a sandbox's files are its
/// own layers and volumes, none of them a network mount, and inotify sees them all.
async fn start_watch(
    app: &AppState,
    t: &Target,
    headers: &HeaderMap,
    req: &proto::WatchRequest,
) -> Result<Started, ConnectError> {
    let user = basic_user(headers)?;
    let stream = app.control.watch(&t.caller, &t.id, &req.path, req.recursive, user).await?;
    Ok(Started { stream, dir: watched_dir(&req.path, user), user })
}

/// The entry an event is about, when the watch asked for entries (`include_entry`) and the path
/// is still there to stat (not for a removal or a rename away, as envd leaves those).
async fn entry_of(app: &AppState, t: &Target, user: User, e: &WatchEvent) -> Option<proto::EntryInfo> {
    if matches!(e.kind, WatchKind::Remove | WatchKind::RenameFrom | WatchKind::Overflow) {
        return None;
    }
    app.control.stat(&t.caller, &t.id, &e.path, user).await.ok().map(super::filesystem::entry)
}

fn watch_message(e: watch_dir_response::Event) -> proto::WatchDirResponse {
    proto::WatchDirResponse { event: Some(e) }
}

/// `WatchDir`: `start`, then the events as they happen (with keepalives), until the client goes,
/// its deadline, the watch ends (the directory removed, the sandbox stopped), or the client takes no
/// event within the stream policy's bound.
pub async fn watch_dir(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let codec = connect::Codec::of(&headers, true)?;
    Ok(watch_stream(app, t, headers, body).await.unwrap_or_else(|e| connect::stream_error(codec, e)))
}

async fn watch_stream(app: AppState, t: Target, headers: HeaderMap, body: Body) -> Reply {
    let mut envs = Envelopes::new(&headers, body)?;
    let codec = envs.codec();
    let req = envs
        .next::<proto::WatchRequest>()
        .await?
        .ok_or_else(|| ConnectError::invalid("the call's request message is missing"))?;
    let deadline = connect::timeout(&headers)?.map(|d| tokio::time::Instant::now() + d);
    let keepalive = connect::keepalive(&headers);
    let Started { mut stream, dir, user } = start_watch(&app, &t, &headers, &req).await?;
    let include_entry = req.include_entry;
    let (out, resp) = ServerStream::open(codec, app.streams);
    tokio::spawn(async move {
        if !out.send(&watch_message(watch_dir_response::Event::Start(proto::Empty {}))).await {
            return;
        }
        let mut ping = keepalive.map(|k| tokio::time::interval_at(tokio::time::Instant::now() + k, k));
        loop {
            let next = tokio::select! {
                e = stream.next() => e,
                _ = async { ping.as_mut().unwrap().tick().await }, if ping.is_some() => {
                    if !out.send(&watch_message(watch_dir_response::Event::Keepalive(proto::Empty {}))).await { return }
                    continue;
                }
                _ = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() => {
                    return out.finish(Some(ConnectError::deadline_exceeded())).await;
                }
                _ = out.gone() => return,
            };
            let Some(e) = next else { return out.finish(None).await };
            let Some(mut ev) = fs_event(&dir, &e) else { return out.finish(Some(lost_error())).await };
            if include_entry {
                ev.entry = entry_of(&app, &t, user, &e).await;
            }
            // A client that takes nothing within the bound while events wait loses the stream and the
            // watch (whose queue is charged to its tenant and the daemon while nobody reads it).
            let msg = watch_message(watch_dir_response::Event::Filesystem(ev));
            match out.pace().send(out.send(&msg)).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(_) => return out.abandon(),
            }
        }
    });
    Ok(resp)
}

/// `CreateWatcher`.
pub async fn create_watcher(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, req) = connect::read_unary::<proto::WatchRequest>(&headers, body).await?;
    let (id, kept) = lock(&WATCHERS).reserve(&t.id, &t.caller.tenant)?;
    let Started { mut stream, dir, user } = match start_watch(&app, &t, &headers, &req).await {
        Ok(started) => started,
        Err(e) => {
            lock(&WATCHERS).0.remove(&id);
            return Err(e);
        }
    };
    let task_id = id.clone();
    let task = tokio::spawn(async move {
        while let Some(e) = stream.next().await {
            match fs_event(&dir, &e) {
                Some(mut ev) => {
                    if req.include_entry {
                        ev.entry = entry_of(&app, &t, user, &e).await;
                    }
                    lock(&kept).push(ev)
                }
                None => lock(&kept).lost = true,
            }
        }
        let uncollected = {
            let mut k = lock(&kept);
            k.ended = true;
            !k.events.is_empty() || k.lost
        };
        // Nothing left to collect: nobody needs the watcher any more. Else its last poll removes
        // it, or this does after the TTL.
        if uncollected {
            tokio::time::sleep(ENDED_TTL).await;
        }
        lock(&WATCHERS).0.remove(&task_id);
    });
    let mut all = lock(&WATCHERS);
    match all.0.get_mut(&id) {
        Some(w) => w.task = Some(task.abort_handle()),
        // Removed meanwhile (RemoveWatcher, or the task ended with nothing to collect): nothing to keep.
        None => task.abort(),
    }
    drop(all);
    Ok(connect::unary(codec, &proto::WatcherId { watcher_id: id }))
}

fn not_found(id: &str) -> ConnectError {
    ConnectError::not_found(format!(
        "no watcher {id:?} in this sandbox (removed, or its watch ended and was collected)"
    ))
}

/// `GetWatcherEvents`: the events since the last call.
pub async fn get_watcher_events(Extension(t): Extension<Target>, headers: HeaderMap, body: Body) -> Reply {
    let (codec, req) = connect::read_unary::<proto::WatcherId>(&headers, body).await?;
    let mut all = lock(&WATCHERS);
    let w = all.0.get(&req.watcher_id).filter(|w| w.sandbox == t.id).ok_or_else(|| not_found(&req.watcher_id))?;
    let mut k = lock(&w.kept);
    let events = k.take();
    let (lost, ended) = (std::mem::take(&mut k.lost), k.ended);
    drop(k);
    if ended {
        if let Some(w) = all.0.remove(&req.watcher_id) {
            // Its task only waits out the TTL now.
            w.task.inspect(|t| t.abort());
        }
    }
    if lost {
        return Err(lost_error());
    }
    Ok(connect::unary(codec, &proto::GetWatcherEventsResponse { events }))
}

/// `RemoveWatcher`.
pub async fn remove_watcher(Extension(t): Extension<Target>, headers: HeaderMap, body: Body) -> Reply {
    let (codec, req) = connect::read_unary::<proto::WatcherId>(&headers, body).await?;
    let mut all = lock(&WATCHERS);
    match all.0.get(&req.watcher_id) {
        Some(w) if w.sandbox == t.id => {
            // Ending the task drops its WatchStream, which ends the watch in the sandbox (a watcher
            // still starting has no task: its start sees the entry gone and ends it).
            if let Some(task) = &w.task {
                task.abort();
            }
            all.0.remove(&req.watcher_id);
            Ok(connect::unary(codec, &proto::Empty {}))
        }
        _ => Err(not_found(&req.watcher_id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_are_relative_to_the_watched_directory() {
        let e = |kind, path: &str| WatchEvent { kind, path: path.into() };
        let dir = watched_dir("/tmp/w/", User::User);
        assert_eq!(dir, "/tmp/w");
        let ev = fs_event(&dir, &e(WatchKind::Create, "/tmp/w/sub/f")).unwrap();
        assert_eq!((ev.name.as_str(), ev.r#type), ("sub/f", EventType::Create as i32));
        assert_eq!(fs_event(&dir, &e(WatchKind::RenameTo, "/tmp/w/g")).unwrap().r#type, EventType::Create as i32);
        assert_eq!(fs_event(&dir, &e(WatchKind::RenameFrom, "/tmp/w/g")).unwrap().r#type, EventType::Rename as i32);
        assert!(fs_event(&dir, &e(WatchKind::Overflow, "/tmp/w")).is_none());
        assert_eq!(watched_dir("proj", User::User), "/home/user/proj");
        assert_eq!(fs_event("/", &e(WatchKind::Write, "/etc")).unwrap().name, "etc");
    }

    #[test]
    fn watchers_are_bounded_per_sandbox_and_per_tenant() {
        let mut all = Watchers::default();
        for _ in 0..MAX_WATCHERS_PER_SANDBOX {
            all.reserve("sb_a", "alice").unwrap();
        }
        let err = all.reserve("sb_a", "alice").unwrap_err();
        assert_eq!((err.code, err.status), ("resource_exhausted", StatusCode::TOO_MANY_REQUESTS));
        assert!(err.message.contains("this sandbox"), "{}", err.message);
        // Another tenant's sandbox is not held back by alice's.
        all.reserve("sb_b", "bob").unwrap();
        let mut n = MAX_WATCHERS_PER_SANDBOX;
        let err = loop {
            match all.reserve(&format!("sb_{}", n / MAX_WATCHERS_PER_SANDBOX), "alice") {
                Ok(_) => n += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(n, MAX_WATCHERS_PER_TENANT);
        assert!(err.message.contains("your sandboxes"), "{}", err.message);
        all.reserve("sb_c", "bob").unwrap();
    }

    #[test]
    fn a_watcher_keeps_a_bounded_number_of_bytes_then_reports_the_loss() {
        let mut k = Kept::default();
        let long = |i: usize| FilesystemEvent { name: format!("{i:04}{}", "x".repeat(4000)), r#type: 1, entry: None };
        let mut i = 0;
        while !k.lost {
            k.push(long(i));
            i += 1;
        }
        assert!(k.bytes <= MAX_KEPT_BYTES && k.events.len() < MAX_KEPT_EVENTS, "{} bytes, {}", k.bytes, k.events.len());
        assert_eq!(k.events.len(), MAX_KEPT_BYTES / event_bytes(&long(0)));
        assert_eq!(k.take().len(), i - 1);
        assert_eq!(k.bytes, 0);
        k.push(long(0));
        assert_eq!(k.events.len(), 1);
    }
}
