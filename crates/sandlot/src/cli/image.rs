//! `sandlot image pull | import | ls | inspect | rm`, with progress bars on a terminal and plain lines
//! elsewhere.

use std::collections::BTreeMap;
use std::io::{self, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sandlot_client::api::{ImageInfo, PullEvent, PullImage, RegistryAuth};
use sandlot_client::PullStream;

use super::output::{print_json, print_table, utc_time};
use super::{Conn, Doing};

const PULL_LONG: &str = "\
Pull an image from an OCI registry (Docker Hub, GHCR, a private registry) into the server, unpack it \
once, and store it under its name for sandboxes to boot (`sandlot run --image NAME`). Layers shared \
with images already stored are not fetched or unpacked again.

Credentials: --username with the password on stdin (--password-stdin), or configured on the server \
(--registry-auth-file). They are used for this pull only and never stored.

Examples:
  sandlot image pull python:3.12-slim
  sandlot image pull registry.internal:5000/team/base:1 --username ci --password-stdin < token
  sandlot run --image python:3.12-slim -- python3 -c 'print(42)'";

const IMPORT_LONG: &str = "\
Import an image from an archive: a `docker save` tarball, an OCI image layout packed as a tar, or a \
plain root filesystem tar (which becomes a one-layer image). FILE `-` reads standard input.

Examples:
  docker save alpine:3.20 | sandlot image import -
  mmdebstrap --variant=minbase bookworm - | sandlot image import --name debian:bookworm -
  tar -C rootfs -c . | sandlot image import --name mytools -";

/// `sandlot image …` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ImageCmd {
    /// Pull an image from a registry.
    #[command(long_about = PULL_LONG)]
    Pull(PullArgs),
    /// Import an image from a docker-save, OCI or root filesystem tar.
    #[command(long_about = IMPORT_LONG)]
    Import(ImportArgs),
    /// List the images you can boot: yours, the public ones and `host`.
    Ls(ListArgs),
    /// Show one image: digests, layers, and how it runs (env, working dir, user, entrypoint, cmd).
    Inspect(InspectArgs),
    /// Delete one of your images (sandboxes and snapshots of it keep working).
    Rm(RmArgs),
    /// Build an image from a Dockerfile and a context directory.
    #[command(long_about = super::build::BUILD_LONG)]
    Build(super::build::BuildArgs),
    /// Store one of your snapshots as an image (a template from a configured sandbox).
    #[command(long_about = super::build::FROM_SNAPSHOT_LONG)]
    FromSnapshot(super::build::FromSnapshotArgs),
}

impl ImageCmd {
    pub(super) fn conn(&self) -> &Conn {
        match self {
            ImageCmd::Pull(a) => &a.conn,
            ImageCmd::Import(a) => &a.conn,
            ImageCmd::Ls(a) => &a.conn,
            ImageCmd::Inspect(a) => &a.conn,
            ImageCmd::Rm(a) => &a.conn,
            ImageCmd::Build(a) => &a.conn,
            ImageCmd::FromSnapshot(a) => &a.conn,
        }
    }
}

/// Arguments of `sandlot image pull`.
#[derive(clap::Args, Debug)]
pub struct PullArgs {
    /// Image reference: NAME, NAME:TAG or NAME@DIGEST (e.g. python:3.12-slim, ghcr.io/org/app:1).
    #[arg(value_name = "REF")]
    reference: String,
    /// Store it under this name instead of the reference.
    #[arg(long)]
    name: Option<String>,
    /// Platform to pick from a multi-platform image, os/arch[/variant] (default: the server's).
    #[arg(long, value_name = "OS/ARCH")]
    platform: Option<String>,
    /// Registry user name; the password is read from stdin (with --password-stdin).
    #[arg(long, requires = "password_stdin")]
    username: Option<String>,
    /// Read the registry password or token from standard input.
    #[arg(long, requires = "username")]
    password_stdin: bool,
    /// Publish it to every tenant (admin key only).
    #[arg(long)]
    public: bool,
    /// Print the pull's events as JSON lines instead of progress.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot image import`.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The archive, or `-` for standard input.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Name to store it under (needed when the archive names none, as a root filesystem tar).
    #[arg(long)]
    name: Option<String>,
    /// Publish it to every tenant (admin key only).
    #[arg(long)]
    public: bool,
    /// Print the import's events as JSON lines instead of progress.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot image ls`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Print JSON (`{"images": [...]}`) instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot image inspect`.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// The image's name.
    name: String,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot image rm`.
#[derive(clap::Args, Debug)]
pub struct RmArgs {
    /// The image's name.
    name: String,
    #[command(flatten)]
    conn: Conn,
}

pub(super) fn execute(cmd: ImageCmd) -> anyhow::Result<i32> {
    match cmd {
        ImageCmd::Pull(args) => pull(args),
        ImageCmd::Import(args) => import(args),
        ImageCmd::Ls(args) => list(args),
        ImageCmd::Build(args) => super::build::build(args),
        ImageCmd::FromSnapshot(args) => super::build::from_snapshot(args),
        ImageCmd::Inspect(args) => {
            let image = args.conn.client()?.image(&args.name).doing("reading the image")?;
            print_json(&image)?;
            Ok(0)
        }
        ImageCmd::Rm(args) => {
            args.conn.client()?.delete_image(&args.name).doing("deleting the image")?;
            eprintln!("sandlot: deleted image {}", args.name);
            Ok(0)
        }
    }
}

fn pull(args: PullArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let auth = match args.username {
        Some(username) => {
            let mut password = String::new();
            io::stdin().read_to_string(&mut password).doing_io("reading the password from stdin")?;
            Some(RegistryAuth { username, password: password.trim_end_matches(['\n', '\r']).to_string() })
        }
        None => None,
    };
    let request =
        PullImage { reference: args.reference, auth, platform: args.platform, name: args.name, public: args.public };
    let stream = client.pull_image(&request).doing("pulling the image")?;
    follow(stream, args.json)
}

fn import(args: ImportArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let reader: Box<dyn Read> = if args.file.as_os_str() == "-" {
        Box::new(io::stdin())
    } else {
        Box::new(
            std::fs::File::open(&args.file).map_err(|e| anyhow::anyhow!("cannot open {}: {e}", args.file.display()))?,
        )
    };
    if !args.json {
        eprintln!("sandlot: sending the archive…");
    }
    let stream = client.import_image(reader, args.name.as_deref(), args.public).doing("importing the image")?;
    follow(stream, args.json)
}

/// Shows a pull's or import's progress and prints each stored image's name on stdout.
fn follow(stream: PullStream, json: bool) -> anyhow::Result<i32> {
    let mut view = Progress::new(!json && io::stderr().is_terminal());
    for ev in stream {
        let ev = ev.doing("reading the progress")?;
        if json {
            println!("{}", serde_json::to_string(&ev)?);
        }
        match &ev {
            PullEvent::Done { image } => {
                view.finish();
                if !json {
                    eprintln!("sandlot: stored {} ({})", image.name, image.id.as_deref().unwrap_or("-"));
                    println!("{}", image.name);
                }
            }
            PullEvent::Error { error } => {
                view.finish();
                anyhow::bail!("{} ({})", error.message, error.code);
            }
            _ if !json => view.event(&ev),
            _ => {}
        }
    }
    Ok(0)
}

/// One layer's download.
struct Bar {
    done: u64,
    total: u64,
    started: Instant,
    state: &'static str,
}

/// Per-layer bars redrawn in place on a terminal (at most 10 times a second), or one line per step.
struct Progress {
    tty: bool,
    layers: BTreeMap<usize, (String, Bar)>,
    index: BTreeMap<String, usize>,
    drawn: usize,
    last: Option<Instant>,
}

impl Progress {
    fn new(tty: bool) -> Progress {
        Progress { tty, layers: BTreeMap::new(), index: BTreeMap::new(), drawn: 0, last: None }
    }

    fn event(&mut self, ev: &PullEvent) {
        let line = match ev {
            PullEvent::Resolved { digest, platform, layers } => {
                for (i, l) in layers.iter().enumerate() {
                    let bar = Bar { done: 0, total: l.size_bytes, started: Instant::now(), state: "waiting" };
                    self.layers.insert(i, (l.digest.clone(), bar));
                    self.index.insert(l.digest.clone(), i);
                }
                Some(format!("resolved {digest} ({platform}, {} layers)", layers.len()))
            }
            PullEvent::Download { digest, done, total } => {
                if let Some((_, bar)) = self.index.get(digest).and_then(|i| self.layers.get_mut(i)) {
                    (bar.done, bar.total, bar.state) = (*done, *total, "downloading");
                }
                None
            }
            PullEvent::Downloaded { digest, cached } => {
                if let Some((_, bar)) = self.index.get(digest).and_then(|i| self.layers.get_mut(i)) {
                    bar.done = bar.total;
                    bar.state = if *cached { "already stored" } else { "downloaded" };
                }
                Some(format!("{}: {}", short(digest), if *cached { "already stored" } else { "downloaded" }))
            }
            PullEvent::Unpacking { index } => {
                if let Some((_, bar)) = self.layers.get_mut(index) {
                    bar.state = "unpacking";
                }
                Some(format!("layer {}: unpacking", index + 1))
            }
            PullEvent::Unpacked { index, cached, dropped } => {
                if let Some((_, bar)) = self.layers.get_mut(index) {
                    bar.state = if *cached { "shared" } else { "unpacked" };
                }
                for d in dropped {
                    self.note(&format!("layer {}: skipped {d}", index + 1));
                }
                Some(format!("layer {}: {}", index + 1, if *cached { "already unpacked" } else { "unpacked" }))
            }
            PullEvent::Done { .. } | PullEvent::Error { .. } => None,
        };
        if self.tty {
            self.draw(false);
        } else if let Some(line) = line {
            eprintln!("sandlot: {line}");
        }
    }

    /// A line printed above the bars (or as is, without a terminal).
    fn note(&mut self, line: &str) {
        if self.tty {
            self.clear();
        }
        eprintln!("sandlot: {line}");
        self.drawn = 0;
    }

    fn clear(&mut self) {
        let mut err = io::stderr().lock();
        for _ in 0..self.drawn {
            let _ = write!(err, "\x1b[1A\x1b[2K");
        }
        self.drawn = 0;
    }

    fn draw(&mut self, force: bool) {
        if !force && self.last.is_some_and(|t| t.elapsed() < Duration::from_millis(100)) {
            return;
        }
        self.last = Some(Instant::now());
        self.clear();
        let mut err = io::stderr().lock();
        for (digest, bar) in self.layers.values() {
            let _ = writeln!(err, "{}", bar_line(digest, bar));
        }
        self.drawn = self.layers.len();
    }

    fn finish(&mut self) {
        if self.tty {
            self.draw(true);
        }
    }
}

fn short(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// `abcdef012345  [########------------]  12.0 MiB / 30.0 MiB  4.1 MiB/s  ETA 4s  downloading`
fn bar_line(digest: &str, bar: &Bar) -> String {
    const WIDTH: usize = 24;
    let frac = if bar.total == 0 { 1.0 } else { (bar.done as f64 / bar.total as f64).min(1.0) };
    let filled = (frac * WIDTH as f64) as usize;
    let secs = bar.started.elapsed().as_secs_f64().max(0.001);
    let rate = bar.done as f64 / secs;
    let eta = if bar.state == "downloading" && rate > 0.0 && bar.total > bar.done {
        format!("  ETA {:.0}s", (bar.total - bar.done) as f64 / rate)
    } else {
        String::new()
    };
    let rate = if bar.state == "downloading" { format!("  {}/s", mib(rate as u64)) } else { String::new() };
    format!(
        "{}  [{}{}]  {} / {}{rate}{eta}  {}",
        short(digest),
        "#".repeat(filled),
        "-".repeat(WIDTH - filled),
        mib(bar.done),
        mib(bar.total),
        bar.state
    )
}

fn list(args: ListArgs) -> anyhow::Result<i32> {
    let images = args.conn.client()?.images().doing("listing images")?;
    if args.json {
        print_json(&sandlot_client::api::ImageList { images })?;
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = images.iter().map(row).collect();
    print_table(&["NAME", "ID", "OWNER", "SIZE", "LAYERS", "STORED"], &rows)?;
    Ok(0)
}

fn row(i: &ImageInfo) -> Vec<String> {
    vec![
        i.name.clone(),
        i.id.as_deref().map(|d| short(d).to_string()).unwrap_or_else(|| "-".into()),
        format!("{:?}", i.owner).to_lowercase(),
        if i.size_bytes == 0 { "-".into() } else { mib(i.size_bytes) },
        i.layers.len().to_string(),
        if i.created_at_ms == 0 { "-".into() } else { utc_time(i.created_at_ms) },
    ]
}

/// `io::Result` with what we were doing.
trait DoingIo<T> {
    fn doing_io(self, what: &str) -> anyhow::Result<T>;
}

impl<T> DoingIo<T> for io::Result<T> {
    fn doing_io(self, what: &str) -> anyhow::Result<T> {
        self.map_err(|e| anyhow::anyhow!("{what}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_shows_bytes_rate_and_eta_while_downloading() {
        let bar = Bar {
            done: 1 << 20,
            total: 4 << 20,
            started: Instant::now() - Duration::from_secs(1),
            state: "downloading",
        };
        let line = bar_line(&format!("sha256:{}", "ab".repeat(32)), &bar);
        assert!(line.starts_with("abababababab  [######------------------]  1.0 MiB / 4.0 MiB"), "{line}");
        assert!(line.contains("MiB/s") && line.contains("ETA 3s"), "{line}");
        let done = Bar { done: 4 << 20, total: 4 << 20, started: Instant::now(), state: "unpacked" };
        assert!(!bar_line("sha256:ab", &done).contains("ETA"));
    }
}
