//! `sandlot image build` (a Dockerfile and its context sent to the server, steps and `RUN` output
//! shown as they come) and `sandlot image from-snapshot`.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use sandlot_client::api::{BuildEvent, BuildImage};

use super::{Conn, Doing};

pub(super) const BUILD_LONG: &str = "\
Build an image from a Dockerfile on the server and store it under NAME. The context directory is sent \
as a tar (without `.git`, and without what `.dockerignore` names, with Docker's rules: `*`, `**`, \
`!` exceptions; the server applies the file again). Supported: FROM (an image you can boot, an \
earlier stage, or scratch; `FROM IMAGE AS NAME` for several stages), RUN (shell or exec form; in a \
build sandbox with your limits, network denied unless --allow names hosts), COPY and ADD of local \
files, wildcards allowed (--chown=USER[:GROUP] by id or name, --chmod=OCTAL; COPY --from=STAGE; ADD \
copies an archive as the file it is and fetches no URL), ENV, ARG (--build-arg), WORKDIR, USER (an \
id or a name of the image's /etc/passwd), LABEL, CMD, ENTRYPOINT, EXPOSE. docs/IMAGES.md lists where \
the result differs from buildah's.

Each step is cached by a chain hash of the base image, the instructions so far and the files they \
copied, so an unchanged Dockerfile rebuilds without running anything. --no-cache runs every step \
again. A failed step prints its Dockerfile line and the end of its output, and the command exits 1.

Examples:
  sandlot image build -t myapp .
  sandlot image build -t tools -f docker/Dockerfile --build-arg VERSION=2 --allow pypi.org \\
      --allow files.pythonhosted.org .
  sandlot run --image myapp -- /app/start";

pub(super) const FROM_SNAPSHOT_LONG: &str = "\
Store a snapshot as an image: the image its sandbox booted, with the snapshot's files on top. \
Sandboxes of the new image start from the configured state (a template, as in E2B).

Example:
  sandlot sandbox snapshot SANDBOX --name configured
  sandlot image from-snapshot configured --name myapp:configured";

/// Name of the Dockerfile when it lies outside the context and is sent along with it.
const OUTSIDE_DOCKERFILE: &str = ".sandlot.Dockerfile";

/// Arguments of `sandlot image build`.
#[derive(clap::Args, Debug)]
pub struct BuildArgs {
    /// The context directory (its files are what COPY and ADD see).
    #[arg(value_name = "CONTEXT")]
    context: PathBuf,
    /// Name to store the image under.
    #[arg(short = 't', long = "tag", value_name = "NAME")]
    name: String,
    /// The Dockerfile (default: CONTEXT/Dockerfile).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: Option<PathBuf>,
    /// Run every step again, ignoring the build cache.
    #[arg(long)]
    no_cache: bool,
    /// A host (name, *.suffix or CIDR) RUN steps may reach; repeat for more. None by default.
    #[arg(long, value_name = "HOST")]
    allow: Vec<String>,
    /// A build argument for ARG, NAME=value; repeat for more.
    #[arg(long, value_name = "NAME=VALUE")]
    build_arg: Vec<String>,
    /// Memory of each RUN step's sandbox, MiB.
    #[arg(long)]
    memory_mb: Option<u64>,
    /// CPU of each RUN step's sandbox, cores.
    #[arg(long)]
    cpu: Option<f64>,
    /// Time limit of each RUN step, seconds.
    #[arg(long)]
    timeout_s: Option<u64>,
    /// Publish it to every tenant (admin key only).
    #[arg(long)]
    public: bool,
    /// Print the build's events as JSON lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) conn: Conn,
}

/// Arguments of `sandlot image from-snapshot`.
#[derive(clap::Args, Debug)]
pub struct FromSnapshotArgs {
    /// The snapshot (id or name).
    #[arg(value_name = "SNAPSHOT")]
    snapshot: String,
    /// Name to store the image under.
    #[arg(long)]
    name: String,
    #[command(flatten)]
    pub(super) conn: Conn,
}

/// What the context leaves out of the upload: `.git`, and what `.dockerignore` names (Docker's
/// rules; the server applies the same file again, so a context sent by any client copies alike).
struct Ignore {
    patterns: sandlot_oci::dockerignore::Patterns,
}

impl Ignore {
    fn read(context: &Path) -> anyhow::Result<Ignore> {
        let text = fs::read_to_string(context.join(".dockerignore")).unwrap_or_default();
        Ok(Ignore { patterns: sandlot_oci::dockerignore::Patterns::parse(&text).map_err(|e| anyhow!(e))? })
    }

    /// Whether `rel` (a path in the context, `/`-separated) is left out. With `!` exceptions an
    /// ignored directory is still walked (what it holds may be re-included), so only files go; the
    /// Dockerfile and .dockerignore are always sent, as Docker sends them.
    fn ignores(&self, rel: &str, is_dir: bool) -> bool {
        if rel == ".git" || rel.starts_with(".git/") {
            return true;
        }
        if is_dir && self.patterns.has_exceptions() {
            return false;
        }
        rel != ".dockerignore" && rel != "Dockerfile" && self.patterns.ignores(rel)
    }
}

/// Writes the context directory as a tar to a temporary file (links kept as links, never followed).
fn tar_context(context: &Path, extra_dockerfile: Option<&Path>) -> anyhow::Result<fs::File> {
    let ignore = Ignore::read(context)?;
    let file = tempfile::tempfile().map_err(|e| anyhow!("making a temporary file for the context: {e}"))?;
    let mut tar = tar::Builder::new(io::BufWriter::new(file));
    tar.follow_symlinks(false);
    let mut stack = vec![PathBuf::new()];
    let mut linked: HashMap<(u64, u64), PathBuf> = HashMap::new();
    while let Some(rel) = stack.pop() {
        let dir = context.join(&rel);
        let mut entries: Vec<_> = fs::read_dir(&dir)
            .map_err(|e| anyhow!("reading {}: {e}", dir.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow!("reading {}: {e}", dir.display()))?;
        entries.sort_by_key(|e| e.file_name());
        for ent in entries {
            let child = rel.join(ent.file_name());
            let shown = child.to_string_lossy().replace('\\', "/");
            let ty = ent.file_type().map_err(|e| anyhow!("reading {}: {e}", ent.path().display()))?;
            if ignore.ignores(&shown, ty.is_dir()) {
                continue;
            }
            if !(ty.is_dir() || ty.is_file() || ty.is_symlink()) {
                continue;
            }
            // A file with several names in the context goes once, its other names as hard links to
            // it (Docker keeps them one file in the image).
            if ty.is_file() {
                let meta = ent.metadata().map_err(|e| anyhow!("reading {shown}: {e}"))?;
                if meta.nlink() > 1 {
                    if let Some(first) = linked.get(&(meta.dev(), meta.ino())) {
                        let mut h = tar::Header::new_gnu();
                        h.set_entry_type(tar::EntryType::Link);
                        h.set_mode(meta.mode() & 0o7777);
                        h.set_size(0);
                        tar.append_link(&mut h, &child, first).map_err(|e| anyhow!("adding {shown}: {e}"))?;
                        continue;
                    }
                    linked.insert((meta.dev(), meta.ino()), child.clone());
                }
            }
            tar.append_path_with_name(ent.path(), &child).map_err(|e| anyhow!("adding {shown}: {e}"))?;
            if ty.is_dir() {
                stack.push(child);
            }
        }
    }
    if let Some(f) = extra_dockerfile {
        let mut h = tar::Header::new_gnu();
        let body = fs::read(f).map_err(|e| anyhow!("reading {}: {e}", f.display()))?;
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        tar.append_data(&mut h, OUTSIDE_DOCKERFILE, body.as_slice())
            .map_err(|e| anyhow!("adding the Dockerfile: {e}"))?;
    }
    let mut file = tar
        .into_inner()
        .map_err(|e| anyhow!("writing the context: {e}"))?
        .into_inner()
        .map_err(|e| anyhow!("writing the context: {}", e.error()))?;
    file.rewind()?;
    Ok(file)
}

pub(super) fn build(args: BuildArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    if !args.context.is_dir() {
        bail!("the context {} is not a directory", args.context.display());
    }
    let context = fs::canonicalize(&args.context)?;
    // A Dockerfile inside the context is named by its path there; one outside is sent along.
    let (file, outside) = match &args.file {
        None => (None, None),
        Some(f) => {
            let abs = fs::canonicalize(f).map_err(|e| anyhow!("the Dockerfile {}: {e}", f.display()))?;
            match abs.strip_prefix(&context) {
                Ok(rel) => (Some(rel.to_string_lossy().into_owned()), None),
                Err(_) => (Some(OUTSIDE_DOCKERFILE.to_string()), Some(abs)),
            }
        }
    };
    let mut build_args = BTreeMap::new();
    for a in &args.build_arg {
        let (k, v) = a.split_once('=').ok_or_else(|| anyhow!("--build-arg {a:?}: write it as NAME=value"))?;
        build_args.insert(k.to_string(), v.to_string());
    }
    let tar = tar_context(&context, outside.as_deref())?;
    let size = tar.metadata().map(|m| m.len()).unwrap_or(0);
    if !args.json {
        eprintln!("sandlot: sending the context ({} KiB)…", size.div_ceil(1024));
    }
    let request = BuildImage {
        name: args.name.clone(),
        file,
        no_cache: args.no_cache,
        allow: args.allow.clone(),
        build_args,
        memory_mb: args.memory_mb,
        cpu: args.cpu,
        timeout_s: args.timeout_s,
        public: args.public,
    };
    let stream = client.build_image(tar, &request).doing("building the image")?;
    let mut stderr = io::stderr().lock();
    for ev in stream {
        let ev = ev.doing("reading the build's events")?;
        if args.json {
            println!("{}", serde_json::to_string(&ev)?);
        }
        match ev {
            BuildEvent::Step { index, line, instruction, cached } if !args.json => {
                let note = if cached { " (cached)" } else { "" };
                writeln!(stderr, "#{} line {line}: {instruction}{note}", index + 1)?;
            }
            BuildEvent::Output { data, .. } if !args.json => {
                stderr.write_all(data.as_bytes())?;
                stderr.flush()?;
            }
            BuildEvent::Done { image } => {
                if !args.json {
                    writeln!(stderr, "sandlot: stored {} ({})", image.name, image.id.as_deref().unwrap_or("-"))?;
                    println!("{}", image.name);
                }
                return Ok(0);
            }
            BuildEvent::Error { error, line, tail } => {
                if !args.json {
                    if let Some(tail) = tail.filter(|t| !t.is_empty()) {
                        writeln!(stderr, "--- last output of the failed step ---\n{}", tail.trim_end())?;
                    }
                    let at = line.map(|l| format!(" (Dockerfile line {l})")).unwrap_or_default();
                    writeln!(stderr, "sandlot: the build failed{at}: {} ({})", error.message, error.code)?;
                }
                return Ok(1);
            }
            _ => {}
        }
    }
    bail!("the build's stream ended without a result")
}

pub(super) fn from_snapshot(args: FromSnapshotArgs) -> anyhow::Result<i32> {
    let image =
        args.conn.client()?.snapshot_image(&args.snapshot, &args.name).doing("storing the snapshot as an image")?;
    eprintln!("sandlot: stored {} ({})", image.name, image.id.as_deref().unwrap_or("-"));
    println!("{}", image.name);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upload_leaves_out_git_and_what_dockerignore_names_but_walks_into_excepted_directories() {
        let ignore =
            Ignore { patterns: sandlot_oci::dockerignore::Patterns::parse("target\n*.log\nDockerfile\n").unwrap() };
        assert!(ignore.ignores("target", true) && ignore.ignores("build.log", false));
        assert!(!ignore.ignores("sub/build.log", false), "a pattern without a slash matches at the top only");
        assert!(ignore.ignores(".git/config", false));
        assert!(!ignore.ignores("Dockerfile", false), "the Dockerfile is sent whatever the file says");
        let ignore = Ignore { patterns: sandlot_oci::dockerignore::Patterns::parse("docs\n!docs/keep.md\n").unwrap() };
        assert!(!ignore.ignores("docs", true));
        assert!(ignore.ignores("docs/other.md", false) && !ignore.ignores("docs/keep.md", false));
    }
}
