//! The file API: bytes in and out, metadata, directory operations, tar transfer, permissions, and the
//! path tricks (symlinks, `..`, tar-slip) that sandbox code may plant to reach host files.

use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::path::Path;
use std::process::Command;

use sandlot_client::api::{FileKind, User};
use sandlot_client::ErrorKind;

use crate::harness::{expect_error, sh_ok, Server};

/// Deterministic pseudo-random bytes (xorshift), so large payloads are not compressible runs.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Every byte value survives a write and a read, and the sandbox sees the same bytes.
#[test]
fn write_read_round_trip_is_byte_exact() {
    let server = Server::start();
    let sb = server.sandbox();
    let data: Vec<u8> = (0..=255u8).cycle().take(4096 + 17).collect();
    let w = sb.write_file("/home/user/bytes.bin", &data).unwrap();
    assert_eq!((w.path.as_str(), w.bytes), ("/home/user/bytes.bin", data.len() as u64));
    assert_eq!(sb.read_file("/home/user/bytes.bin").unwrap(), data);
    assert_eq!(sh_ok(&sb, "wc -c < bytes.bin").trim(), data.len().to_string());
    assert_eq!(sh_ok(&sb, "head -c 4 bytes.bin | od -An -tx1").trim(), "00 01 02 03");
    // Empty files and overwrites.
    sb.write_file("/home/user/empty", b"").unwrap();
    assert_eq!(sb.read_file("/home/user/empty").unwrap(), b"");
    sb.write_file("/home/user/bytes.bin", b"short").unwrap();
    assert_eq!(sb.read_file("/home/user/bytes.bin").unwrap(), b"short");
    // Files written by the sandbox read back through the API.
    sh_ok(&sb, "printf 'from inside' > inside.txt");
    assert_eq!(sb.read_file("/home/user/inside.txt").unwrap(), b"from inside");
    sb.delete().unwrap();
}

/// A 20 MiB upload arrives intact: the sandbox's sha256 equals the host's, and it reads back equal.
#[test]
fn large_file_round_trip_20_mib() {
    let server = Server::start();
    let sb = server.sandbox();
    let data = noise(20 << 20, 0x5eed);
    let host_copy = server.temp_dir().join("big.bin");
    std::fs::write(&host_copy, &data).unwrap();
    let host_sum = Command::new("sha256sum").arg(&host_copy).output().unwrap();
    let host_sum = String::from_utf8_lossy(&host_sum.stdout).split_whitespace().next().unwrap().to_string();
    let w = sb.write_file_from("/home/user/big.bin", std::fs::File::open(&host_copy).unwrap(), None).unwrap();
    assert_eq!(w.bytes, 20 << 20);
    let inside = sh_ok(&sb, "sha256sum /home/user/big.bin");
    assert_eq!(inside.split_whitespace().next(), Some(host_sum.as_str()));
    let mut back = Vec::new();
    let n = sb.read_file_to("/home/user/big.bin", &mut back).unwrap();
    assert_eq!(n, 20 << 20);
    assert!(back == data, "read back differs");
    assert_eq!(sb.stat("/home/user/big.bin").unwrap().size, 20 << 20);
    sb.delete().unwrap();
}

/// The mode parameter sets the permission bits (an executable script runs); the default is 0644.
#[test]
fn write_mode_is_honoured() {
    let server = Server::start();
    let sb = server.sandbox();
    sb.write_file_from("/home/user/run.sh", &b"#!/bin/sh\necho ran\n"[..], Some(0o755)).unwrap();
    let st = sb.stat("/home/user/run.sh").unwrap();
    assert_eq!((st.mode, st.uid, st.kind), (0o755, 1000, FileKind::File));
    assert_eq!(sb.run(&["/home/user/run.sh"]).unwrap().stdout, "ran\n");
    sb.write_file("/home/user/plain.txt", b"x").unwrap();
    assert_eq!(sb.stat("/home/user/plain.txt").unwrap().mode, 0o644);
    sb.write_file_from("/home/user/private", &b"x"[..], Some(0o600)).unwrap();
    assert_eq!(sh_ok(&sb, "stat -c %a private").trim(), "600");
    // Written as root, owned by root.
    sb.as_user(User::Root).write_file("/root/r.txt", b"x").unwrap();
    let st = server.get(&format!("/v1/sandboxes/{}/files/stat?path=/root/r.txt&user=root", sb.id()));
    assert_eq!((st.status, st.json()["uid"].as_u64()), (200, Some(0)), "{st:?}");
    sb.delete().unwrap();
}

/// A write creates missing parent directories, owned by the writer; relative paths are under home.
#[test]
fn write_creates_parents_and_resolves_relative_paths() {
    let server = Server::start();
    let sb = server.sandbox();
    sb.write_file("/home/user/a/b/c/deep.txt", b"deep").unwrap();
    for dir in ["/home/user/a", "/home/user/a/b", "/home/user/a/b/c"] {
        let st = sb.stat(dir).unwrap();
        assert_eq!((st.kind, st.uid), (FileKind::Dir, 1000), "{dir}");
    }
    assert_eq!(sh_ok(&sb, "cat a/b/c/deep.txt"), "deep");
    let w = sb.write_file("relative.txt", b"rel").unwrap();
    assert_eq!(w.path, "/home/user/relative.txt");
    assert_eq!(sb.read_file("/home/user/relative.txt").unwrap(), b"rel");
    assert_eq!(sb.read_file("relative.txt").unwrap(), b"rel");
    sb.delete().unwrap();
}

/// list returns entries to the asked depth, sorted by path, with their kinds.
#[test]
fn list_respects_depth() {
    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "mkdir -p d/sub/deeper && echo 1 > d/x && echo 22 > d/sub/y && echo 3 > d/sub/deeper/z");
    let paths = |depth| -> Vec<(String, FileKind)> {
        sb.list("/home/user/d", depth).unwrap().into_iter().map(|e| (e.path, e.kind)).collect()
    };
    let p = |s: &str, k| (format!("/home/user/d/{s}"), k);
    assert_eq!(paths(1), [p("sub", FileKind::Dir), p("x", FileKind::File)]);
    assert_eq!(
        paths(2),
        [p("sub", FileKind::Dir), p("sub/deeper", FileKind::Dir), p("sub/y", FileKind::File), p("x", FileKind::File)]
    );
    assert_eq!(paths(16).len(), 5);
    let y = sb.list("/home/user/d/sub", 1).unwrap().into_iter().find(|e| e.name == "y").unwrap();
    assert_eq!((y.size, y.uid, y.mode), (3, 1000, 0o644));
    sb.delete().unwrap();
}

/// A listing whose answer would pass the supervisor's frame limit (10 000 entries with long paths)
/// is refused as too large; pid 1 stays up and the sandbox keeps working (it used to exit, 70).
#[test]
fn a_listing_over_the_frame_limit_is_too_large_and_pid_1_survives() {
    let server = Server::start();
    let sb = server.sandbox();
    // 9 000 entries of ~520-byte paths: about 6 MiB of answer, under the 10 000-entry cap.
    let script = "import os\nd='/home/user/' + 'd' * 250\nos.mkdir(d)\nfor i in range(9000):\n    open(os.path.join(d, '%05d' % i + 'f' * 240), 'w').close()\n";
    sb.write_file("/home/user/many.py", script.as_bytes()).unwrap();
    sh_ok(&sb, "python3 /home/user/many.py");
    let dir = format!("/home/user/{}", "d".repeat(250));
    let e = sb.list(&dir, 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TooLarge, "{e}");
    assert!(e.to_string().contains("ask for less"), "{e}");
    assert_eq!(sh_ok(&sb, "echo alive"), "alive\n");
    assert_eq!(sb.info().unwrap().state, sandlot_client::api::SandboxState::Running);
    sb.delete().unwrap();
}

/// stat tells files, directories, symlinks (with their target, not followed) and devices apart.
#[test]
fn stat_reports_kinds_and_link_targets() {
    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "printf hello > f && mkdir dir && ln -s /etc/hostname link && ln -s nowhere dangling");
    let f = sb.stat("/home/user/f").unwrap();
    assert_eq!((f.kind, f.size, f.name.as_str(), f.link_target), (FileKind::File, 5, "f", None));
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert!((now_ms - f.mtime_ms).abs() < 60_000, "mtime {} vs now {now_ms}", f.mtime_ms);
    assert_eq!(sb.stat("/home/user/dir").unwrap().kind, FileKind::Dir);
    let link = sb.stat("/home/user/link").unwrap();
    assert_eq!(link.kind, FileKind::Symlink);
    assert_eq!(link.link_target.as_deref(), Some("/etc/hostname"));
    let dangling = sb.stat("/home/user/dangling").unwrap();
    assert_eq!((dangling.kind, dangling.link_target.as_deref()), (FileKind::Symlink, Some("nowhere")));
    assert_eq!(sb.stat("/dev/null").unwrap().kind, FileKind::Other);
    let root = sb.stat("/").unwrap();
    assert_eq!((root.kind, root.path.as_str()), (FileKind::Dir, "/"));
    sb.delete().unwrap();
}

/// mkdir creates nested directories and accepts an existing one; over a file it is 409 already_exists.
#[test]
fn mkdir_creates_nested_directories() {
    let server = Server::start();
    let sb = server.sandbox();
    sb.mkdir("/home/user/m/n/o").unwrap();
    let st = sb.stat("/home/user/m/n/o").unwrap();
    assert_eq!((st.kind, st.uid), (FileKind::Dir, 1000));
    sb.mkdir("/home/user/m/n/o").unwrap();
    sb.write_file("/home/user/file", b"x").unwrap();
    expect_error(sb.mkdir("/home/user/file"), 409, "already_exists");
    expect_error(sb.mkdir("/usr/local/newdir"), 403, "permission_denied");
    assert!(sh_ok(&sb, "test -d m/n/o && echo yes").contains("yes"));
    sb.delete().unwrap();
}

/// remove deletes files and empty dirs; a non-empty dir needs `recursive` (else 409, nothing removed).
#[test]
fn remove_needs_recursive_for_non_empty_dirs() {
    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "mkdir -p tree/sub empty && touch tree/a tree/sub/b solo");
    sb.remove("/home/user/solo", false).unwrap();
    expect_error(sb.stat("/home/user/solo"), 404, "file_not_found");
    sb.remove("/home/user/empty", false).unwrap();
    let err = sb.remove("/home/user/tree", false).unwrap_err();
    assert_eq!((err.status(), err.kind()), (Some(409), ErrorKind::Conflict), "{err:?}");
    assert!(err.to_string().contains("not empty"), "{err}");
    assert_eq!(sb.list("/home/user/tree", 2).unwrap().len(), 3, "nothing removed");
    sb.remove("/home/user/tree", true).unwrap();
    expect_error(sb.stat("/home/user/tree"), 404, "file_not_found");
    expect_error(sb.remove("/home/user/tree", true), 404, "file_not_found");
    expect_error(sb.as_user(User::Root).remove("/", true), 400, "invalid_request");
    expect_error(sb.remove("/etc/passwd", false), 403, "permission_denied");
    assert!(sh_ok(&sb, "cat /etc/passwd").contains("user:x:1000"));
    sb.delete().unwrap();
}

/// move renames; onto an existing path it is 409 already_exists unless `overwrite`, and then replaces.
#[test]
fn move_refuses_to_overwrite_unless_asked() {
    let server = Server::start();
    let sb = server.sandbox();
    sb.write_file("/home/user/a", b"A").unwrap();
    sb.write_file("/home/user/b", b"B").unwrap();
    let err = expect_error(sb.rename("/home/user/a", "/home/user/b", false), 409, "already_exists");
    assert!(err.to_string().contains("/home/user/b"), "{err}");
    assert_eq!(sb.read_file("/home/user/a").unwrap(), b"A");
    assert_eq!(sb.read_file("/home/user/b").unwrap(), b"B");
    sb.rename("/home/user/a", "/home/user/b", true).unwrap();
    assert_eq!(sb.read_file("/home/user/b").unwrap(), b"A");
    expect_error(sb.read_file("/home/user/a"), 404, "file_not_found");
    sb.mkdir("/home/user/sub").unwrap();
    sb.rename("/home/user/b", "/home/user/sub/c", false).unwrap();
    assert_eq!(sh_ok(&sb, "cat sub/c"), "A");
    expect_error(sb.rename("/home/user/missing", "/home/user/x", false), 404, "file_not_found");
    sb.delete().unwrap();
}

/// File kinds are checked: reading or writing a directory, or listing a file, is 409 wrong_file_kind.
#[test]
fn wrong_file_kind_is_409() {
    let server = Server::start();
    let sb = server.sandbox();
    sb.write_file("/home/user/f", b"x").unwrap();
    expect_error(sb.read_file("/home/user"), 409, "wrong_file_kind");
    expect_error(sb.write_file("/home/user", b"x"), 409, "wrong_file_kind");
    expect_error(sb.list("/home/user/f", 1), 409, "wrong_file_kind");
    expect_error(sb.download_tar("/home/user/f", Vec::new()), 409, "wrong_file_kind");
    sb.delete().unwrap();
}

/// Writing below a regular file (`f/under`, where a directory is needed) is 409 wrong_file_kind.
#[test]
fn write_below_a_file_is_wrong_file_kind() {
    let server = Server::start();
    let sb = server.sandbox();
    sb.write_file("/home/user/f", b"x").unwrap();
    expect_error(sb.write_file("/home/user/f/under", b"x"), 409, "wrong_file_kind");
    expect_error(sb.mkdir("/home/user/f/sub"), 409, "wrong_file_kind");
    sb.delete().unwrap();
}

/// The SDK's `as_user` applies to every file operation: list, stat, remove and tar run as that user too.
#[test]
fn sdk_as_user_applies_to_every_file_operation() {
    let server = Server::start();
    let sb = server.sandbox();
    let root = sb.as_user(User::Root);
    root.write_file("/root/secret", b"s").unwrap();
    assert_eq!(root.list("/root", 1).unwrap().len(), 1);
    assert_eq!(root.stat("/root/secret").unwrap().uid, 0);
    let mut tar = Vec::new();
    root.download_tar("/root", &mut tar).unwrap();
    root.upload_tar("/root/unpacked", Cursor::new(tar)).unwrap();
    assert_eq!(root.read_file("/root/unpacked/secret").unwrap(), b"s");
    root.remove("/root/secret", false).unwrap();
    sb.delete().unwrap();
}

/// A missing path is 404 file_not_found (not the sandbox's not_found) for read, stat, list and tar.
#[test]
fn missing_path_is_404_file_not_found() {
    let server = Server::start();
    let sb = server.sandbox();
    let err = expect_error(sb.read_file("/home/user/nope"), 404, "file_not_found");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("/home/user/nope"), "{err}");
    expect_error(sb.stat("/nope/at/all"), 404, "file_not_found");
    expect_error(sb.list("/home/user/nope", 1), 404, "file_not_found");
    expect_error(sb.download_tar("/home/user/nope", Vec::new()), 404, "file_not_found");
    sb.delete().unwrap();
}

/// The sandbox user cannot read /root or write /etc (403 permission_denied); the sandbox's root can.
#[test]
fn user_cannot_read_root_home_but_root_can() {
    let server = Server::start();
    let sb = server.sandbox();
    let root = sb.as_user(User::Root);
    root.write_file("/root/secret", b"root only").unwrap();
    let err = expect_error(sb.read_file("/root/secret"), 403, "permission_denied");
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    expect_error(sb.list("/root", 1), 403, "permission_denied");
    expect_error(sb.write_file("/root/planted", b"x"), 403, "permission_denied");
    expect_error(sb.write_file("/etc/passwd", b"x"), 403, "permission_denied");
    assert_eq!(root.read_file("/root/secret").unwrap(), b"root only");
    // (Raw HTTP: the SDK's `list` drops `as_user`, see sdk_as_user_applies_to_every_file_operation.)
    let listed = server.get(&format!("/v1/sandboxes/{}/files/list?path=/root&user=root", sb.id()));
    assert_eq!(listed.status, 200, "{listed:?}");
    assert_eq!(listed.json()["entries"][0]["path"], "/root/secret");
    // The same rule holds for commands.
    let r = sb.run(&["cat", "/root/secret"]).unwrap();
    assert_eq!(r.exit_code, 1);
    assert!(r.stderr.contains("Permission denied"), "{r:?}");
    // Root may write /etc of its own sandbox.
    root.write_file("/etc/motd", b"hi").unwrap();
    assert_eq!(sh_ok(&sb, "cat /etc/motd"), "hi");
    sb.delete().unwrap();
}

/// Nobody, not even the sandbox's root, can write the read-only /usr through the file API.
#[test]
fn usr_is_read_only_through_the_file_api() {
    let server = Server::start();
    let sb = server.sandbox();
    let err = expect_error(sb.as_user(User::Root).write_file("/usr/bin/planted", b"x"), 403, "permission_denied");
    assert!(err.to_string().contains("/usr/bin/planted"), "{err}");
    expect_error(sb.as_user(User::Root).remove("/usr/bin/ls", false), 403, "permission_denied");
    assert!(!Path::new("/usr/bin/planted").exists());
    sb.delete().unwrap();
}

fn build_tar(entries: &[(&str, &[u8], u32)], symlinks: &[(&str, &str)], dirs: &[&str]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for d in dirs {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, d, std::io::empty()).unwrap();
    }
    for (path, data, mode) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(*mode);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, *data).unwrap();
    }
    for (path, target) in symlinks {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        b.append_link(&mut h, path, target).unwrap();
    }
    b.into_inner().unwrap()
}

/// A tar entry with a name the tar crate would refuse to write (`..`, absolute): raw header bytes.
fn raw_entry(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
    let mut h = tar::Header::new_old();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    b.append(&h, data).unwrap();
}

/// A tar upload unpacks files, modes, directories and symlinks; a tar download returns the same tree.
#[test]
fn tar_upload_then_download_round_trips() {
    let server = Server::start();
    let sb = server.sandbox();
    let big = noise(300_000, 7);
    let archive = build_tar(
        &[
            ("README.md", b"# project\n", 0o644),
            ("bin/tool.sh", b"#!/bin/sh\necho tool\n", 0o755),
            ("src/deep/data.bin", &big, 0o600),
        ],
        &[("link-to-readme", "README.md")],
        &["empty-dir"],
    );
    let w = sb.upload_tar("/home/user/proj", Cursor::new(&archive)).unwrap();
    assert_eq!(w.path, "/home/user/proj");
    assert_eq!(w.entries, Some(5));
    assert_eq!(w.bytes, archive.len() as u64);
    assert_eq!(sb.run(&["/home/user/proj/bin/tool.sh"]).unwrap().stdout, "tool\n");
    assert_eq!(
        sh_ok(&sb, "cd proj && stat -c '%n %a %U' README.md bin/tool.sh src/deep/data.bin"),
        "README.md 644 user\nbin/tool.sh 755 user\nsrc/deep/data.bin 600 user\n"
    );
    assert_eq!(sh_ok(&sb, "readlink proj/link-to-readme"), "README.md\n");
    assert_eq!(sb.stat("/home/user/proj/empty-dir").unwrap().kind, FileKind::Dir);

    let mut out = Vec::new();
    let n = sb.download_tar("/home/user/proj", &mut out).unwrap();
    assert_eq!(n, out.len() as u64);
    let mut files = BTreeMap::new();
    let mut links = BTreeMap::new();
    let mut ar = tar::Archive::new(Cursor::new(out));
    for entry in ar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().trim_start_matches("./").to_string();
        match entry.header().entry_type() {
            tar::EntryType::Regular => {
                let mode = entry.header().mode().unwrap() & 0o7777;
                let mut data = Vec::new();
                entry.read_to_end(&mut data).unwrap();
                files.insert(path, (data, mode));
            }
            tar::EntryType::Symlink => {
                links.insert(path, entry.link_name().unwrap().unwrap().to_string_lossy().into_owned());
            }
            _ => {}
        }
    }
    assert_eq!(files.len(), 3, "{:?}", files.keys());
    assert_eq!(files["README.md"], (b"# project\n".to_vec(), 0o644));
    assert_eq!(files["bin/tool.sh"].1, 0o755);
    assert!(files["src/deep/data.bin"].0 == big);
    assert_eq!(links["link-to-readme"], "README.md");
    sb.delete().unwrap();
}

/// Tar-slip: entries named `../evil` or `/etc/evil` are refused with 400 and nothing lands anywhere.
#[test]
fn tar_slip_entries_are_refused() {
    let server = Server::start();
    let sb = server.sandbox();
    let root = sb.as_user(User::Root);
    for (evil, escaped) in [
        ("../evil-parent", "/home/user/evil-parent"),
        ("../../../../../../etc/evil-deep", "/etc/evil-deep"),
        ("/etc/evil-abs", "/etc/evil-abs"),
        ("ok/../../evil-mid", "/home/user/evil-mid"),
    ] {
        let mut b = tar::Builder::new(Vec::new());
        raw_entry(&mut b, evil, b"pwned");
        raw_entry(&mut b, "after.txt", b"after");
        let archive = b.into_inner().unwrap();
        // As root, so that only the path check (not permissions) can stop it.
        let err = expect_error(root.upload_tar("/home/user/up", Cursor::new(archive)), 400, "invalid_request");
        assert!(err.to_string().contains("evil"), "{evil}: {err}");
        expect_error(root.stat(escaped), 404, "file_not_found");
        let inside = sh_ok(&sb, "find / -xdev -name 'evil-*' 2>/dev/null; ls -A /home/user/up 2>/dev/null; true");
        assert_eq!(inside, "", "{evil}: written inside the sandbox");
    }
    // Nothing reached the host either: not its /etc, not the state dir outside the layer.
    for name in ["/etc/evil-deep", "/etc/evil-abs"] {
        assert!(!Path::new(name).exists(), "{name} exists on the host");
    }
    let found = Command::new("find").arg(server.temp_dir()).args(["-name", "evil-*"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&found.stdout), "", "on the host");
    sb.delete().unwrap();
}

/// Tar-slip through a symlink: a link entry pointing out, then a file "through" it, does not escape.
#[test]
fn tar_symlink_then_file_through_it_does_not_escape() {
    let server = Server::start();
    let sb = server.sandbox();
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "outside", "/tmp").unwrap();
    raw_entry(&mut b, "outside/escaped.txt", b"pwned");
    let result = sb.upload_tar("/home/user/up", Cursor::new(b.into_inner().unwrap()));
    expect_error(result, 400, "invalid_request");
    assert_eq!(sh_ok(&sb, "ls -A /tmp"), "", "file written through the link");
    sb.delete().unwrap();
}

/// A symlink planted by sandbox code at /etc/shadow reads the sandbox's own shadow, never the host's.
#[test]
fn symlink_to_etc_shadow_reads_the_sandboxs_own() {
    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "ln -s /etc/shadow /home/user/shadow-link && ln -s ../../etc/shadow /home/user/rel-link");
    let host_first = std::fs::read_to_string("/etc/shadow").unwrap().lines().next().unwrap().to_string();
    let root = sb.as_user(User::Root);
    for link in ["/home/user/shadow-link", "/home/user/rel-link"] {
        let text = String::from_utf8(root.read_file(link).unwrap()).unwrap();
        assert!(text.contains("user:*:"), "{link}: {text}");
        assert_ne!(text.lines().next().unwrap(), host_first, "{link} read the host's shadow");
        // The sandbox user may not read it at all (0640 root).
        expect_error(sb.read_file(link), 403, "permission_denied");
    }
    // The tar download archives the link itself, not its target.
    let mut out = Vec::new();
    root.download_tar("/home/user", &mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(!text.contains(&host_first) && !text.contains("user:*:"), "tar followed the link");
    sb.delete().unwrap();
}

/// `/proc/1/root` inside a sandbox is the sandbox's root: a link through it reads sandbox files.
#[test]
fn proc_1_root_symlink_stays_in_the_sandbox() {
    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "ln -s /proc/1/root/etc/passwd pw-link; ln -s /proc/self/root/etc/hostname host-link");
    let root = sb.as_user(User::Root);
    let passwd = String::from_utf8(root.read_file("/home/user/pw-link").unwrap()).unwrap();
    assert!(passwd.contains("user:x:1000:1000:sandbox user"), "{passwd}");
    assert_ne!(passwd, std::fs::read_to_string("/etc/passwd").unwrap());
    let host = String::from_utf8(root.read_file("/home/user/host-link").unwrap()).unwrap();
    assert!(host.starts_with("sandlot-"), "{host}");
    sb.delete().unwrap();
}

/// `..` in API paths and symlinked directories resolve inside the sandbox: writes land in its /etc.
#[test]
fn dotdot_and_symlinked_dirs_stay_in_the_sandbox() {
    let server = Server::start();
    let sb = server.sandbox();
    let root = sb.as_user(User::Root);
    let tag = sb.id().to_string();
    let name1 = format!("sandlot-e2e-dotdot-{tag}");
    let name2 = format!("sandlot-e2e-rel-{tag}");
    let name3 = format!("sandlot-e2e-link-{tag}");
    root.write_file(&format!("/home/user/../../../../../etc/{name1}"), b"1").unwrap();
    root.write_file(&format!("../../../../etc/{name2}"), b"2").unwrap();
    sh_ok(&sb, "ln -s / /home/user/rootlink");
    root.write_file(&format!("/home/user/rootlink/etc/{name3}"), b"3").unwrap();
    for (name, body) in [(&name1, "1"), (&name2, "2"), (&name3, "3")] {
        assert_eq!(sh_ok(&sb, &format!("cat /etc/{name}")), body);
        assert!(!Path::new("/etc").join(name).exists(), "{name} landed on the host");
    }
    // Reading back through `..` also stays inside.
    let hostname = root.read_file("/home/user/../../etc/hostname").unwrap();
    assert!(String::from_utf8_lossy(&hostname).starts_with("sandlot-"));
    sb.delete().unwrap();
}

/// An upload announced as larger than the server's limit (1 GiB by default) is 413 too_large at once.
#[test]
fn oversized_upload_is_413() {
    let server = Server::start();
    let sb = server.sandbox();
    let request = format!(
        "PUT /v1/sandboxes/{}/files?path=/home/user/huge HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Authorization: Bearer {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        sb.id(),
        server.admin_key(),
        (1u64 << 30) + 1
    );
    let r = server.raw_request(request.as_bytes());
    let message = r.assert_error(413, "too_large");
    assert!(message.contains("limit"), "{message}");
    expect_error(sb.stat("/home/user/huge"), 404, "file_not_found");
    sb.delete().unwrap();
}
