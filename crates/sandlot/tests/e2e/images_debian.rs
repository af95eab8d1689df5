//! A real distribution as an image: Debian 12 (bookworm) built by `mmdebstrap` from Debian's archive
//! (`scripts/debian-image.sh`, which `scripts/test.sh` runs and names in `SANDLOT_DEBIAN_IMAGE`),
//! imported as a root filesystem tarball the way users import theirs. Only a real distribution has
//! merged-/usr symlinks, Debian's own accounts, a trust store with hashed links, its own python and
//! pip: the catalogue checks each works in a sandbox, and that the image is shared, not copied.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, ExecRequest, NetworkSpec, User};
use sandlot_client::Sandbox;

use crate::harness::{sh, Server};
use crate::network::{package_index, tls_upstream, wheel, SECRET};

const IMAGE: &str = "debian:bookworm";

/// The tarball `scripts/debian-image.sh` built. Without it the tests fail (never pass unchecked).
fn debian_tarball() -> PathBuf {
    let how = "run `export SANDLOT_DEBIAN_IMAGE=$(sudo scripts/debian-image.sh)` (it builds the tarball once, \
               with mmdebstrap from Debian's archive, and prints its path; scripts/test.sh does this)";
    let path = match std::env::var_os("SANDLOT_DEBIAN_IMAGE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!("SANDLOT_DEBIAN_IMAGE is not set: {how}"),
    };
    assert!(path.is_file(), "SANDLOT_DEBIAN_IMAGE={} is not a file: {how}", path.display());
    path
}

/// Imports the Debian tarball into `server` as [`IMAGE`] (admin tenant) and returns the import's time.
pub(crate) fn import_debian(server: &Server) -> Duration {
    let tarball = debian_tarball();
    let t0 = Instant::now();
    let file = File::open(&tarball).unwrap_or_else(|e| panic!("opening {}: {e}", tarball.display()));
    let images =
        server.client().import_image(file, Some(IMAGE), false).unwrap().wait().unwrap_or_else(|e| {
            panic!("importing {}: {e}\n--- server log ---\n{}", tarball.display(), server.log_text())
        });
    assert_eq!(images.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), [IMAGE], "{images:?}");
    t0.elapsed()
}

fn debian(network: Option<NetworkSpec>) -> CreateSandbox {
    CreateSandbox { image: Some(IMAGE.into()), network, ..Default::default() }
}

/// Runs `script` with `/bin/sh -c` as `user`, asserting exit 0; returns stdout.
#[track_caller]
fn run_as(sb: &Sandbox, user: User, script: &str) -> String {
    let r = sb.exec(&ExecRequest { user: Some(user), timeout_s: Some(120.0), ..sh(script) }).unwrap();
    assert_eq!((r.status.as_str(), r.exit_code), ("exited", 0), "{script}: {r:?}");
    r.stdout
}

/// Bytes of the regular files under `dir` (links are not followed).
fn tree_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for ent in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())).flatten() {
        let meta = ent.metadata().unwrap();
        if meta.is_dir() {
            total += tree_bytes(&ent.path());
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    total
}

/// Median wall-clock time of `create` and the first command's output, over `n` sandboxes of `spec`.
fn create_to_first_output(server: &Server, spec: &CreateSandbox, n: usize) -> (Duration, Vec<Sandbox>) {
    let mut times = Vec::new();
    let mut sandboxes = Vec::new();
    for _ in 0..n {
        let t0 = Instant::now();
        let sb = server.create(spec);
        let r = sb.run(&["echo", "ready"]).unwrap();
        times.push(t0.elapsed());
        assert_eq!(r.stdout, "ready\n", "{r:?}");
        sandboxes.push(sb);
    }
    times.sort();
    (times[n / 2], sandboxes)
}

/// The image's own userland runs, not the host's: its python3 (from its /usr, whose package database
/// and os-release are Debian's minbase, without the host's extra packages), its /etc/passwd with
/// Debian's system accounts plus sandlot's `user` (uid 1000, the default identity), and root may
/// change files under /usr (copy-on-write, in the sandbox's own layer).
#[test]
fn debian_image_runs_its_own_python_with_its_own_accounts() {
    // The host has Debian's docker-registry (scripts/deps.sh installs it); the image must not.
    assert!(Path::new("/usr/bin/docker-registry").exists(), "the host lacks docker-registry: run scripts/deps.sh");
    let server = Server::start();
    import_debian(&server);
    let sb = server.create(&debian(None));

    let out = run_as(
        &sb,
        User::User,
        "python3 -c 'import sys; print(sys.executable); print(sys.version)'; \
         . /usr/lib/os-release; echo \"$ID $VERSION_CODENAME\"; \
         dpkg-query -W -f '${Package}\\n' ca-certificates python3-pip; \
         test -e /usr/bin/docker-registry && echo host-usr || echo own-usr; \
         readlink /bin /lib /sbin",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "/usr/bin/python3", "{out}");
    assert!(lines[1].starts_with("3.11."), "bookworm's python is 3.11: {out}");
    assert_eq!(
        lines[2..],
        ["debian bookworm", "ca-certificates", "python3-pip", "own-usr", "usr/bin", "usr/lib", "usr/sbin"],
        "{out}"
    );

    let passwd = sb.read_file("/etc/passwd").unwrap();
    let passwd = String::from_utf8(passwd).unwrap();
    let names: Vec<&str> = passwd.lines().filter_map(|l| l.split(':').next()).collect();
    for debian_account in ["root", "daemon", "_apt", "nobody"] {
        assert!(names.contains(&debian_account), "Debian's {debian_account} is gone from /etc/passwd:\n{passwd}");
    }
    let users: Vec<&str> = passwd.lines().filter(|l| l.starts_with("user:")).collect();
    assert_eq!(users.len(), 1, "{passwd}");
    assert!(users[0].starts_with("user:x:1000:1000:"), "{passwd}");

    assert_eq!(
        run_as(&sb, User::User, "id -u; id -un; echo $HOME; touch ~/mine && echo ok"),
        "1000\nuser\n/home/user\nok\n"
    );
    // Files of Debian's other accounts keep their owners (mapped like root's), and their modes hold.
    assert_eq!(
        run_as(&sb, User::User, "stat -c '%U %G %a' /var/cache/apt/archives/partial /etc/shadow; cat /etc/shadow 2>/dev/null || echo unreadable"),
        "_apt root 700\nroot shadow 640\nunreadable\n"
    );
    // The image's files belong to the sandbox's root: user may not write them, root may.
    let denied = sb.exec(&sh("touch /usr/lib/os-release")).unwrap();
    assert_ne!(denied.exit_code, 0, "user wrote an image file: {denied:?}");
    assert_eq!(
        run_as(
            &sb,
            User::Root,
            "touch /usr/lib/os-release /usr/local/bin/new-tool && id -u && stat -c %u /usr/local/bin/new-tool"
        ),
        "0\n0\n"
    );
    // Only this sandbox saw the change.
    let other = server.create(&debian(None));
    assert_eq!(run_as(&other, User::User, "test -e /usr/local/bin/new-tool || echo absent"), "absent\n");
    sb.delete().unwrap();
    other.delete().unwrap();
}

/// Sandboxes of the image start as fast as `host` ones and copy nothing of it: the image root is the
/// overlay's lower layer (shared by every sandbox), so each sandbox's writable layer holds only what
/// sandlot generates there (a few /etc files), not the image's 230 MB.
#[test]
fn debian_sandboxes_start_like_host_ones_and_share_the_image() {
    let server = Server::start();
    let import = import_debian(&server);
    let (host, host_boxes) = create_to_first_output(&server, &CreateSandbox::default(), 3);
    let (image, image_boxes) = create_to_first_output(&server, &debian(None), 3);
    eprintln!("import {import:?}; create to first output, median of 3: host {host:?}, {IMAGE} {image:?}");
    // The same work either way (an overlay over a read-only lower layer); the allowance is for a
    // machine shared with other tests, not for a copy (which would take seconds for this image).
    assert!(
        image <= host * 2 + Duration::from_millis(100),
        "{IMAGE} sandboxes start in {image:?}, host ones in {host:?}"
    );
    for sb in &image_boxes {
        run_as(sb, User::User, "python3 -c 'print(1)' >/dev/null");
        let upper = server.layer_dir(sb.id()).join("upper");
        let bytes = tree_bytes(&upper);
        eprintln!("sandbox {}: {bytes} bytes in its writable layer", sb.id());
        assert!(bytes < 1 << 20, "sandbox {} holds {bytes} bytes of its own in {}", sb.id(), upper.display());
        assert!(!upper.join("usr").exists(), "the image's /usr was copied into {}", upper.display());
    }
    for sb in host_boxes.iter().chain(&image_boxes) {
        sb.delete().unwrap();
    }
}

/// The brokering CA is in the image's own trust store (Debian's /etc/ssl/certs/ca-certificates.crt,
/// beside Debian's roots), so python's default TLS context trusts a brokered host even without the
/// TLS variables sandlot sets; pip installs from a package index the sandbox's policy allows, and the
/// same pip fails when the policy denies it (the default).
#[test]
fn debian_image_trusts_the_broker_and_pip_installs_from_an_allowed_index() {
    let upstream = tls_upstream("tls.test");
    let index = package_index(wheel("tinypkg", "tinypkg", "VALUE = 'tiny'\n"));
    let server = Server::builder()
        .loopback_only()
        .resolve("tls.test=127.0.0.1")
        .resolve("pypi.test=127.0.0.1")
        .extra_ca(&upstream.dir.path().join("ca.pem"))
        .start();
    import_debian(&server);

    let spec: NetworkSpec = serde_json::from_str(&format!(
        r#"{{"mode":"allowlist","allow":["tls.test","pypi.test"],"rules":{{"tls.test":{{"headers":{{"authorization":"Bearer {SECRET}"}}}}}}}}"#
    ))
    .unwrap();
    let sb = server.create(&debian(Some(spec)));

    let server_ca = std::fs::read_to_string(server.state_dir().join("ca/ca.pem")).unwrap();
    let bundle = String::from_utf8(sb.read_file("/etc/ssl/certs/ca-certificates.crt").unwrap()).unwrap();
    assert!(bundle.contains(server_ca.trim()), "the brokering CA is not in Debian's trust bundle");
    let roots = bundle.matches("-----BEGIN CERTIFICATE-----").count();
    assert!(roots > 100, "Debian's own roots are gone from the bundle ({roots} certificates)");
    assert_eq!(String::from_utf8(sb.read_file("/etc/sandlot/ca.pem").unwrap()).unwrap(), server_ca);

    let port = upstream.port;
    let fetch = format!(
        "python3 -c 'import ssl, urllib.request; ctx = ssl.create_default_context(); \
         print(urllib.request.urlopen(\"https://tls.test:{port}/\", context=ctx, timeout=20).read().decode(), end=\"\")'"
    );
    assert_eq!(run_as(&sb, User::User, &fetch), "authorized\n");
    // Without sandlot's variables OpenSSL falls back to Debian's default, /usr/lib/ssl/cert.pem, a link
    // to the bundle: the image's own store must hold the CA.
    let bare = format!("env -u SSL_CERT_FILE -u REQUESTS_CA_BUNDLE -u CURL_CA_BUNDLE -u PIP_CERT {fetch}");
    assert_eq!(run_as(&sb, User::User, &bare), "authorized\n");

    let pip = format!(
        "python3 -m pip install --quiet --no-cache-dir --user --break-system-packages --disable-pip-version-check \
         --retries 0 --timeout 5 --trusted-host pypi.test --index-url http://pypi.test:{index}/simple tinypkg"
    );
    run_as(&sb, User::User, &pip);
    assert_eq!(
        run_as(&sb, User::User, "python3 -c 'import tinypkg; print(tinypkg.VALUE); print(tinypkg.__file__)'"),
        "tiny\n/home/user/.local/lib/python3.11/site-packages/tinypkg/__init__.py\n"
    );

    let denied = server.create(&debian(None));
    let r = denied.exec(&ExecRequest { timeout_s: Some(120.0), ..sh(&pip) }).unwrap();
    assert_ne!(r.exit_code, 0, "pip reached the index without an allow: {r:?}");
    let r = denied.exec(&sh("python3 -c 'import tinypkg'")).unwrap();
    assert_ne!(r.exit_code, 0, "tinypkg is installed without an allow: {r:?}");
    sb.delete().unwrap();
    denied.delete().unwrap();
}
