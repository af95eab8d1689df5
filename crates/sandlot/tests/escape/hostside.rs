//! Host-side code on sandbox-written trees: the daemon (host root) copies, re-owns and rewrites a
//! sandbox's layer on fork, create-from-snapshot and resume. Everything in that layer is the sandbox's
//! doing, so each test plants what a hostile root would (symlinks to host files, a tree deeper than
//! PATH_MAX) and asserts the daemon neither wrote through it nor failed on it.

use std::fs;
use std::os::unix::fs::MetadataExt;

use sandlot_client::api::User;

use crate::probe::sh;
use crate::server::Server;

/// Fork after sandbox root replaced `/etc/hosts` and `/etc/hostname` with symlinks to host files: the
/// daemon's rewrite of the copy's identity files must replace the links, not write (and chown) the
/// host files as host root. Before the fix, the host files held the fork's hosts table, owned by the
/// fork's root.
#[test]
fn fork_does_not_write_through_planted_etc_symlinks() {
    let victim = tempfile::Builder::new().prefix("sandlot-victim-").tempdir().expect("tempdir");
    let (hosts, hostname) = (victim.path().join("hosts"), victim.path().join("hostname"));
    fs::write(&hosts, "host file: hosts\n").unwrap();
    fs::write(&hostname, "host file: hostname\n").unwrap();

    let server = Server::start();
    let sb = server.sandbox();
    let plant = format!(
        "ln -sf {} /etc/hosts && ln -sf {} /etc/hostname && ls -l /etc/hosts /etc/hostname",
        hosts.display(),
        hostname.display()
    );
    let r = sh(&sb, User::Root, &plant);
    assert_eq!(r.exit_code, 0, "planting the links: {r:?}");

    let copy = sb.fork(1).unwrap_or_else(|e| panic!("fork: {e:?}\n{}", server.log_text())).remove(0);

    for (path, body) in [(&hosts, "host file: hosts\n"), (&hostname, "host file: hostname\n")] {
        assert_eq!(fs::read_to_string(path).unwrap(), body, "{} was written through the link", path.display());
        let m = fs::metadata(path).unwrap();
        assert_eq!((m.uid(), m.gid()), (0, 0), "{} was chowned through the link", path.display());
    }
    // The copy got real files of its own, with its own name, owned by its root.
    let r = sh(&copy, User::Root, "stat -c '%F %U' /etc/hosts /etc/hostname; cat /etc/hostname; hostname");
    let out: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(out[..2], ["regular file root", "regular file root"], "{r:?}");
    assert_eq!(out[2], out[3], "the copy's /etc/hostname names the copy: {r:?}");
    // The source still has its links (they point at nothing it can reach).
    let r = sh(&sb, User::Root, "stat -c %F /etc/hosts");
    assert_eq!(r.stdout.trim(), "symbolic link", "{r:?}");
}

/// Fork of a layer holding a directory chain deeper than PATH_MAX: re-owning the copy's files for its
/// own host id range must walk any depth (before the fix: the path-based walk failed with
/// ENAMETOOLONG and the fork was refused) and leave the bottom file owned by the copy's `user`.
#[test]
fn fork_reowns_a_tree_deeper_than_path_max() {
    let server = Server::start();
    let sb = server.sandbox();
    let build = r#"
import os
os.chdir("/home/user")
for _ in range(3000):
    os.mkdir("d")
    os.chdir("d")
open("bottom", "w").write("deep\n")
print("built", flush=True)
"#;
    let r = sb.run(&["python3", "-c", build]).unwrap();
    assert_eq!(r.stdout.trim(), "built", "{r:?}");

    let copy = sb.fork(1).unwrap_or_else(|e| panic!("fork of a deep tree: {e:?}\n{}", server.log_text())).remove(0);

    let check = r#"
import os
os.chdir("/home/user")
for _ in range(3000):
    os.chdir("d")
print(open("bottom").read().strip(), os.stat("bottom").st_uid, flush=True)
open("bottom", "a").write("copy\n")
print("writable", flush=True)
"#;
    let r = copy.run(&["python3", "-c", check]).unwrap();
    assert_eq!(r.stdout, "deep 1000\nwritable\n", "{r:?}");
}
