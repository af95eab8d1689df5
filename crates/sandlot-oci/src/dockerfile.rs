//! The Dockerfile subset `sandlot image build` takes, parsed without touching anything.
//!
//! [`parse`] turns the text into [`Raw`] instructions (keyword, arguments, 1-based line), joining `\`
//! continuations and dropping `#` comments; an unknown keyword is refused naming its line. [`Vars`]
//! then resolves them one at a time, as a build walks them: it substitutes `$VAR` and `${VAR}` (with
//! `${VAR:-default}` and `${VAR:+alt}`) from the `ARG`s and `ENV`s in effect in the instructions
//! Docker substitutes (`ADD COPY ENV EXPOSE FROM LABEL USER WORKDIR`, and an `ARG`'s default), never
//! in `RUN`, `CMD` or `ENTRYPOINT`, whose shell does its own.
//!
//! Supported: `FROM` (several stages, `FROM IMAGE AS NAME`; each `FROM` starts afresh with only the
//! global `ARG`s), `RUN`, `COPY` and `ADD` (local files or `--from` a stage or image; globs;
//! `--chown` by id or name, looked up by the builder in the image's `/etc/passwd` and `/etc/group`;
//! `--chmod` in octal; the daemon fetches nothing, and a local archive is copied as the file it is,
//! not extracted), `ENV`, `ARG`, `WORKDIR`, `USER`, `LABEL`, `CMD`, `ENTRYPOINT`, `EXPOSE`.

use std::collections::BTreeMap;

/// A Dockerfile that cannot be built, with the line it is about (0 when it is about the whole file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if *line > 0 { format!("Dockerfile line {line}: ") } else { String::new() })]
pub struct DockerfileError {
    /// 1-based line of the instruction (0: the file as a whole).
    pub line: usize,
    /// What is wrong and what to do.
    pub message: String,
}

fn err(line: usize, message: impl Into<String>) -> DockerfileError {
    DockerfileError { line, message: message.into() }
}

/// Longest Dockerfile accepted, bytes.
pub const MAX_DOCKERFILE_BYTES: usize = 1 << 20;
/// Most instructions accepted.
pub const MAX_INSTRUCTIONS: usize = 1000;
/// Most sources of one `COPY` or `ADD`.
pub const MAX_COPY_SOURCES: usize = 1000;
/// Longest path a `COPY`, `ADD` or `WORKDIR` names, bytes, and most components in it (a context's).
const MAX_PATH_BYTES: usize = 4096;
const MAX_PATH_DEPTH: usize = 128;

/// Refuses a path past [`MAX_PATH_BYTES`] or [`MAX_PATH_DEPTH`] (after substitution, which can grow it).
fn check_path(line: usize, what: &str, path: &str) -> Result<(), DockerfileError> {
    if path.len() > MAX_PATH_BYTES || path.split('/').filter(|c| !c.is_empty()).count() > MAX_PATH_DEPTH {
        return Err(err(
            line,
            format!(
                "{what}: a path of {} bytes is longer than {MAX_PATH_BYTES} bytes or {MAX_PATH_DEPTH} components",
                path.len()
            ),
        ));
    }
    Ok(())
}

/// One instruction as written: its keyword (upper case), its arguments with continuations joined,
/// and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raw {
    /// 1-based line the instruction starts on.
    pub line: usize,
    /// The keyword, upper case (`RUN`).
    pub keyword: String,
    /// Everything after the keyword, trimmed.
    pub args: String,
}

const KNOWN: &[&str] =
    &["FROM", "RUN", "COPY", "ADD", "ENV", "ARG", "WORKDIR", "USER", "LABEL", "CMD", "ENTRYPOINT", "EXPOSE"];
const UNSUPPORTED: &[&str] = &["VOLUME", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "ONBUILD", "MAINTAINER"];

/// Splits `text` into instructions. Only `ARG` may come before the first `FROM`; there must be one.
pub fn parse(text: &str) -> Result<Vec<Raw>, DockerfileError> {
    if text.len() > MAX_DOCKERFILE_BYTES {
        return Err(err(0, format!("the Dockerfile is {} bytes; the limit is {MAX_DOCKERFILE_BYTES}", text.len())));
    }
    let mut out: Vec<Raw> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim();
        // A comment is a line whose first non-blank character is `#`, also inside a continuation; a
        // blank line inside one does not end it (Docker's rule).
        if trimmed.starts_with('#') || trimmed.is_empty() {
            continue;
        }
        let (body, continues) = match trimmed.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (trimmed, false),
        };
        let (start, mut acc) = pending.take().unwrap_or((n, String::new()));
        if !acc.is_empty() && !body.is_empty() {
            acc.push(' ');
        }
        acc.push_str(body.trim());
        if continues {
            pending = Some((start, acc));
            continue;
        }
        if acc.trim().is_empty() {
            continue;
        }
        out.push(instruction(start, &acc)?);
        if out.len() > MAX_INSTRUCTIONS {
            return Err(err(start, format!("more than {MAX_INSTRUCTIONS} instructions")));
        }
    }
    if let Some((start, acc)) = pending {
        if !acc.trim().is_empty() {
            out.push(instruction(start, &acc)?);
        }
    }
    let mut from = None;
    for r in &out {
        match (r.keyword.as_str(), from) {
            ("FROM", _) => from = Some(r.line),
            ("ARG", _) => {}
            (k, None) => return Err(err(r.line, format!("{k} before FROM: only ARG may come before FROM"))),
            _ => {}
        }
    }
    if from.is_none() {
        return Err(err(0, "the Dockerfile has no FROM: start it with `FROM IMAGE` or `FROM scratch`"));
    }
    Ok(out)
}

fn instruction(line: usize, text: &str) -> Result<Raw, DockerfileError> {
    let (word, rest) = match text.find(char::is_whitespace) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, ""),
    };
    let keyword = word.to_ascii_uppercase();
    if UNSUPPORTED.contains(&keyword.as_str()) {
        return Err(err(line, format!("{keyword} is not supported by sandlot's builder")));
    }
    if !KNOWN.contains(&keyword.as_str()) {
        return Err(err(line, format!("unknown instruction {word:?}; supported: {}", KNOWN.join(" "))));
    }
    if rest.is_empty() {
        return Err(err(line, format!("{keyword} needs arguments")));
    }
    if rest.starts_with("<<") && matches!(keyword.as_str(), "RUN" | "COPY" | "ADD") {
        return Err(err(line, "heredocs (<<EOF) are not supported; put the script in a file and COPY it"));
    }
    Ok(Raw { line, keyword, args: rest.to_string() })
}

/// A command as `RUN`, `CMD` and `ENTRYPOINT` take it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Command {
    /// Shell form: run as `/bin/sh -c TEXT`.
    Shell(String),
    /// Exec form (a JSON array): run as it is.
    Exec(Vec<String>),
}

impl Command {
    /// The argv it runs.
    pub fn argv(&self) -> Vec<String> {
        match self {
            Command::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
            Command::Exec(v) => v.clone(),
        }
    }
}

/// A user and group as `USER` and `--chown` write them (`1000`, `app`, `app:staff`, `0:0`), before
/// the builder looks names up in the image's `/etc/passwd` and `/etc/group`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Owner {
    /// The user: a name or a numeric id.
    pub user: String,
    /// The group, when one was written.
    pub group: Option<String>,
}

impl Owner {
    /// `USER`'s or `--chown`'s value.
    pub fn parse(spec: &str) -> Owner {
        match spec.split_once(':') {
            Some((u, g)) => Owner { user: u.to_string(), group: Some(g.to_string()) },
            None => Owner { user: spec.to_string(), group: None },
        }
    }

    /// Whether resolving needs the image's account files (a name other than `root`).
    pub fn names_an_account(&self) -> bool {
        let named = |s: &str| s != "root" && s.parse::<u32>().is_err();
        named(&self.user) || self.group.as_deref().is_some_and(named)
    }

    /// The ids, with names looked up in `passwd` and `group` (the image's files, empty if it has
    /// none). Without a group: the user's primary group from `passwd`; for an id `passwd` does not
    /// list, that id again for `--chown` (`chown`) and group 0 for a process (`USER`), as Docker and
    /// buildah do.
    pub fn resolve(&self, passwd: &str, group: &str, chown: bool) -> Result<Chown, String> {
        let users = accounts(passwd);
        let groups = accounts(group);
        let (uid, primary) = match self.user.parse::<u32>() {
            Ok(uid) => (uid, users.iter().find(|a| a.1 == uid).map(|a| a.2)),
            Err(_) if self.user == "root" => (0, Some(0)),
            Err(_) => match users.iter().find(|a| a.0 == self.user) {
                Some(a) => (a.1, Some(a.2)),
                None => return Err(format!("there is no user {:?} in the image's /etc/passwd", self.user)),
            },
        };
        let gid = match self.group.as_deref() {
            None => primary.unwrap_or(if chown { uid } else { 0 }),
            Some(g) => match g.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) if g == "root" => 0,
                Err(_) => match groups.iter().find(|a| a.0 == g) {
                    Some(a) => a.1,
                    None => return Err(format!("there is no group {g:?} in the image's /etc/group")),
                },
            },
        };
        if uid >= 1 << 16 || gid >= 1 << 16 {
            return Err(format!("{}: ids must be below 65536", self.spec()));
        }
        Ok(Chown { uid, gid })
    }

    fn spec(&self) -> String {
        match &self.group {
            Some(g) => format!("{}:{g}", self.user),
            None => self.user.clone(),
        }
    }
}

/// `(name, id, primary group id)` of each line of a passwd or group file (the group file's third
/// field is its id again); lines that do not parse are left out.
fn accounts(text: &str) -> Vec<(&str, u32, u32)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let id = f.get(2)?.parse().ok()?;
            let primary = f.get(3).and_then(|g| g.parse().ok()).unwrap_or(id);
            Some((*f.first()?, id, primary))
        })
        .collect()
}

/// The ids `--chown` (or `USER`) came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Chown {
    /// Owner id inside the image.
    pub uid: u32,
    /// Group id inside the image.
    pub gid: u32,
}

/// One resolved instruction: variables substituted, forms decided.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Instruction {
    /// `FROM`: an image name, an earlier stage's name, or `scratch` for none.
    From {
        /// The image name as written (after substitution).
        image: String,
        /// The stage's name (`AS NAME`), lower case.
        stage: Option<String>,
    },
    /// `RUN`.
    Run(Command),
    /// `COPY` or `ADD` of files from the build context, or from a stage or image (`--from`).
    Copy {
        /// Paths in the context, relative to its root (or in the `--from` image), wildcards allowed.
        sources: Vec<String>,
        /// Where they go in the image (absolute: joined with the WORKDIR).
        dest: String,
        /// `--from`: an earlier stage (name or index) or an image the sources are read from.
        from: Option<String>,
        /// Owner of what is copied (root when absent; the stage's owners with `--from`).
        chown: Option<Owner>,
        /// `--chmod`: the permission bits of what is copied.
        chmod: Option<u32>,
        /// Written as `ADD` (which copies local files as `COPY` does).
        add: bool,
    },
    /// `ENV`: variables set, in order.
    Env(Vec<(String, String)>),
    /// `ARG`: a build argument and the value it has in this build (`None`: unset).
    Arg {
        /// Its name.
        name: String,
        /// Its value: the `--build-arg`, else the default, else none.
        value: Option<String>,
    },
    /// `WORKDIR`: the new working directory (absolute).
    Workdir(String),
    /// `USER`.
    User(String),
    /// `LABEL`: labels set, in order.
    Label(Vec<(String, String)>),
    /// `CMD`.
    Cmd(Command),
    /// `ENTRYPOINT`.
    Entrypoint(Command),
    /// `EXPOSE`: ports as `N/tcp` or `N/udp`.
    Expose(Vec<String>),
}

/// The variables in effect while a Dockerfile is walked, and the working directory (relative paths
/// are resolved against it).
#[derive(Debug, Clone, Default)]
pub struct Vars {
    /// `--build-arg` values given to the build.
    build_args: BTreeMap<String, String>,
    /// `ARG`s declared so far and their values.
    args: BTreeMap<String, Option<String>>,
    /// The environment: the base image's, then each `ENV`.
    env: BTreeMap<String, String>,
    /// The current WORKDIR (`/` when none).
    workdir: String,
    /// Whether the FROM has been seen (ARGs before it are visible to FROM only).
    after_from: bool,
    /// ARGs declared before FROM: their values may be brought in after it by `ARG NAME`.
    global_args: BTreeMap<String, Option<String>>,
    /// Build args some ARG has used.
    used: std::collections::BTreeSet<String>,
}

impl Vars {
    /// Variables for a build with `--build-arg` values `build_args`.
    pub fn new(build_args: BTreeMap<String, String>) -> Vars {
        Vars { build_args, workdir: "/".into(), ..Default::default() }
    }

    /// Takes the base image's environment and working directory (after FROM resolved it).
    pub fn set_base(&mut self, env: &[String], workdir: Option<&str>) {
        for kv in env {
            if let Some((k, v)) = kv.split_once('=') {
                self.env.insert(k.to_string(), v.to_string());
            }
        }
        if let Some(w) = workdir.filter(|w| w.starts_with('/')) {
            self.workdir = w.to_string();
        }
    }

    /// The build args declared by an ARG and given a value, as `RUN` sees them (in its environment,
    /// under any ENV of the same name, as Docker does).
    pub fn run_args(&self) -> BTreeMap<String, String> {
        self.args
            .iter()
            .filter(|(k, _)| !self.env.contains_key(*k))
            .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
            .collect()
    }

    /// `--build-arg` names no ARG declared (Docker warns about them; so does the build).
    pub fn unused_build_args(&self) -> Vec<String> {
        self.build_args.keys().filter(|k| !self.used.contains(*k)).cloned().collect()
    }

    fn lookup(&self, name: &str) -> Option<String> {
        // ENV wins over ARG of the same name (Docker's rule).
        if let Some(v) = self.env.get(name) {
            return Some(v.clone());
        }
        if self.after_from {
            self.args.get(name).cloned().flatten()
        } else {
            self.global_args.get(name).cloned().flatten()
        }
    }

    /// Resolves `raw`, updating the variables and working directory for the instructions after it.
    pub fn resolve(&mut self, raw: &Raw) -> Result<Instruction, DockerfileError> {
        let line = raw.line;
        let args = raw.args.as_str();
        let ins = match raw.keyword.as_str() {
            "FROM" => {
                // Only the global ARGs reach FROM (this stage's ARGs and ENVs are not in effect yet).
                self.after_from = false;
                let words = self.words(line, args)?;
                let (image, stage) = match words.as_slice() {
                    [image] => (image.clone(), None),
                    [image, as_, name] if as_.eq_ignore_ascii_case("as") => {
                        let name = name.to_ascii_lowercase();
                        let ok = name.starts_with(|c: char| c.is_ascii_alphabetic())
                            && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
                        if !ok {
                            return Err(err(line, format!("FROM … AS {name:?}: a stage name is letters, digits, `_`, `.` and `-`, starting with a letter")));
                        }
                        (image.clone(), Some(name))
                    }
                    [flag, ..] if flag.starts_with("--") => {
                        return Err(err(line, format!("FROM {flag} is not supported")));
                    }
                    _ => return Err(err(line, "write FROM as `FROM IMAGE` (or `FROM IMAGE AS NAME`)")),
                };
                // A stage starts afresh: its own ARGs, the base's ENV and WORKDIR (set_base).
                self.after_from = true;
                self.args.clear();
                self.env.clear();
                self.workdir = "/".into();
                Instruction::From { image, stage }
            }
            "RUN" => Instruction::Run(command(line, args)?),
            "CMD" => Instruction::Cmd(command(line, args)?),
            "ENTRYPOINT" => Instruction::Entrypoint(command(line, args)?),
            "COPY" | "ADD" => self.copy(line, raw.keyword == "ADD", args)?,
            "ENV" => {
                let pairs = self.pairs(line, "ENV", args)?;
                for (k, v) in &pairs {
                    self.env.insert(k.clone(), v.clone());
                }
                Instruction::Env(pairs)
            }
            "LABEL" => Instruction::Label(self.pairs(line, "LABEL", args)?),
            "ARG" => {
                let words = self.words(line, args)?;
                let [word] = words.as_slice() else {
                    return Err(err(line, "write ARG as `ARG NAME` or `ARG NAME=default`, one per line"));
                };
                let (name, default) = match word.split_once('=') {
                    Some((n, d)) => (n.to_string(), Some(d.to_string())),
                    None => (word.clone(), None),
                };
                check_var_name(line, "ARG", &name)?;
                let value = match self.build_args.get(&name) {
                    Some(v) => {
                        self.used.insert(name.clone());
                        Some(v.clone())
                    }
                    // `ARG NAME` after FROM brings in the value a global ARG of that name had.
                    None => default.or_else(|| self.global_args.get(&name).cloned().flatten()),
                };
                if self.after_from {
                    self.args.insert(name.clone(), value.clone());
                } else {
                    self.global_args.insert(name.clone(), value.clone());
                }
                Instruction::Arg { name, value }
            }
            "WORKDIR" => {
                let w = self.single(line, "WORKDIR", args)?;
                let w = self.absolute(&w);
                check_path(line, "WORKDIR", &w)?;
                self.workdir = w;
                Instruction::Workdir(self.workdir.clone())
            }
            "USER" => Instruction::User(self.single(line, "USER", args)?),
            "EXPOSE" => {
                let mut ports = Vec::new();
                for w in self.words(line, args)? {
                    let (port, proto) = w.split_once('/').unwrap_or((w.as_str(), "tcp"));
                    let proto = proto.to_ascii_lowercase();
                    if !matches!(port.parse::<u16>(), Ok(p) if p > 0) || !matches!(proto.as_str(), "tcp" | "udp") {
                        return Err(err(line, format!("EXPOSE {w:?}: write a port as N, N/tcp or N/udp")));
                    }
                    ports.push(format!("{port}/{proto}"));
                }
                Instruction::Expose(ports)
            }
            k => return Err(err(line, format!("unknown instruction {k}"))),
        };
        Ok(ins)
    }

    /// `path` made absolute against the WORKDIR, with `.` and empty components removed.
    fn absolute(&self, path: &str) -> String {
        let joined = if path.starts_with('/') { path.to_string() } else { format!("{}/{path}", self.workdir) };
        let mut out = format!("/{}", crate::lexical_components(&joined).join("/"));
        // `.` and `..` name directories, as a trailing `/` does (`COPY app.py .` copies into it).
        let names_a_dir =
            path.ends_with('/') || path == "." || path == ".." || path.ends_with("/.") || path.ends_with("/..");
        if names_a_dir && out != "/" {
            out.push('/');
        }
        out
    }

    fn copy(&mut self, line: usize, add: bool, args: &str) -> Result<Instruction, DockerfileError> {
        let what = if add { "ADD" } else { "COPY" };
        let mut rest = args.trim();
        let (mut chown, mut chmod, mut from) = (None, None, None);
        while let Some(flag) = rest.strip_prefix("--") {
            let end = flag.find(char::is_whitespace).unwrap_or(flag.len());
            let (f, after) = flag.split_at(end);
            rest = after.trim_start();
            match f.split_once('=') {
                Some(("chown", v)) => {
                    let v = self.expand(line, v)?;
                    if v.is_empty() || v.starts_with(':') || v.ends_with(':') {
                        return Err(err(line, format!("{what} --chown={v}: write USER[:GROUP], names or ids")));
                    }
                    chown = Some(Owner::parse(&v));
                }
                Some(("chmod", v)) => {
                    let v = self.expand(line, v)?;
                    chmod = match u32::from_str_radix(&v, 8) {
                        Ok(m) if m <= 0o7777 && !v.is_empty() => Some(m),
                        _ => {
                            return Err(err(
                                line,
                                format!("{what} --chmod={v}: write the mode in octal (--chmod=0755)"),
                            ))
                        }
                    };
                }
                Some(("from", v)) if !add => {
                    let v = self.expand(line, v)?;
                    if v.is_empty() {
                        return Err(err(line, "COPY --from= needs a stage name, a stage index or an image"));
                    }
                    from = Some(v);
                }
                // Docker's `--link` changes how a layer is cached, not what it holds.
                None if f == "link" => {}
                Some(("link", "true" | "false")) => {}
                _ => {
                    return Err(err(
                        line,
                        format!(
                            "{what} --{f} is not supported (--chown=USER[:GROUP], --chmod=OCTAL{})",
                            if add { "" } else { ", --from=STAGE" }
                        ),
                    ))
                }
            }
        }
        let words = match json_array(rest) {
            Some(v) => v.into_iter().map(|w| self.expand(line, &w)).collect::<Result<Vec<_>, _>>()?,
            None => self.words(line, rest)?,
        };
        if words.len() < 2 {
            return Err(err(line, format!("{what} needs a source and a destination: `{what} SRC... DEST`")));
        }
        let (dest, sources) = words.split_last().expect("two or more");
        if sources.len() > MAX_COPY_SOURCES {
            return Err(err(line, format!("{what} with more than {MAX_COPY_SOURCES} sources: copy their directory")));
        }
        for s in sources {
            check_path(line, what, s)?;
            if add && (s.contains("://") || s.starts_with("git@")) {
                return Err(err(
                    line,
                    format!("ADD {s}: the builder fetches nothing from the network; download it in a RUN step (with --allow for its host) or put it in the context"),
                ));
            }
        }
        let dest_abs = self.absolute(dest);
        check_path(line, what, &dest_abs)?;
        // Several sources go into a directory, which Docker wants written with a trailing slash.
        if sources.len() > 1 && !dest_abs.ends_with('/') {
            return Err(err(line, format!("{what} with several sources needs a directory destination ending in `/`")));
        }
        Ok(Instruction::Copy { sources: sources.to_vec(), dest: dest_abs, from, chown, chmod, add })
    }

    fn single(&self, line: usize, what: &str, args: &str) -> Result<String, DockerfileError> {
        let words = self.words(line, args)?;
        match words.as_slice() {
            [w] if !w.is_empty() => Ok(w.clone()),
            _ => Err(err(line, format!("{what} takes one value"))),
        }
    }

    /// `K=V ...` pairs, or the legacy `K V` form (the rest of the line is the value).
    fn pairs(&self, line: usize, what: &str, args: &str) -> Result<Vec<(String, String)>, DockerfileError> {
        let words = self.words(line, args)?;
        let first_is_pair = lex(args, &|_| None).ok().and_then(|w| w.first().map(|w| w.contains('='))).unwrap_or(false);
        let mut out = Vec::new();
        if !first_is_pair {
            let Some((k, v)) = words.split_first() else {
                return Err(err(line, format!("{what} needs NAME=value")));
            };
            if v.is_empty() {
                return Err(err(line, format!("{what} {k}: give a value (`{what} {k}=value`)")));
            }
            if what == "ENV" {
                check_var_name(line, what, k)?;
            }
            out.push((k.clone(), v.join(" ")));
            return Ok(out);
        }
        for w in words {
            let Some((k, v)) = w.split_once('=') else {
                return Err(err(
                    line,
                    format!("{what}: {w:?} is not NAME=value (mixing the two forms is not allowed)"),
                ));
            };
            if what == "ENV" {
                check_var_name(line, what, k)?;
            } else if k.is_empty() {
                return Err(err(line, format!("{what}: a label needs a name")));
            }
            out.push((k.to_string(), v.to_string()));
        }
        Ok(out)
    }

    fn words(&self, line: usize, s: &str) -> Result<Vec<String>, DockerfileError> {
        lex(s, &|name| self.lookup(name)).map_err(|m| err(line, m))
    }

    fn expand(&self, line: usize, s: &str) -> Result<String, DockerfileError> {
        // A JSON element is one word already: substitute without splitting on blanks.
        let quoted = format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
        let words = self.words(line, &quoted)?;
        Ok(words.into_iter().next().unwrap_or_default())
    }
}

fn check_var_name(line: usize, what: &str, k: &str) -> Result<(), DockerfileError> {
    let ok = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(err(line, format!("{what}: {k:?} is not a variable name (letters, digits, _)")));
    }
    Ok(())
}

/// The exec form if `args` is a JSON array of strings, else `None`.
fn json_array(args: &str) -> Option<Vec<String>> {
    if !args.starts_with('[') {
        return None;
    }
    serde_json::from_str::<Vec<String>>(args).ok()
}

fn command(line: usize, args: &str) -> Result<Command, DockerfileError> {
    match json_array(args) {
        Some(v) if v.is_empty() || v[0].is_empty() => Err(err(line, "an exec-form command needs a program")),
        Some(v) => Ok(Command::Exec(v)),
        None => Ok(Command::Shell(args.to_string())),
    }
}

/// Splits `s` into words as Docker's shell lexer does for the instructions it substitutes: blanks
/// separate words, `'…'` is literal, `"…"` substitutes, `\` escapes the next character (inside double
/// quotes only `"`, `\` and `$`), `$NAME` and `${NAME}` substitute (unset: empty), `${NAME:-word}` and
/// `${NAME:+word}` as in sh.
fn lex(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Vec<String>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                i += 1;
            }
            '\'' => {
                in_word = true;
                let end = chars[i + 1..].iter().position(|&c| c == '\'').ok_or("unterminated single quote")?;
                cur.extend(&chars[i + 1..i + 1 + end]);
                i += end + 2;
            }
            '"' => {
                in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err("unterminated double quote".into()),
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') if matches!(chars.get(i + 1), Some('"' | '\\' | '$')) => {
                            cur.push(chars[i + 1]);
                            i += 2;
                        }
                        Some('$') => i = substitute(&chars, i, &mut cur, lookup)?,
                        Some(&c) => {
                            cur.push(c);
                            i += 1;
                        }
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(&n) = chars.get(i + 1) {
                    cur.push(n);
                }
                i += 2;
            }
            '$' => {
                in_word = true;
                i = substitute(&chars, i, &mut cur, lookup)?;
            }
            c => {
                in_word = true;
                cur.push(c);
                i += 1;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Substitutes the variable at `chars[i]` (a `$`) into `out`; returns the index after it.
fn substitute(
    chars: &[char],
    i: usize,
    out: &mut String,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<usize, String> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    match chars.get(i + 1) {
        Some('{') => {
            let end = chars[i + 2..].iter().position(|&c| c == '}').ok_or("unterminated ${")? + i + 2;
            let inner: String = chars[i + 2..end].iter().collect();
            let (name, op) = match inner.find(':') {
                Some(p) => (&inner[..p], Some(&inner[p..])),
                None => (inner.as_str(), None),
            };
            if name.is_empty() || !name.chars().all(is_name) {
                return Err(format!("${{{inner}}} is not a variable reference"));
            }
            let value = lookup(name).filter(|v| !v.is_empty());
            match op {
                None => out.push_str(&lookup(name).unwrap_or_default()),
                Some(op) if op.starts_with(":-") => out.push_str(&value.unwrap_or_else(|| op[2..].to_string())),
                Some(op) if op.starts_with(":+") => {
                    if value.is_some() {
                        out.push_str(&op[2..]);
                    }
                }
                Some(op) => {
                    return Err(format!("${{{name}{op}}}: only ${{NAME:-default}} and ${{NAME:+alt}} are supported"))
                }
            }
            Ok(end + 1)
        }
        Some(&c) if is_name(c) => {
            let len = chars[i + 1..].iter().take_while(|&&c| is_name(c)).count();
            let name: String = chars[i + 1..i + 1 + len].iter().collect();
            out.push_str(&lookup(&name).unwrap_or_default());
            Ok(i + 1 + len)
        }
        _ => {
            out.push('$');
            Ok(i + 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_all(text: &str, build_args: &[(&str, &str)]) -> Result<Vec<(usize, Instruction)>, DockerfileError> {
        let mut vars = Vars::new(build_args.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        parse(text)?.iter().map(|r| vars.resolve(r).map(|i| (r.line, i))).collect()
    }

    #[test]
    fn every_instruction_keeps_its_first_line_across_comments_and_continuations() {
        let text = "# a comment\nFROM busybox\n\nRUN echo a \\\n  # inside\n  && echo b\nENV A=1\n";
        let raws = parse(text).unwrap();
        assert_eq!(
            raws.iter().map(|r| (r.line, r.keyword.as_str())).collect::<Vec<_>>(),
            [(2, "FROM"), (4, "RUN"), (7, "ENV")]
        );
        assert_eq!(raws[1].args, "echo a && echo b");
    }

    #[test]
    fn run_cmd_and_entrypoint_take_shell_and_exec_forms() {
        let got =
            resolve_all("FROM scratch\nRUN echo $HOME\nCMD [\"/bin/sh\", \"-c\", \"x\"]\nENTRYPOINT [\"/e\"]\n", &[])
                .unwrap();
        assert_eq!(got[1].1, Instruction::Run(Command::Shell("echo $HOME".into())));
        assert_eq!(got[2].1, Instruction::Cmd(Command::Exec(vec!["/bin/sh".into(), "-c".into(), "x".into()])));
        assert_eq!(got[3].1, Instruction::Entrypoint(Command::Exec(vec!["/e".into()])));
        assert_eq!(Command::Shell("true".into()).argv(), ["/bin/sh", "-c", "true"]);
    }

    #[test]
    fn env_takes_pairs_with_quotes_and_the_legacy_form() {
        let got =
            resolve_all("FROM scratch\nENV A=1 B=\"two words\" C='$A'\nENV D the rest $A\nENV E=${A}x\n", &[]).unwrap();
        assert_eq!(
            got[1].1,
            Instruction::Env(vec![
                ("A".into(), "1".into()),
                ("B".into(), "two words".into()),
                ("C".into(), "$A".into())
            ])
        );
        assert_eq!(got[2].1, Instruction::Env(vec![("D".into(), "the rest 1".into())]));
        assert_eq!(got[3].1, Instruction::Env(vec![("E".into(), "1x".into())]));
    }

    #[test]
    fn a_copy_to_dot_or_dot_dot_goes_into_that_directory() {
        let text = "FROM busybox\nWORKDIR /srv/app\nCOPY a .\nCOPY b ./\nCOPY c ..\nCOPY d sub/.\nCOPY e name\n";
        let got = resolve_all(text, &[]).unwrap();
        let dests: Vec<String> = got
            .iter()
            .filter_map(|(_, i)| if let Instruction::Copy { dest, .. } = i { Some(dest.clone()) } else { None })
            .collect();
        assert_eq!(dests, ["/srv/app/", "/srv/app/", "/srv/", "/srv/app/sub/", "/srv/app/name"]);
    }

    #[test]
    fn args_take_defaults_build_arg_overrides_and_substitute_where_docker_does() {
        let text = "ARG BASE=busybox\nFROM $BASE\nARG V=1\nARG W\nARG BASE\nWORKDIR /opt/${V}\nCOPY a ${W:-dflt}/\nRUN echo $V\nLABEL v=$V\n";
        let got = resolve_all(text, &[("V", "2")]).unwrap();
        assert_eq!(got[1].1, Instruction::From { image: "busybox".into(), stage: None });
        assert_eq!(got[2].1, Instruction::Arg { name: "V".into(), value: Some("2".into()) });
        assert_eq!(got[3].1, Instruction::Arg { name: "W".into(), value: None });
        assert_eq!(got[4].1, Instruction::Arg { name: "BASE".into(), value: Some("busybox".into()) });
        assert_eq!(got[5].1, Instruction::Workdir("/opt/2".into()));
        assert_eq!(
            got[6].1,
            Instruction::Copy {
                sources: vec!["a".into()],
                dest: "/opt/2/dflt/".into(),
                from: None,
                chown: None,
                chmod: None,
                add: false
            }
        );
        // RUN is left to its shell, which sees the ARG in its environment.
        assert_eq!(got[7].1, Instruction::Run(Command::Shell("echo $V".into())));
        assert_eq!(got[8].1, Instruction::Label(vec![("v".into(), "2".into())]));
        let mut vars = Vars::new([("V".to_string(), "2".to_string()), ("X".to_string(), "1".to_string())].into());
        for r in parse(text).unwrap() {
            vars.resolve(&r).unwrap();
        }
        assert_eq!(vars.run_args().get("V").map(String::as_str), Some("2"));
        assert_eq!(vars.unused_build_args(), ["X"]);
    }

    #[test]
    fn copy_takes_chown_chmod_from_and_wildcards() {
        let text = "FROM scratch AS Build\nFROM scratch\nCOPY --chown=1000:100 --chmod=750 a* b /dst/\n\
                    ADD --chown=app f /f\nCOPY --from=build --link /out /out\n";
        let got = resolve_all(text, &[]).unwrap();
        assert_eq!(got[0].1, Instruction::From { image: "scratch".into(), stage: Some("build".into()) });
        assert_eq!(
            got[2].1,
            Instruction::Copy {
                sources: vec!["a*".into(), "b".into()],
                dest: "/dst/".into(),
                from: None,
                chown: Some(Owner { user: "1000".into(), group: Some("100".into()) }),
                chmod: Some(0o750),
                add: false
            }
        );
        assert_eq!(
            got[3].1,
            Instruction::Copy {
                sources: vec!["f".into()],
                dest: "/f".into(),
                from: None,
                chown: Some(Owner { user: "app".into(), group: None }),
                chmod: None,
                add: true
            }
        );
        assert!(matches!(&got[4].1, Instruction::Copy { from: Some(f), .. } if f == "build"));
        for bad in ["COPY --chmod=u+x a /a", "COPY --chmod=99 a /a", "COPY --chown= a /a", "ADD --from=x a /a"] {
            let e = resolve_all(&format!("FROM scratch\n{bad}\n"), &[]).unwrap_err();
            assert_eq!(e.line, 2, "{bad}: {e}");
        }
        let e = resolve_all("FROM scratch\nCOPY a b /notadir\n", &[]).unwrap_err();
        assert!(e.message.contains("ending in `/`"), "{e}");
    }

    #[test]
    fn owners_resolve_names_through_passwd_and_group_as_docker_does() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\napp:x:1501:1500::/home/app:/bin/sh\n";
        let group = "root:x:0:\ncrew:x:1500:\nstaff:x:50:\n";
        let r = |spec: &str, chown: bool| Owner::parse(spec).resolve(passwd, group, chown);
        assert_eq!(r("app", true), Ok(Chown { uid: 1501, gid: 1500 }));
        assert_eq!(r("app:staff", true), Ok(Chown { uid: 1501, gid: 50 }));
        assert_eq!(r("1501", false), Ok(Chown { uid: 1501, gid: 1500 }));
        // An id passwd does not list: its own number as the group for --chown, group 0 for USER.
        assert_eq!(r("1234", true), Ok(Chown { uid: 1234, gid: 1234 }));
        assert_eq!(r("1234", false), Ok(Chown { uid: 1234, gid: 0 }));
        assert_eq!(r("root:crew", true), Ok(Chown { uid: 0, gid: 1500 }));
        assert!(r("nobody", true).unwrap_err().contains("no user \"nobody\""));
        assert!(r("app:nogroup", true).unwrap_err().contains("no group"));
        assert!(r("70000", true).unwrap_err().contains("below 65536"));
        assert!(Owner::parse("app").names_an_account());
        assert!(!Owner::parse("0:root").names_an_account());
    }

    #[test]
    fn each_from_starts_a_stage_with_only_the_global_args() {
        let text =
            "ARG V=1\nFROM scratch AS a\nARG V\nENV E=x\nWORKDIR /w\nFROM a\nCOPY f ${E:-none}/\nARG V\nLABEL v=$V\n";
        let got = resolve_all(text, &[]).unwrap();
        assert_eq!(got[5].1, Instruction::From { image: "a".into(), stage: None });
        // The second stage does not see the first's ENV (its base's would come from set_base).
        assert!(matches!(&got[6].1, Instruction::Copy { dest, .. } if dest == "/none/"), "{:?}", got[6].1);
        assert_eq!(got[8].1, Instruction::Label(vec![("v".into(), "1".into())]));
        assert!(resolve_all("FROM scratch AS 1x\n", &[]).unwrap_err().message.contains("stage name"));
    }

    #[test]
    fn add_of_a_url_is_refused_because_the_daemon_fetches_nothing() {
        let e = resolve_all("FROM scratch\n\nADD https://example.com/x.tgz /x\n", &[]).unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("fetches nothing"), "{e}");
    }

    #[test]
    fn workdir_user_expose_resolve() {
        let got =
            resolve_all("FROM scratch\nWORKDIR /a\nWORKDIR b/../c\nUSER 1000:1000\nEXPOSE 80 53/UDP\n", &[]).unwrap();
        assert_eq!(got[2].1, Instruction::Workdir("/a/c".into()));
        assert_eq!(got[3].1, Instruction::User("1000:1000".into()));
        assert_eq!(got[4].1, Instruction::Expose(vec!["80/tcp".into(), "53/udp".into()]));
        assert!(resolve_all("FROM scratch\nEXPOSE http\n", &[]).unwrap_err().message.contains("EXPOSE"));
    }

    #[test]
    fn unknown_unsupported_and_misplaced_instructions_are_refused_naming_their_line() {
        let e = parse("FROM scratch\nFOO bar\n").unwrap_err();
        assert_eq!((e.line, e.to_string().starts_with("Dockerfile line 2: unknown instruction")), (2, true), "{e}");
        let e = parse("FROM scratch\nVOLUME /data\n").unwrap_err();
        assert!(e.message.contains("not supported"), "{e}");
        assert_eq!(parse("FROM a\nRUN true\nFROM b\n").unwrap().len(), 3);
        let e = parse("RUN true\nFROM a\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(parse("# nothing\n").unwrap_err().message.contains("no FROM"));
        assert!(parse("FROM a\nRUN <<EOF\n").unwrap_err().message.contains("heredocs"));
        assert!(parse("FROM a\nRUN\n").unwrap_err().message.contains("needs arguments"));
    }

    #[test]
    fn the_lexer_handles_escapes_and_unterminated_quotes() {
        let none = |_: &str| None;
        assert_eq!(lex(r#"a\ b "c\"d" 'e f'"#, &none).unwrap(), ["a b", "c\"d", "e f"]);
        assert!(lex("'open", &none).is_err());
        assert!(lex("\"open", &none).is_err());
        assert_eq!(lex("$ x", &none).unwrap(), ["$", "x"]);
        let one = |n: &str| (n == "A").then(|| "1".to_string());
        assert_eq!(lex("${A:+set}${B:-unset}$A$B", &one).unwrap(), ["setunset1"]);
        assert!(lex("${A:?x}", &one).is_err());
    }
}
