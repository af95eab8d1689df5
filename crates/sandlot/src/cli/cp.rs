//! `sandlot sandbox cp`: one file, or a directory as a tar archive, between here and a sandbox.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use sandlot_client::api::{codes, FileKind};
use sandlot_client::{Client, Sandbox};

use super::{Conn, Doing};

/// Arguments of `sandlot sandbox cp`.
#[derive(clap::Args, Debug)]
pub struct CpArgs {
    /// Source: a local path, `-` (stdin), or ID:PATH.
    #[arg(value_name = "SRC")]
    src: String,
    /// Destination: a local path, `-` (stdout), or ID:PATH.
    #[arg(value_name = "DST")]
    dst: String,
    /// Copy a directory as a tar archive: upload a .tar file into a sandbox directory, or download a
    /// sandbox directory as a .tar file.
    #[arg(long)]
    tar: bool,
    #[command(flatten)]
    pub(super) conn: Conn,
}

/// One side of a copy.
#[derive(Debug, PartialEq, Eq)]
enum Endpoint {
    /// Standard input or output.
    Stdio,
    /// A path on this machine.
    Local(PathBuf),
    /// `ID:PATH`.
    Remote { id: String, path: String },
}

/// Parses one side: `-`, `ID:PATH` (an id has no `/` and does not start with `.`), or a local path.
/// A local path containing `:` can be written `./a:b`.
fn parse_endpoint(s: &str) -> anyhow::Result<Endpoint> {
    if s == "-" {
        return Ok(Endpoint::Stdio);
    }
    match s.split_once(':') {
        Some((id, path)) if !id.is_empty() && !id.contains('/') && !id.starts_with('.') => {
            if path.is_empty() {
                bail!("`{s}`: missing path after `{id}:` (e.g. {id}:/home/user/file)");
            }
            Ok(Endpoint::Remote { id: id.to_string(), path: path.to_string() })
        }
        _ => Ok(Endpoint::Local(PathBuf::from(s))),
    }
}

pub(super) fn cp(args: CpArgs) -> anyhow::Result<i32> {
    let src = parse_endpoint(&args.src)?;
    let dst = parse_endpoint(&args.dst)?;
    match (src, dst) {
        (local @ (Endpoint::Local(_) | Endpoint::Stdio), Endpoint::Remote { id, path }) => {
            let client = args.conn.client()?;
            upload(&client, local, &id, &path, args.tar)?;
        }
        (Endpoint::Remote { id, path }, local @ (Endpoint::Local(_) | Endpoint::Stdio)) => {
            let client = args.conn.client()?;
            download(&client, &id, &path, local, args.tar)?;
        }
        _ => bail!(
            "exactly one of SRC and DST must be in a sandbox, written ID:PATH \
             (e.g. sandlot sandbox cp ./app.py sb_123:/home/user/app.py)"
        ),
    }
    Ok(0)
}

fn upload(client: &Client, src: Endpoint, id: &str, path: &str, tar: bool) -> anyhow::Result<()> {
    let sandbox = client.sandbox(id);
    let target = format!("{id}:{path}");
    if tar {
        let result = match &src {
            Endpoint::Local(local) => {
                if local.is_dir() {
                    bail!(
                        "--tar uploads a tar archive, and {} is a directory; pack it first: \
                         tar -C {} -cf - . | sandlot sandbox cp --tar - {target}",
                        local.display(),
                        local.display()
                    );
                }
                let file = File::open(local).with_context(|| format!("opening {}", local.display()))?;
                sandbox.upload_tar(path, file)
            }
            _ => sandbox.upload_tar(path, io::stdin().lock()),
        }
        .doing(&format!("unpacking the archive into {target}"))?;
        let entries = result.entries.map(|n| format!(", {n} entries")).unwrap_or_default();
        eprintln!("sandlot: unpacked {} bytes{entries} into {id}:{}", result.bytes, result.path);
        return Ok(());
    }
    let result = match &src {
        Endpoint::Local(local) => {
            let meta = fs::metadata(local).with_context(|| format!("reading {}", local.display()))?;
            if meta.is_dir() {
                bail!(
                    "directory copy: use `sandlot sandbox cp` on a .tar file with --tar \
                     (e.g. tar -C {} -cf - . | sandlot sandbox cp --tar - {target})",
                    local.display()
                );
            }
            let name = local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let dest = remote_destination(&sandbox, path, &name);
            let file = File::open(local).with_context(|| format!("opening {}", local.display()))?;
            let mode = meta.permissions().mode() & 0o777;
            sandbox.write_file_from(&dest, file, Some(mode)).doing(&format!("writing {id}:{dest}"))?
        }
        _ => {
            if path.ends_with('/') {
                bail!("{target} names a directory; from standard input, give the file's full path");
            }
            sandbox.write_file_from(path, io::stdin().lock(), None).doing(&format!("writing {target}"))?
        }
    };
    eprintln!("sandlot: copied {} bytes to {id}:{}", result.bytes, result.path);
    Ok(())
}

/// Where a file named `name` lands for destination `path`: inside it when it ends with `/` or is an
/// existing directory, else at `path` itself.
fn remote_destination(sandbox: &Sandbox, path: &str, name: &str) -> String {
    if name.is_empty() {
        return path.to_string();
    }
    if path.ends_with('/') {
        return format!("{path}{name}");
    }
    match sandbox.stat(path) {
        Ok(stat) if stat.kind == FileKind::Dir => format!("{path}/{name}"),
        // Missing (the usual case) or unreadable: let the write report any problem.
        _ => path.to_string(),
    }
}

fn download(client: &Client, id: &str, path: &str, dst: Endpoint, tar: bool) -> anyhow::Result<()> {
    let sandbox = client.sandbox(id);
    let source = format!("{id}:{path}");
    let fetch = |out: &mut dyn Write| -> anyhow::Result<u64> {
        if tar {
            return sandbox.download_tar(path, out).doing(&format!("downloading {source} as a tar archive"));
        }
        sandbox.read_file_to(path, out).map_err(|err| {
            if err.code() == Some(codes::WRONG_FILE_KIND) {
                anyhow::anyhow!(
                    "{source} is a directory; download it as a tar archive: \
                     sandlot sandbox cp --tar {source} dir.tar"
                )
            } else {
                anyhow::Error::new(err).context(format!("reading {source}"))
            }
        })
    };
    let (bytes, written_to) = match dst {
        Endpoint::Local(local) => {
            let local = local_destination(&local, path, tar);
            (write_atomically(&local, fetch)?, local.display().to_string())
        }
        _ => {
            let mut out = io::stdout().lock();
            (fetch(&mut out)?, "standard output".to_string())
        }
    };
    eprintln!("sandlot: copied {bytes} bytes from {source} to {written_to}");
    Ok(())
}

/// A local destination that is an existing directory receives the file under its sandbox name.
fn local_destination(local: &Path, remote_path: &str, tar: bool) -> PathBuf {
    if !local.is_dir() {
        return local.to_path_buf();
    }
    let name = remote_path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    let name = match (name, tar) {
        ("", true) => "root.tar".to_string(),
        ("", false) => return local.to_path_buf(),
        (name, true) => format!("{name}.tar"),
        (name, false) => name.to_string(),
    };
    local.join(name)
}

/// Writes `local` through a temporary file beside it, renamed into place only when `fetch` succeeds,
/// so a failed download leaves an existing file untouched.
fn write_atomically(local: &Path, fetch: impl FnOnce(&mut dyn Write) -> anyhow::Result<u64>) -> anyhow::Result<u64> {
    let name = local.file_name().with_context(|| format!("{} is not a file path", local.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".sandlot-part");
    let tmp = local.with_file_name(tmp_name);
    let mut file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let result = fetch(&mut file).and_then(|bytes| {
        file.sync_all().with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, local).with_context(|| format!("moving the download to {}", local.display()))?;
        Ok(bytes)
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(parse_endpoint("-").unwrap(), Endpoint::Stdio);
        assert_eq!(
            parse_endpoint("sb_1:/home/user/a b").unwrap(),
            Endpoint::Remote { id: "sb_1".into(), path: "/home/user/a b".into() }
        );
        assert_eq!(parse_endpoint("./a:b").unwrap(), Endpoint::Local(PathBuf::from("./a:b")));
        assert_eq!(parse_endpoint("/tmp/x:y").unwrap(), Endpoint::Local(PathBuf::from("/tmp/x:y")));
        assert_eq!(parse_endpoint("file.txt").unwrap(), Endpoint::Local(PathBuf::from("file.txt")));
        assert!(parse_endpoint("sb_1:").is_err());
    }

    #[test]
    fn downloads_into_a_directory_keep_the_name() {
        let dir = std::env::temp_dir();
        assert_eq!(local_destination(&dir, "/home/user/out.csv", false), dir.join("out.csv"));
        assert_eq!(local_destination(&dir, "/home/user/project/", true), dir.join("project.tar"));
        let file = dir.join("surely-not-a-dir-sandlot");
        assert_eq!(local_destination(&file, "/x", false), file);
    }

    #[test]
    fn failed_download_leaves_no_partial_file() {
        let dir = std::env::temp_dir().join(format!("sandlot-cp-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.bin");
        fs::write(&target, b"old").unwrap();
        let err = write_atomically(&target, |out| {
            out.write_all(b"partial")?;
            bail!("connection broke")
        });
        assert!(err.is_err());
        assert_eq!(fs::read(&target).unwrap(), b"old");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        let bytes = write_atomically(&target, |out| {
            out.write_all(b"new")?;
            Ok(3)
        })
        .unwrap();
        assert_eq!(bytes, 3);
        assert_eq!(fs::read(&target).unwrap(), b"new");
        fs::remove_dir_all(&dir).unwrap();
    }
}
