//! `sandlot image build` (a Dockerfile and its context sent to the server, steps and `RUN` output
//! shown as they come) and `sandlot image from-snapshot`.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use sandlot_client::api::{BuildEvent, BuildImage};

use super::{Conn, Doing};

pub(super) const BUILD_LONG: &str = "\
Build an image from a Dockerfile on the server and store it under NAME. The context directory is sent \
as a tar (without `.git`, and without what `.dockerignore` lists: names, directory prefixes and `*` \
wildcards within one path component). Supported: FROM (an image you can boot, or scratch; one \
stage), RUN (shell or exec form; in a build sandbox with your limits, network denied unless \
--allow names hosts), COPY and ADD of local files (--chown=UID[:GID] or root; ADD copies an \
archive as the file it is and fetches no URL), ENV, ARG (--build-arg), WORKDIR, USER, LABEL, CMD, \
ENTRYPOINT, EXPOSE.

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

/// Patterns of a `.dockerignore`: `#` comments and blank lines skipped; `!` exceptions are not
/// supported (such a line is reported and ignored).
struct Ignore {
    patterns: Vec<String>,
}

impl Ignore {
    fn read(context: &Path) -> Ignore {
        let text = fs::read_to_string(context.join(".dockerignore")).unwrap_or_default();
        let mut patterns = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            if line.starts_with('!') {
                eprintln!("sandlot: .dockerignore: exceptions ({line}) are not supported; the line is ignored");
                continue;
            }
            let p = line.trim_start_matches("./").trim_start_matches('/').trim_end_matches('/');
            if !p.is_empty() {
                patterns.push(p.to_string());
            }
        }
        Ignore { patterns }
    }

    /// Whether `rel` (a path in the context, `/`-separated) or a directory above it is ignored.
    fn ignores(&self, rel: &str) -> bool {
        if rel == ".git" || rel.starts_with(".git/") {
            return true;
        }
        self.patterns.iter().any(|p| {
            let (pp, rp): (Vec<&str>, Vec<&str>) = (p.split('/').collect(), rel.split('/').collect());
            pp.len() <= rp.len() && pp.iter().zip(&rp).all(|(a, b)| glob(a, b))
        })
    }
}

/// `*` matches any run of characters and `?` one, within one path component.
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Writes the context directory as a tar to a temporary file (links kept as links, never followed).
fn tar_context(context: &Path, extra_dockerfile: Option<&Path>) -> anyhow::Result<fs::File> {
    let ignore = Ignore::read(context);
    let file = tempfile::tempfile().map_err(|e| anyhow!("making a temporary file for the context: {e}"))?;
    let mut tar = tar::Builder::new(io::BufWriter::new(file));
    tar.follow_symlinks(false);
    let mut stack = vec![PathBuf::new()];
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
            if ignore.ignores(&shown) {
                continue;
            }
            let ty = ent.file_type().map_err(|e| anyhow!("reading {}: {e}", ent.path().display()))?;
            if !(ty.is_dir() || ty.is_file() || ty.is_symlink()) {
                continue;
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
    fn dockerignore_patterns_match_names_prefixes_and_wildcards() {
        let ignore = Ignore { patterns: vec!["target".into(), "*.log".into(), "docs/*.md".into()] };
        assert!(ignore.ignores("target"));
        assert!(ignore.ignores("target/debug/x"));
        assert!(ignore.ignores("build.log"));
        assert!(ignore.ignores("docs/a.md"));
        assert!(!ignore.ignores("docs/a.txt"));
        assert!(!ignore.ignores("src/main.rs"));
        assert!(!ignore.ignores("sub/build.log"), "a pattern without a slash matches at the top only, as Docker's");
        assert!(ignore.ignores(".git/config"));
        assert!(glob("a*c", "abbbc") && glob("?b", "ab") && !glob("a*d", "abc"));
    }
}
