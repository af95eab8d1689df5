//! `sandlot serve --config FILE`: the same options as the command line, in TOML.
//!
//! Keys are the long option names (`listen`, `state-dir`, `resolve`, `extra-ca`, …); a list repeats a
//! repeatable option; `true` sets a flag. The file's options are placed before the command line's, so
//! an option given on the command line wins (lists add up). They count as command-line options: they
//! also win over the environment variables some options read (`SANDLOT_LISTEN`, `SANDLOT_STATE_DIR`).
//!
//! ```toml
//! listen = "127.0.0.1:7423"
//! state-dir = "/var/lib/sandlot"
//! resolve = ["db.internal=10.20.0.5", "pypi.internal=10.20.0.6"]
//! extra-ca = ["/etc/sandlot/internal-ca.pem"]
//! default-memory-mb = 1024
//! ```

use std::ffi::OsString;
use std::path::PathBuf;

/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "SANDLOT_CONFIG";

/// Returns `args` (the process's argv) with the options of the `serve` config file inserted after
/// `serve` (or `doctor`, which takes the same options), if that is the command and a config file is named (`--config FILE`, `--config=FILE`
/// or `$SANDLOT_CONFIG`). `known` are the long option names `serve` accepts.
pub fn with_config_file(args: Vec<OsString>, known: &[String]) -> Result<Vec<OsString>, String> {
    if !matches!(args.get(1).and_then(|a| a.to_str()), Some("serve" | "doctor")) {
        return Ok(args);
    }
    let Some(path) = config_path(&args[2..]) else { return Ok(args) };
    let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let from_file = to_args(&text, known).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = args[..2].to_vec();
    out.extend(from_file);
    out.extend_from_slice(&args[2..]);
    Ok(out)
}

fn config_path(rest: &[OsString]) -> Option<PathBuf> {
    // As clap does, the last `--config` wins; arguments that are not UTF-8 are simply not it.
    let mut found = None;
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let Some(a) = a.to_str() else { continue };
        if a == "--" {
            break;
        }
        if a == "--config" {
            found = it.next().map(PathBuf::from);
        } else if let Some(p) = a.strip_prefix("--config=") {
            found = Some(PathBuf::from(p));
        }
    }
    found.or_else(|| std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()).map(PathBuf::from))
}

/// Command-line arguments equivalent to a config file.
fn to_args(text: &str, known: &[String]) -> Result<Vec<OsString>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut out = Vec::new();
    for (key, value) in &table {
        if key == "config" || !known.iter().any(|k| k == key) {
            return Err(format!("unknown option `{key}` (see `sandlot serve --help` for the option names)"));
        }
        // `--key=value`, so a value that starts with `-` is not taken for an option.
        let flag = format!("--{key}");
        let scalar = |v: &toml::Value| -> Result<Option<String>, String> {
            match v {
                toml::Value::String(s) => Ok(Some(s.clone())),
                toml::Value::Integer(i) => Ok(Some(i.to_string())),
                toml::Value::Float(f) => Ok(Some(f.to_string())),
                toml::Value::Boolean(true) => Ok(None),
                other => Err(format!("`{key}`: expected a string, number or true, got {}", other.type_str())),
            }
        };
        match value {
            toml::Value::Boolean(false) => {}
            toml::Value::Array(items) => {
                for item in items {
                    let v = scalar(item)?.ok_or_else(|| format!("`{key}`: a list holds values, not true"))?;
                    out.push(OsString::from(format!("{flag}={v}")));
                }
            }
            v => match scalar(v)? {
                Some(v) => out.push(OsString::from(format!("{flag}={v}"))),
                None => out.push(OsString::from(&flag)),
            },
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<String> {
        ["listen", "resolve", "no-disk-quota", "default-cpu"].iter().map(|s| s.to_string()).collect()
    }

    fn strs(v: &[OsString]) -> Vec<&str> {
        v.iter().map(|a| a.to_str().unwrap()).collect()
    }

    #[test]
    fn a_file_becomes_options_placed_before_the_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sandlot.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:9\"\nresolve = [\"a.test=10.0.0.1\", \"b.test=::1\"]\nno-disk-quota = true\ndefault-cpu = 0.5\n",
        )
        .unwrap();
        let argv: Vec<OsString> = ["sandlot", "serve", "--config", file.to_str().unwrap(), "--listen", "127.0.0.1:10"]
            .iter()
            .map(OsString::from)
            .collect();
        let out = with_config_file(argv, &known()).unwrap();
        assert_eq!(
            strs(&out),
            [
                "sandlot",
                "serve",
                "--default-cpu=0.5",
                "--listen=127.0.0.1:9",
                "--no-disk-quota",
                "--resolve=a.test=10.0.0.1",
                "--resolve=b.test=::1",
                "--config",
                file.to_str().unwrap(),
                "--listen",
                "127.0.0.1:10",
            ]
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        assert!(to_args("lisen = \"x\"", &known()).unwrap_err().contains("unknown option `lisen`"));
        assert!(to_args("listen = {a = 1}", &known()).unwrap_err().contains("`listen`: expected"));
        assert!(to_args("listen = ", &known()).is_err());
        let other: Vec<OsString> = ["sandlot", "run", "--config", "/nonexistent"].iter().map(OsString::from).collect();
        assert_eq!(with_config_file(other.clone(), &known()).unwrap(), other, "only `serve` reads a config");
    }
}
