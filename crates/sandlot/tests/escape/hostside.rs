//! Host-side code on sandbox-written trees: the daemon (host root) copies, re-owns and rewrites a
//! sandbox's layer on fork, create-from-snapshot and resume. Everything in that layer is the sandbox's
//! doing, so each test plants what a hostile root would (symlinks to host files, a tree deeper than
//! PATH_MAX) and asserts the daemon neither wrote through it nor failed on it.

use std::fs;
use std::os::unix::fs::MetadataExt;

use sandlot_client::api::User;

use crate::common::tar_header as header;
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

/// A root filesystem of Debian's static busybox as `/bin/sh`, plus `extra` entries appended as given.
fn busybox_layer(extra: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
    let busybox = fs::read("/bin/busybox").expect("Debian's busybox-static at /bin/busybox");
    let mut b = tar::Builder::new(Vec::new());
    b.append_data(&mut header(tar::EntryType::Directory, 0o755, 0), "bin", std::io::empty()).unwrap();
    b.append_data(&mut header(tar::EntryType::Regular, 0o755, busybox.len() as u64), "bin/busybox", &busybox[..])
        .unwrap();
    b.append_link(&mut header(tar::EntryType::Symlink, 0o777, 0), "bin/sh", "busybox").unwrap();
    extra(&mut b);
    b.into_inner().unwrap()
}

/// An imported layer is the host's to unpack, as host root: one that links a name to a host directory
/// and writes a file through it, or hard-links a host file, is refused naming the entry, with the host
/// untouched; a device node is dropped, and a setuid-root file is owned on the host by an id nobody has.
#[test]
fn an_imported_layer_writes_nothing_through_its_links_and_gains_no_host_privilege() {
    let victim = tempfile::Builder::new().prefix("sandlot-victim-").tempdir().expect("tempdir");
    fs::write(victim.path().join("secret"), "host file\n").unwrap();
    let server = Server::start();
    let client = server.client();
    let import = |name: &str, layer: Vec<u8>| {
        client.import_image(std::io::Cursor::new(layer), Some(name), false).unwrap().wait()
    };
    let untouched = || {
        let names: Vec<_> = fs::read_dir(victim.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["secret"], "the layer wrote into the host directory");
        let m = fs::metadata(victim.path().join("secret")).unwrap();
        assert_eq!((m.nlink(), fs::read_to_string(victim.path().join("secret")).unwrap().as_str()), (1, "host file\n"));
    };

    let through = busybox_layer(|b| {
        b.append_link(&mut header(tar::EntryType::Symlink, 0o777, 0), "evil", victim.path()).unwrap();
        b.append_data(&mut header(tar::EntryType::Regular, 0o644, 6), "evil/owned", &b"owned\n"[..]).unwrap();
    });
    let err = import("hostile:1", through).unwrap_err();
    assert!(err.to_string().contains("evil/owned"), "the refusal names the entry: {err}");
    untouched();
    let linked = busybox_layer(|b| {
        b.append_link(&mut header(tar::EntryType::Link, 0o644, 0), "stolen", victim.path().join("secret")).unwrap();
    });
    let err = import("hostile:2", linked).unwrap_err();
    assert!(err.to_string().contains("stolen"), "the refusal names the entry: {err}");
    untouched();

    let privileged = busybox_layer(|b| {
        b.append_data(&mut header(tar::EntryType::Regular, 0o4755, 4), "bin/suid", &b"#!x\n"[..]).unwrap();
        let mut dev = header(tar::EntryType::Char, 0o666, 0);
        dev.set_device_major(1).unwrap();
        dev.set_device_minor(1).unwrap();
        b.append_data(&mut dev, "mem", std::io::empty()).unwrap();
    });
    import("hostile:3", privileged).unwrap();
    let sb = client
        .create(&sandlot_client::api::CreateSandbox { image: Some("hostile:3".into()), ..Default::default() })
        .unwrap();
    let r = sh(&sb, User::Root, "test -e /mem && echo has-mem || echo no-mem; stat -c '%u %a' /bin/suid");
    assert_eq!(r.stdout, "no-mem\n0 4755\n", "{r:?}");
    // On the host the image's root is an id no host user and no sandbox slot has.
    let chains = format!("/proc/{}/root{}/layers/images/chains", server.pid(), server.state_dir().display());
    let owners: Vec<u32> = fs::read_dir(&chains)
        .unwrap()
        .map(|c| fs::symlink_metadata(c.unwrap().path().join("bin/suid")).unwrap().uid())
        .collect();
    assert_eq!(owners, [0x0FFF_0000], "the setuid file's owner on the host");
}
