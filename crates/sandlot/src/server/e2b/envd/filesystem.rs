//! `filesystem.Filesystem`: stat, make, move, list and remove, each done by the supervisor inside
//! the sandbox as the calling user (`Control`'s file operations), with entries in envd's form.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use sandlot_api::{FileKind, FileStat, User};
use sandlot_control::{Kind, MkdirMode};

use super::connect;
use super::proto::{self, EntryInfo, FileType};
use super::{basic_user, ConnectError, Target};
use crate::server::app::AppState;

type Reply = Result<Response, ConnectError>;

/// Go's `os.FileMode` type bits, which envd's `mode` carries above the permission bits (not the
/// directory bit: envd ≥ 0.6 reports a directory's mode as its permission bits, `0o755`).
const GO_MODE_SYMLINK: u32 = 1 << 27;
const GO_MODE_SETUID: u32 = 1 << 23;
const GO_MODE_SETGID: u32 = 1 << 22;
const GO_MODE_STICKY: u32 = 1 << 20;

/// The name of a sandbox uid: the two users sandlot sandboxes have, else the number.
fn user_name(uid: u32) -> String {
    match uid {
        0 => "root".into(),
        1000 => "user".into(),
        n => n.to_string(),
    }
}

/// `mode` and `permissions` as envd (Go's `FileMode` and its `String()`) writes them.
fn go_mode(kind: FileKind, mode: u32) -> (u32, String) {
    let mut go = mode & 0o777;
    let mut letters = String::new();
    match kind {
        FileKind::Dir => letters.push('d'),
        FileKind::Symlink => {
            go |= GO_MODE_SYMLINK;
            letters.push('L');
        }
        _ => {}
    }
    for (bit, go_bit, letter) in
        [(0o4000, GO_MODE_SETUID, 'u'), (0o2000, GO_MODE_SETGID, 'g'), (0o1000, GO_MODE_STICKY, 't')]
    {
        if mode & bit != 0 {
            go |= go_bit;
            letters.push(letter);
        }
    }
    if letters.is_empty() {
        letters.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        letters.push(if mode & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    (go, letters)
}

/// An entry in envd's form. The group is the owner's own (sandlot's users each have one group of
/// their name, and the supervisor reports no gid).
pub fn entry(s: FileStat) -> EntryInfo {
    let (mode, permissions) = go_mode(s.kind, s.mode);
    let kind = match s.kind {
        FileKind::File => FileType::File,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Other => FileType::Unspecified,
    };
    EntryInfo {
        name: s.name,
        r#type: kind as i32,
        path: s.path,
        size: i64::try_from(s.size).unwrap_or(i64::MAX),
        mode,
        permissions,
        owner: user_name(s.uid),
        group: user_name(s.uid),
        modified_time: Some(proto::Timestamp {
            seconds: s.mtime_ms.div_euclid(1000),
            nanos: (s.mtime_ms.rem_euclid(1000) * 1_000_000) as i32,
        }),
        symlink_target: s.link_target,
        metadata: s.metadata.into_iter().collect(),
    }
}

fn entry_response(codec: connect::Codec, s: FileStat) -> Response {
    connect::unary(codec, &proto::EntryResponse { entry: Some(entry(s)) })
}

/// `Stat`.
pub async fn stat(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, req) = connect::read_unary::<proto::PathRequest>(&headers, body).await?;
    let user = basic_user(&headers)?;
    let s = app.control.stat(&t.caller, &t.id, &req.path, user).await?;
    let s = match s.kind {
        FileKind::Symlink => followed(&app, &t, user, s).await,
        _ => s,
    };
    Ok(entry_response(codec, s))
}

/// Links followed before a chain is taken for a loop (Linux's own bound).
const MAX_LINK_HOPS: usize = 40;

/// A symlink's stat as envd answers it: the kind of what it leads to, and the absolute path it
/// leads to as `symlinkTarget` (envd resolves the link; sandlot's native stat describes the link
/// itself). The links are followed by the sandbox's own stat, in the sandbox's view, hop by hop; a
/// dangling link, a loop or an error leaves the link's own stat.
async fn followed(app: &AppState, t: &Target, user: User, link: FileStat) -> FileStat {
    let mut at = link.path.clone();
    let mut target = link.link_target.clone();
    for _ in 0..MAX_LINK_HOPS {
        let Some(next) = target.take() else { break };
        at = resolve_link(&at, &next);
        match app.control.stat(&t.caller, &t.id, &at, user).await {
            Ok(s) if s.kind == FileKind::Symlink => target = s.link_target,
            Ok(s) => return FileStat { kind: s.kind, link_target: Some(at), ..link },
            Err(_) => break,
        }
    }
    link
}

/// Where link `link_path` (absolute) pointing at `target` leads: `target` itself when absolute, else
/// from the link's directory; `.` and `..` taken lexically.
fn resolve_link(link_path: &str, target: &str) -> String {
    let base = if target.starts_with('/') { "" } else { link_path.rsplit_once('/').map_or("", |(dir, _)| dir) };
    let mut parts: Vec<&str> = Vec::new();
    for part in base.split('/').chain(target.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// `MakeDir`: the directory and its parents; `already_exists` when something is there already.
pub async fn make_dir(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, req) = connect::read_unary::<proto::PathRequest>(&headers, body).await?;
    let user = basic_user(&headers)?;
    // envd's MakeDir: parents as needed, and `already_exists` when the directory is there (the
    // supervisor's last mkdir decides, so no check races the make).
    Ok(entry_response(codec, app.control.mkdir(&t.caller, &t.id, &req.path, user, MkdirMode::ParentsNew).await?))
}

/// `Move`: a rename that replaces what is at the destination, as envd's (`os.Rename`) does.
pub async fn move_entry(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, req) = connect::read_unary::<proto::MoveRequest>(&headers, body).await?;
    let user = basic_user(&headers)?;
    let s = app.control.move_file(&t.caller, &t.id, &req.source, &req.destination, user, true).await?;
    Ok(entry_response(codec, s))
}

/// `ListDir`: entries `depth` levels deep (0 means 1, as envd takes it).
pub async fn list_dir(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, req) = connect::read_unary::<proto::ListDirRequest>(&headers, body).await?;
    let user = basic_user(&headers)?;
    let depth = Some(req.depth.max(1));
    let list = app.control.list_files(&t.caller, &t.id, &req.path, user, depth).await?;
    let entries = list.entries.into_iter().map(entry).collect();
    Ok(connect::unary(codec, &proto::ListDirResponse { entries }))
}

/// `Remove`: a file, or a directory with what is in it; a path with nothing there is removed
/// already (envd's `os.RemoveAll` answers so).
pub async fn remove(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, req) = connect::read_unary::<proto::PathRequest>(&headers, body).await?;
    let user = basic_user(&headers)?;
    match app.control.remove_file(&t.caller, &t.id, &req.path, user, true).await {
        Ok(_) => {}
        Err(e) if e.kind == Kind::FileNotFound => {}
        Err(e) => return Err(e.into()),
    }
    Ok(connect::unary(codec, &proto::Empty {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_resolves_from_its_directory_or_from_the_root() {
        assert_eq!(resolve_link("/home/user/d/l", "t.txt"), "/home/user/d/t.txt");
        assert_eq!(resolve_link("/home/user/d/l", "../x/./t"), "/home/user/x/t");
        assert_eq!(resolve_link("/home/user/d/l", "/etc/hosts"), "/etc/hosts");
        assert_eq!(resolve_link("/l", "../../t"), "/t");
    }

    #[test]
    fn modes_are_gos() {
        assert_eq!(go_mode(FileKind::Dir, 0o755), (0o755, "drwxr-xr-x".into()));
        assert_eq!(go_mode(FileKind::File, 0o644), (0o644, "-rw-r--r--".into()));
        assert_eq!(go_mode(FileKind::Symlink, 0o777), (GO_MODE_SYMLINK | 0o777, "Lrwxrwxrwx".into()));
        assert_eq!(go_mode(FileKind::File, 0o4755).1, "urwxr-xr-x");
    }
}
