//! Image builds end to end: a Dockerfile over an imported busybox image builds into an image whose
//! sandboxes see its files, owners, env and workdir; the step cache hits on an unchanged rebuild
//! (no sandbox at all), misses from a changed COPY on, and not at all with `no_cache`; a failing RUN
//! names its line and shows its output, storing nothing and leaving no build sandbox; RUN's network is
//! denied unless `allow` names the host; another tenant cannot build FROM your image; a snapshot is
//! published as an image that boots with its files.

use std::io::{BufRead, BufReader, Cursor, Write};
use std::net::TcpListener;
use std::time::Instant;

use sandlot_client::api::{BuildEvent, BuildImage, CreateSandbox, ExecRequest, SandboxState, User};
use sandlot_client::Client;

use crate::common::tar_header as header;
use crate::harness::{expect_error, Server};

/// The busybox root filesystem with `/etc/motd` (for a RUN to delete).
fn busybox_rootfs() -> Vec<u8> {
    crate::common::busybox_rootfs(&[("etc/motd", b"base motd\n")], &[])
}

fn context(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        b.append_data(&mut header(tar::EntryType::Regular, 0o644, data.len() as u64), path, data.as_bytes()).unwrap();
    }
    b.into_inner().unwrap()
}

fn tenant(server: &Server, name: &str) -> Client {
    Client::new(server.url(), server.client().create_key(name).unwrap().key)
}

/// A tenant with the busybox image imported as `bb`.
fn with_busybox(server: &Server, name: &str) -> Client {
    let c = tenant(server, name);
    c.import_image(Cursor::new(busybox_rootfs()), Some("bb"), false).unwrap().wait().unwrap();
    c
}

fn request(name: &str) -> BuildImage {
    BuildImage { name: name.into(), ..Default::default() }
}

/// Every event of a build, in order.
fn build(c: &Client, ctx: Vec<u8>, req: &BuildImage) -> Vec<BuildEvent> {
    let events: Vec<BuildEvent> = c.build_image(Cursor::new(ctx), req).unwrap().map(|e| e.unwrap()).collect();
    assert!(
        matches!(events.last(), Some(BuildEvent::Done { .. } | BuildEvent::Error { .. })),
        "the stream ends with its result: {events:?}"
    );
    events
}

fn succeeded(events: &[BuildEvent]) {
    assert!(matches!(events.last(), Some(BuildEvent::Done { .. })), "the build failed: {events:?}");
}

/// `cached` of each step, in order.
fn cached(events: &[BuildEvent]) -> Vec<bool> {
    events.iter().filter_map(|e| if let BuildEvent::Step { cached, .. } = e { Some(*cached) } else { None }).collect()
}

fn sandbox_creates(server: &Server, tenant: &str) -> usize {
    let audit = server.client().audit(None, Some(1000)).unwrap();
    audit.iter().filter(|a| a.tenant == tenant && a.action == "sandbox.create").count()
}

fn sh(script: &str) -> ExecRequest {
    ExecRequest { argv: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]), ..Default::default() }
}

/// A Dockerfile of ten steps after FROM.
const DOCKERFILE: &str = r#"FROM bb
ARG GREETING=hello
ENV APP_HOME=/app MODE=test
WORKDIR /app
COPY --chown=1000:1000 app/ /app/
COPY conf.txt /etc/conf.txt
# a comment, and a continued RUN
RUN echo "$GREETING from the build" > /app/built.txt \
    && /bin/busybox rm /etc/motd && echo ran
USER 1000
LABEL org.example.test=yes
EXPOSE 8080
CMD ["/bin/sh", "-c", "cat /app/hello.txt"]
"#;

fn app_context(conf: &str) -> Vec<u8> {
    context(&[("Dockerfile", DOCKERFILE), ("app/hello.txt", "hi from the context\n"), ("conf.txt", conf)])
}

/// The image's sandbox sees the copied files with their owners, the RUN's file and deletion, the
/// ENV and the WORKDIR; the config records USER, LABEL, EXPOSE and CMD. An unchanged rebuild is a
/// cache hit on every step and starts no sandbox; a changed copied file misses from its step on;
/// `no_cache` misses everything.
#[test]
fn a_dockerfile_builds_an_image_and_its_steps_are_cached() {
    let server = Server::start();
    let alice = with_busybox(&server, "alice");
    let first = build(
        &alice,
        app_context("v=1\n"),
        &BuildImage { build_args: [("GREETING".to_string(), "howdy".to_string())].into(), ..request("app:1") },
    );
    succeeded(&first);
    assert!(
        first.iter().any(|e| matches!(e, BuildEvent::Output { data, .. } if data.contains("ran"))),
        "RUN output is streamed: {first:?}"
    );
    assert!(first
        .iter()
        .any(|e| matches!(e, BuildEvent::Step { line: 8, instruction, .. } if instruction.starts_with("RUN echo"))));
    let image = alice.image("app:1").unwrap();
    assert_eq!(image.config.user.as_deref(), Some("1000"));
    assert_eq!(image.config.working_dir.as_deref(), Some("/app"));
    assert_eq!(image.config.exposed_ports, ["8080/tcp"]);
    assert_eq!(image.config.labels.get("org.example.test").map(String::as_str), Some("yes"));
    assert_eq!(
        image.config.cmd.as_deref(),
        Some(&["/bin/sh".to_string(), "-c".into(), "cat /app/hello.txt".into()][..])
    );
    assert!(image.config.env.contains(&"MODE=test".to_string()), "{:?}", image.config.env);

    let sb = alice.create(&CreateSandbox { image: Some("app:1".into()), ..Default::default() }).unwrap();
    let r = sb
        .exec(&sh("pwd; cat hello.txt built.txt /etc/conf.txt; /bin/busybox stat -c '%u:%g %n' hello.txt built.txt; \
             echo $MODE $APP_HOME; test -e /etc/motd && echo motd || echo no-motd"))
        .unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    assert_eq!(
        r.stdout,
        "/app\nhi from the context\nhowdy from the build\nv=1\n1000:1000 hello.txt\n0:0 built.txt\ntest /app\nno-motd\n",
        "{r:?}"
    );
    sb.delete().unwrap();

    let creates = sandbox_creates(&server, "alice");
    let t0 = Instant::now();
    let again = build(
        &alice,
        app_context("v=1\n"),
        &BuildImage { build_args: [("GREETING".to_string(), "howdy".to_string())].into(), ..request("app:1") },
    );
    let rebuild = t0.elapsed();
    succeeded(&again);
    assert_eq!(cached(&again), vec![true; 11], "{again:?}");
    assert_eq!(sandbox_creates(&server, "alice"), creates, "a cached rebuild started a sandbox");
    eprintln!("cached rebuild of a 10-step Dockerfile through the API: {:.1} ms", rebuild.as_secs_f64() * 1000.0);

    // conf.txt is copied by step 6 (index 5): the steps before it hit, it and every later one miss.
    let changed = build(
        &alice,
        app_context("v=2\n"),
        &BuildImage { build_args: [("GREETING".to_string(), "howdy".to_string())].into(), ..request("app:2") },
    );
    succeeded(&changed);
    let mut want = vec![true; 5];
    want.extend([false; 6]);
    assert_eq!(cached(&changed), want, "{changed:?}");
    assert_eq!(sandbox_creates(&server, "alice"), creates + 1, "the changed build runs its RUN once");
    let sb = alice.create(&CreateSandbox { image: Some("app:2".into()), ..Default::default() }).unwrap();
    assert_eq!(sb.exec(&sh("cat /etc/conf.txt")).unwrap().stdout, "v=2\n");
    sb.delete().unwrap();

    let fresh = build(&alice, app_context("v=2\n"), &BuildImage { no_cache: true, ..request("app:3") });
    succeeded(&fresh);
    assert_eq!(cached(&fresh), vec![false; 11], "{fresh:?}");
    let left: Vec<_> = alice.list().unwrap().into_iter().filter(|s| s.metadata.contains_key("build")).collect();
    assert!(left.is_empty(), "build sandboxes left: {left:?}");
}

/// A RUN that fails ends the build with an error naming its line and carrying its output's tail; no
/// image is stored and its build sandbox is gone.
#[test]
fn a_failing_run_names_its_line_shows_its_output_and_stores_nothing() {
    let server = Server::start();
    let alice = with_busybox(&server, "alice");
    let dockerfile =
        "FROM bb\nRUN echo first step\n\nRUN echo about to fail; echo the reason >&2; exit 3\nRUN echo never\n";
    let events = build(&alice, context(&[("Dockerfile", dockerfile)]), &request("broken:1"));
    let Some(BuildEvent::Error { error, line, tail }) = events.last() else { panic!("{events:?}") };
    assert_eq!(*line, Some(4), "{error:?}");
    assert!(error.message.contains("line 4") && error.message.contains("status 3"), "{error:?}");
    let tail = tail.as_deref().unwrap_or_default();
    assert!(tail.contains("about to fail") && tail.contains("the reason"), "{tail:?}");
    assert!(!events.iter().any(|e| matches!(e, BuildEvent::Step { line: 5, .. })), "a step after the failure ran");
    expect_error(alice.image("broken:1"), 404, "not_found");
    let live: Vec<_> = alice.list().unwrap().into_iter().filter(|s| s.state != SandboxState::Deleted).collect();
    assert!(live.is_empty(), "build sandboxes left: {live:?}");
    // The Dockerfile's own mistakes are refused before anything runs, naming the line.
    let events = build(&alice, context(&[("Dockerfile", "FROM bb\nFROBNICATE x\n")]), &request("bad:1"));
    let Some(BuildEvent::Error { error, .. }) = events.last() else { panic!("{events:?}") };
    assert!(error.message.contains("line 2") && error.message.contains("unknown instruction"), "{error:?}");
    // A stage that copies from itself is refused as Docker refuses it, even where an image has its name.
    let dockerfile = "FROM bb AS bb\nCOPY --from=BB /etc/motd /m\n";
    let events = build(&alice, context(&[("Dockerfile", dockerfile)]), &request("circular:1"));
    let Some(BuildEvent::Error { error, line, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(*line, Some(2), "{error:?}");
    assert!(error.message.contains("names the stage it is in"), "{error:?}");
}

/// A plain HTTP server on 127.0.0.1 answering every request with `body`; returns its port.
fn http_server(body: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) && line != "\r\n" {
                line.clear();
            }
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    port
}

/// A RUN reaches a host only when the build allows it (deny by default): the package index on
/// loopback answers with `allow`, and the same build without it fails.
#[test]
fn run_steps_reach_only_the_hosts_the_build_allows() {
    let server = Server::builder().loopback_only().resolve("pkg.test=127.0.0.1").start();
    let port = http_server("package contents\n");
    let alice = with_busybox(&server, "alice");
    // busybox nc (its wget crashes in a root without glibc's shared libraries): a plain HTTP GET.
    let dockerfile = format!(
        "FROM bb\nRUN printf 'GET /pkg HTTP/1.0\\r\\nHost: pkg.test\\r\\n\\r\\n' \\\n    \
         | /bin/busybox nc -w 5 pkg.test {port} > /pkg && /bin/busybox grep -q 'package contents' /pkg\n"
    );
    let ctx = || context(&[("Dockerfile", dockerfile.as_str())]);
    let denied = build(&alice, ctx(), &request("net:1"));
    let Some(BuildEvent::Error { line, .. }) = denied.last() else { panic!("fetched without allow: {denied:?}") };
    assert_eq!(*line, Some(2));
    expect_error(alice.image("net:1"), 404, "not_found");
    let allowed = build(&alice, ctx(), &BuildImage { allow: vec!["pkg.test".into()], ..request("net:1") });
    succeeded(&allowed);
    let sb = alice.create(&CreateSandbox { image: Some("net:1".into()), ..Default::default() }).unwrap();
    let r = sb.exec(&sh("/bin/busybox grep -c 'package contents' /pkg")).unwrap();
    assert_eq!(r.stdout, "1\n", "{r:?}");
    sb.delete().unwrap();
}

/// The build cache and images are per tenant: bob cannot build FROM alice's image, which he cannot
/// see.
#[test]
fn another_tenant_cannot_build_from_your_image() {
    let server = Server::start();
    let alice = with_busybox(&server, "alice");
    succeeded(&build(&alice, context(&[("Dockerfile", "FROM bb\nENV A=1\n")]), &request("mine:1")));
    let bob = tenant(&server, "bob");
    let events = build(&bob, context(&[("Dockerfile", "FROM mine:1\nENV B=2\n")]), &request("theirs:1"));
    let Some(BuildEvent::Error { error, line, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(*line, Some(1));
    assert!(error.message.contains("unknown image"), "{error:?}");
}

/// A snapshot of a configured sandbox becomes an image whose sandboxes start with its files; a
/// snapshot of a `host` sandbox is refused, saying why.
#[test]
fn a_snapshot_becomes_an_image_that_boots_with_its_files() {
    let server = Server::start();
    let alice = with_busybox(&server, "alice");
    let sb = alice.create(&CreateSandbox { image: Some("bb".into()), ..Default::default() }).unwrap();
    let root = ExecRequest {
        user: Some(User::Root),
        ..sh("echo configured > /etc/configured && /bin/busybox rm /etc/motd && echo mine > /home/user/state")
    };
    assert_eq!(sb.exec(&root).unwrap().exit_code, 0);
    let snap = sb.snapshot(Some("configured")).unwrap();
    let image = alice.snapshot_image(&snap.id, "tmpl:1").unwrap();
    assert_eq!(image.name, "tmpl:1");
    sb.delete().unwrap();
    let copy = alice.create(&CreateSandbox { image: Some("tmpl:1".into()), ..Default::default() }).unwrap();
    let r =
        copy.exec(&sh("cat /etc/configured /home/user/state; test -e /etc/motd && echo motd || echo no-motd")).unwrap();
    assert_eq!(r.stdout, "configured\nmine\nno-motd\n", "{r:?}");
    copy.delete().unwrap();

    let host = alice.create(&CreateSandbox::default()).unwrap();
    let snap = host.snapshot(None).unwrap();
    let e = expect_error(alice.snapshot_image(&snap.id, "host-copy"), 400, "invalid_request");
    assert!(e.to_string().contains("`host` is the host's /usr"), "{e}");
    host.delete().unwrap();
    let bob = tenant(&server, "bob");
    expect_error(bob.snapshot_image("configured", "stolen"), 404, "not_found");
}

/// Two tenants building the same Dockerfile on the same public base at the same time never share
/// what a step wrote: the tree a `RUN` runs on is named by the layers below it, not by the instructions
/// that made them, so each build's second `RUN` sees that build's own first `RUN` (before, the second
/// build booted the first one's tree while the first kept it alive, and a tenant could plant files in
/// another's build).
#[test]
fn tenants_building_the_same_dockerfile_never_share_a_steps_files() {
    let server = Server::start();
    let admin = server.client();
    admin.import_image(Cursor::new(busybox_rootfs()), Some("base:public"), true).unwrap().wait().unwrap();
    // The sleep keeps each build's second step (and the tree it runs on) alive while the other runs.
    let dockerfile = "FROM base:public\nRUN echo \"$RANDOM$RANDOM-$$\" > /who\nRUN sleep 3 && cp /who /seen\n";
    let builds: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|name| {
            let c = tenant(&server, name);
            std::thread::spawn(move || {
                succeeded(&build(&c, context(&[("Dockerfile", dockerfile)]), &request("same:1")));
                c
            })
        })
        .collect();
    let mut seen = Vec::new();
    for (name, b) in ["alice", "bob"].into_iter().zip(builds) {
        let c = b.join().unwrap();
        let sb = c.create(&CreateSandbox { image: Some("same:1".into()), ..Default::default() }).unwrap();
        let r = sb.exec(&sh("cat /who /seen")).unwrap();
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{r:?}");
        assert_eq!(lines[0], lines[1], "{name}'s second RUN saw another build's first RUN: {r:?}");
        seen.push(lines[0].to_string());
        sb.delete().unwrap();
    }
    assert_ne!(seen[0], seen[1], "the two builds' first RUN wrote the same bytes; the test proves nothing");
}

/// `COPY` into a directory as Docker does: a destination that is `.`, ends in `/`, or is a directory
/// the image already has (from its base, a `WORKDIR`, or a link to one) receives the file inside it;
/// any other destination is the file's new name. The most common Dockerfile (`WORKDIR /app` +
/// `COPY requirements.txt .` + `RUN`) failed with "WORKDIR /app cannot be made: File exists".
#[test]
fn copy_into_an_existing_directory_puts_the_file_inside_it() {
    let server = Server::start();
    let c = with_busybox(&server, "alice");
    let dockerfile = "FROM bb\nWORKDIR /srv/app\nCOPY requirements.txt .\nCOPY app.py /srv/app\n\
                      COPY tool /etc\nCOPY tool /renamed\nRUN ls /srv/app > /listing && test -f /etc/tool\n";
    let ctx = context(&[
        ("Dockerfile", dockerfile),
        ("requirements.txt", "numpy\n"),
        ("app.py", "print(1)\n"),
        ("tool", "t\n"),
    ]);
    succeeded(&build(&c, ctx, &request("copy-into:1")));
    let sb = c.create(&CreateSandbox { image: Some("copy-into:1".into()), ..Default::default() }).unwrap();
    let r = sb
        .exec(&sh("cat /listing; cat /srv/app/requirements.txt /etc/tool /renamed; test -d /renamed || echo file"))
        .unwrap();
    assert_eq!(r.stdout, "app.py\nrequirements.txt\nnumpy\nt\nt\nfile\n", "{r:?}");
    sb.delete().unwrap();
}

/// `public`: an admin's build is every tenant's image (what E2B template names resolve to), a
/// tenant's own key may not publish one (403, nothing built).
#[test]
fn an_admin_build_may_be_public_and_a_tenant_may_not_publish() {
    let server = Server::start();
    let admin = server.client();
    admin.import_image(Cursor::new(busybox_rootfs()), Some("bb"), true).unwrap().wait().unwrap();
    let dockerfile = context(&[("Dockerfile", "FROM bb\nRUN echo shared > /made\n")]);
    succeeded(&build(&admin, dockerfile.clone(), &BuildImage { public: true, ..request("shared:1") }));
    let alice = tenant(&server, "alice");
    let sb = alice.create(&CreateSandbox { image: Some("shared:1".into()), ..Default::default() }).unwrap();
    assert_eq!(sb.exec(&sh("cat /made")).unwrap().stdout, "shared\n");
    sb.delete().unwrap();
    let refused = alice.build_image(Cursor::new(dockerfile), &BuildImage { public: true, ..request("mine:1") });
    expect_error(refused.map(|_| ()), 403, "forbidden");
    let listed: Vec<String> = alice.images().unwrap().into_iter().map(|i| i.name).collect();
    assert!(listed.contains(&"shared:1".to_string()) && !listed.contains(&"mine:1".to_string()), "{listed:?}");
}

/// The layers a build writes count against the tenant's image quota as they are written: a `COPY`
/// past it fails at its line with `limit_reached`, stores no image and leaves no blob of it behind.
#[test]
fn a_build_past_the_image_quota_stops_at_the_step_that_passes_it() {
    let server = Server::start_with(&["--image-quota-mb", "8"]);
    let c = with_busybox(&server, "alice");
    let blobs = server.state_dir().join("blobs/sha256");
    let before = std::fs::read_dir(&blobs).unwrap().count();
    // Each COPY writes a 2 MiB layer; the context itself fits in what the quota leaves.
    let big: String = (0..2 << 20).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let dockerfile = "FROM bb\nCOPY big /b1\nCOPY big /b2\nCOPY big /b3\nCOPY big /b4\n";
    let ctx = context(&[("Dockerfile", dockerfile), ("big", &big)]);
    let events = build(&c, ctx, &request("too-big:1"));
    let Some(BuildEvent::Error { error, line, .. }) = events.last() else { panic!("the build succeeded: {events:?}") };
    assert_eq!(error.code.as_str(), "limit_reached", "{error:?}");
    assert!(matches!(line, Some(3..=5)), "failed at a later COPY, not at the upload: {line:?} {error:?}");
    assert!(error.message.contains("--image-quota-mb"), "{error:?}");
    expect_error(c.image("too-big:1"), 404, "not_found");
    assert!(
        crate::harness::eventually(std::time::Duration::from_secs(10), || {
            std::fs::read_dir(&blobs).unwrap().count() == before
        }),
        "the refused build's layer was kept"
    );
}

/// A build context bigger than what the tenant's image quota leaves is refused while it arrives,
/// before any of it is built, and what was spooled is gone.
#[test]
fn a_build_context_past_the_image_quota_is_refused_as_it_arrives() {
    // `bb` takes ~6.5 MiB of it (its blob, its files, a layer tree and a root), the 9 MiB context
    // more than the rest.
    let server = Server::start_with(&["--image-quota-mb", "12"]);
    let c = with_busybox(&server, "alice");
    let big: String = (0..9 << 20).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let ctx = context(&[("Dockerfile", "FROM bb\nCOPY big /big\n"), ("big", &big)]);
    let Err(e) = c.build_image(Cursor::new(ctx), &request("ctx:1")) else { panic!("the upload was taken") };
    // The server answers 429 and closes the connection without reading the rest of the body: a
    // client still sending may see the connection cut before it reads the answer.
    match e.status() {
        Some(status) => {
            assert_eq!(status, 429, "{e:?}");
            assert!(e.to_string().contains("past its image quota"), "{e:?}");
        }
        None => assert!(e.to_string().contains("Broken pipe") || e.to_string().contains("reset"), "{e:?}"),
    }
    expect_error(c.image("ctx:1"), 404, "not_found");
    // The tenant's quota is whole again: a small build still runs.
    let events = build(&c, context(&[("Dockerfile", "FROM bb\nLABEL a=b\n")]), &request("small:1"));
    assert!(matches!(events.last(), Some(BuildEvent::Done { .. })), "{events:?}");
}
