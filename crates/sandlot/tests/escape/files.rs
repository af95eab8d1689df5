//! The file API against tricks planted by sandbox code or sent by a client: symlinks, `..`, tar slips,
//! links in archives; and one sandbox looking for another's files.

use sandlot_client::api::{FileKind, User};
use sandlot_client::Error;

use crate::probe::{assert_lines, python, sh};
use crate::server::Server;

#[track_caller]
fn assert_code<T: std::fmt::Debug>(result: Result<T, Error>, code: &str) -> Error {
    match result {
        Ok(v) => panic!("expected error {code}, got success: {v:?}"),
        Err(e) => {
            assert_eq!(e.code(), Some(code), "unexpected error: {e:?}");
            e
        }
    }
}

/// A symlink planted by sandbox code (/home/user/s -> /etc/shadow) resolves inside the sandbox: `user`
/// is refused, root reads the sandbox's own shadow, never the host's.
#[test]
fn files_planted_symlink_resolves_inside_the_sandbox() {
    let host_first = std::fs::read_to_string("/etc/shadow").expect("host shadow").lines().next().unwrap().to_string();
    let server = Server::start();
    let sb = server.sandbox();
    let r = sh(&sb, User::User, "ln -s /etc/shadow /home/user/s && ln -s / /home/user/root && echo planted");
    assert_lines(&r, &["planted"]);
    assert_code(sb.read_file("/home/user/s"), "permission_denied");
    for path in ["/home/user/s", "/home/user/root/etc/shadow", "/home/user/root/../../../../etc/shadow"] {
        let text = String::from_utf8(sb.as_user(User::Root).read_file(path).expect(path)).unwrap();
        assert!(text.contains("user:*:"), "{path}: not the sandbox's own shadow: {text:?}");
        assert!(!text.contains(&host_first), "{path}: the host's shadow leaked");
    }
    let stat = sb.stat("/home/user/s").unwrap();
    assert_eq!((stat.kind, stat.link_target.as_deref()), (FileKind::Symlink, Some("/etc/shadow")));
}

/// `..` in file API paths stops at the sandbox root: reads land on the sandbox's files, writes never
/// reach the host.
#[test]
fn files_dotdot_paths_stay_inside() {
    let server = Server::start();
    let sb = server.sandbox();
    let hostname = sh(&sb, User::User, "cat /etc/hostname").stdout;
    assert!(hostname.starts_with("sandlot-"), "{hostname:?}");
    let read = sb.as_user(User::Root).read_file("/../../../../../etc/hostname").unwrap();
    assert_eq!(String::from_utf8(read).unwrap(), hostname);
    let read = sb.read_file("/home/user/../../../../../../etc/hostname").unwrap();
    assert_eq!(String::from_utf8(read).unwrap(), hostname);
    let marker = format!("escape-dotdot-{}", std::process::id());
    let up = format!("/../../../../../../tmp/{marker}");
    sb.as_user(User::Root).write_file(&up, b"x").expect("writing through /..");
    assert!(!std::path::Path::new("/tmp").join(&marker).exists(), "the write reached the host's /tmp");
    assert_eq!(sb.stat(&format!("/tmp/{marker}")).unwrap().kind, FileKind::File, "it landed in the sandbox's /tmp");
    let names = |path: &str| -> Vec<String> { sb.list(path, 1).unwrap().into_iter().map(|e| e.name).collect() };
    assert_eq!(names("/home/user/../../../../.."), names("/"), "`..` above the root is not the root");
}

fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in entries {
        let mut header = tar::Header::new_gnu();
        // Written raw so `..` and absolute names survive (the builder's helpers refuse them).
        let bytes = name.as_bytes();
        header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    builder.into_inner().unwrap()
}

fn tar_link(kind: tar::EntryType, name: &str, target: &str, then: Option<(&str, &[u8])>) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_size(0);
    header.set_mode(0o777);
    builder.append_link(&mut header, name, target).unwrap();
    if let Some((name, data)) = then {
        let mut header = tar::Header::new_gnu();
        let bytes = name.as_bytes();
        header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder.append(&header, data).unwrap();
    }
    builder.into_inner().unwrap()
}

/// Tar slip: an entry named `../x` or `/x` is refused with 400 invalid_request and nothing is written,
/// neither the entry nor anything after it, inside or outside the target directory.
#[test]
fn files_tar_slip_is_refused() {
    let server = Server::start();
    let sb = server.sandbox();
    let tag = std::process::id();
    let cases = [
        (format!("../escape-slip-{tag}"), "/home/user/escape-slip"),
        (format!("../../../../../../tmp/escape-slip-{tag}"), "/tmp/escape-slip"),
        (format!("/tmp/escape-abs-{tag}"), "/tmp/escape-abs"),
    ];
    for (i, (name, _)) in cases.iter().enumerate() {
        let dest = format!("/home/user/dest{i}");
        let archive = tar_of(&[(name.as_str(), b"pwned"), ("after.txt", b"after")]);
        let err = assert_code(sb.upload_tar(&dest, archive.as_slice()), "invalid_request");
        assert_eq!(err.status(), Some(400));
    }
    let body = format!(
        r#"
import glob
print("found:", sorted(glob.glob("/home/**/escape-*-{tag}", recursive=True) + glob.glob("/tmp/**/escape-*-{tag}", recursive=True) + glob.glob("/home/**/after.txt", recursive=True)))
for i in range(3):
    d = "/home/user/dest%d" % i
    print(d, sorted(os.listdir(d)) if os.path.isdir(d) else "absent")
"#
    );
    let r = python(&sb, User::Root, &body);
    let listing = |i: usize| -> [String; 2] {
        let d = format!("/home/user/dest{i}");
        [format!("{d} []"), format!("{d} absent")]
    };
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.first().copied(), Some("found: []"), "something was written: {r:?}");
    for i in 0..3 {
        assert!(listing(i).iter().any(|l| lines.get(i + 1) == Some(&l.as_str())), "dest{i} is not empty: {r:?}");
    }
    for (name, _) in &cases {
        let base = name.rsplit('/').next().unwrap();
        assert!(!std::path::Path::new("/tmp").join(base).exists(), "{name} reached the host");
        assert!(!std::path::Path::new("/home/user").join(base).exists(), "{name} reached the host");
    }
}

/// Tar symlink-then-write (`up -> ../../..`, then `up/tmp/x`) and hard links to the sandbox's secrets
/// are refused, and nothing lands outside the target directory.
#[test]
fn files_tar_links_cannot_escape_the_target() {
    let server = Server::start();
    let sb = server.sandbox();
    let tag = std::process::id();
    let payload = format!("up/tmp/escape-sym-{tag}");
    let archive = tar_link(tar::EntryType::Symlink, "up", "../../../../../../../../", Some((&payload, b"pwned")));
    assert_code(sb.upload_tar("/home/user/d-sym", archive.as_slice()), "invalid_request");
    let archive = tar_link(tar::EntryType::Link, "shadow", "/etc/shadow", None);
    assert_code(sb.upload_tar("/home/user/d-hard", archive.as_slice()), "invalid_request");
    let archive = tar_link(tar::EntryType::Link, "shadow", "../../../etc/shadow", None);
    assert_code(sb.upload_tar("/home/user/d-hard2", archive.as_slice()), "invalid_request");
    let body = format!(
        r#"
op("stat /tmp/escape-sym-{tag}", lambda: os.stat("/tmp/escape-sym-{tag}"))
op("stat d-hard/shadow", lambda: os.stat("/home/user/d-hard/shadow"))
op("stat d-hard2/shadow", lambda: os.stat("/home/user/d-hard2/shadow"))
print("shadow links:", os.stat("/etc/shadow").st_nlink)
"#
    );
    let expected = [
        format!("stat /tmp/escape-sym-{tag}: errno=2 ENOENT"),
        "stat d-hard/shadow: errno=2 ENOENT".into(),
        "stat d-hard2/shadow: errno=2 ENOENT".into(),
        "shadow links: 1".into(),
    ];
    assert_lines(&python(&sb, User::Root, &body), &expected);
    assert!(!std::path::Path::new(&format!("/tmp/escape-sym-{tag}")).exists(), "the symlink write reached the host");
}

/// A tar entry for a character device does not produce a device node.
#[test]
fn files_tar_cannot_create_device_nodes() {
    let server = Server::start();
    let sb = server.sandbox();
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Char);
    header.set_device_major(1).unwrap();
    header.set_device_minor(1).unwrap();
    header.set_size(0);
    header.set_mode(0o666);
    builder.append_data(&mut header, "mem", std::io::empty()).unwrap();
    let archive = builder.into_inner().unwrap();
    let _ = sb.upload_tar("/home/user/dev", archive.as_slice());
    let r = python(
        &sb,
        User::Root,
        "import stat\ntry:\n    print('char device:', stat.S_ISCHR(os.stat('/home/user/dev/mem').st_mode))\nexcept FileNotFoundError:\n    print('char device: False')\n",
    );
    assert_lines(&r, &["char device: False"]);
}

/// One sandbox cannot find or read another's files: a marker written in A is nowhere in B, by search or
/// by the file API.
#[test]
fn files_of_another_sandbox_are_invisible() {
    let server = Server::start();
    let a = server.sandbox();
    let b = server.sandbox();
    let marker = format!("escape-marker-{}-{}", std::process::id(), a.id());
    for dir in ["/home/user", "/tmp", "/dev/shm"] {
        a.write_file(&format!("{dir}/{marker}"), b"secret of A").unwrap();
    }
    a.as_user(User::Root).write_file(&format!("/root/{marker}"), b"secret of A").unwrap();
    let r = sh(&b, User::Root, &format!("find / -path /proc -prune -o -name '{marker}' -print; echo searched"));
    assert_lines(&r, &["searched"]);
    for dir in ["/home/user", "/tmp", "/dev/shm", "/root"] {
        assert_code(b.as_user(User::Root).read_file(&format!("{dir}/{marker}")), "file_not_found");
    }
    // A's files are still there: the search looked in the right places.
    assert_eq!(a.read_file(&format!("/home/user/{marker}")).unwrap(), b"secret of A");
}
