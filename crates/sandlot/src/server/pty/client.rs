//! What a terminal's client sends, parsed without HTTP types (the fuzz target `pty_frames` compiles
//! this file as it is): the route's query string, and the control messages of its text frames.
//! Binary frames are the terminal's input, passed on as they are (at most
//! [`sandlot_api::PTY_MAX_INPUT_FRAME`] bytes, as the WebSocket's limits hold them).

use std::collections::BTreeMap;

use sandlot_api::{codes, PtyClientMessage, PtyServerMessage, PtySize, User};

/// What the query string asks for.
#[derive(Default, Debug, PartialEq)]
pub struct PtyQuery {
    pub cmd: Option<String>,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub user: Option<User>,
    pub rows: Option<u16>,
    pub cols: Option<u16>,
    pub pid: Option<u64>,
}

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a space).
fn decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                // Two hex digits: `from_str_radix` alone would also take a sign (`%+a`).
                let hex = b.get(i + 1..i + 3).filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                let v = hex
                    .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())
                    .ok_or_else(|| format!("bad escape in {s:?}"))?;
                out.push(v);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8"))
}

pub fn parse_query(raw: Option<&str>) -> Result<PtyQuery, String> {
    let mut q = PtyQuery::default();
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode(k)?, decode(v)?);
        let number = |what: &str| v.parse::<u64>().map_err(|_| format!("`{what}` must be a number, got {v:?}"));
        let once = |set: bool| if set { Err(format!("`{k}` is given twice")) } else { Ok(()) };
        match k.as_str() {
            "cmd" => {
                once(q.cmd.is_some())?;
                q.cmd = Some(v);
            }
            "argv" => q.argv.push(v),
            "cwd" => {
                once(q.cwd.is_some())?;
                q.cwd = Some(v);
            }
            "env" => {
                let (name, value) = v.split_once('=').ok_or_else(|| format!("`env` must be NAME=VALUE, got {v:?}"))?;
                q.env.insert(name.to_string(), value.to_string());
            }
            "user" => {
                once(q.user.is_some())?;
                q.user = Some(
                    serde_json::from_value(serde_json::Value::String(v.clone()))
                        .map_err(|_| format!("`user` must be `user` or `root`, got {v:?}"))?,
                );
            }
            "rows" | "cols" => {
                let n = u16::try_from(number(&k)?).map_err(|_| format!("`{k}` must be between 1 and 1000"))?;
                let slot = if k == "rows" { &mut q.rows } else { &mut q.cols };
                once(slot.is_some())?;
                *slot = Some(n);
            }
            "pid" => {
                once(q.pid.is_some())?;
                q.pid = Some(number("pid")?);
            }
            _ => {
                return Err(format!(
                    "unknown query parameter `{k}`; the terminal route takes cmd, argv, cwd, env, user, rows, cols \
                     and pid"
                ))
            }
        }
    }
    if q.pid.is_some()
        && (q.cmd.is_some() || !q.argv.is_empty() || q.cwd.is_some() || !q.env.is_empty() || q.user.is_some())
    {
        return Err("`pid` attaches to a running terminal: give it alone (rows and cols resize it)".into());
    }
    if q.cmd.is_some() && !q.argv.is_empty() {
        return Err("give either `cmd` (a shell command line) or `argv` (repeated), not both".into());
    }
    Ok(q)
}

/// The size a text frame resizes the terminal to, within [`sandlot_api::PTY_CELLS`]; else the
/// `error` frame that answers it.
pub fn control(text: &str) -> Result<PtySize, PtyServerMessage> {
    let invalid = |message: String| PtyServerMessage::Error { code: codes::INVALID_REQUEST.into(), message };
    match serde_json::from_str::<PtyClientMessage>(text) {
        Ok(PtyClientMessage::Resize { rows, cols }) => PtySize { rows, cols }.check().map_err(invalid),
        Err(e) => Err(invalid(format!(
            "a text frame must be a control message such as {{\"type\":\"resize\",\"rows\":24,\"cols\":80}} \
             (terminal input goes in binary frames): {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_parsed_with_repeats_and_escapes() {
        let q = parse_query(Some("argv=ls&argv=-l%20a+b&cwd=%2Ftmp&env=A%3D1&env=B=2=3&user=root&rows=40&cols=120"))
            .unwrap();
        assert_eq!(q.argv, ["ls", "-l a b"]);
        assert_eq!(q.cwd.as_deref(), Some("/tmp"));
        assert_eq!(q.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(q.env.get("B").map(String::as_str), Some("2=3"));
        assert_eq!((q.user, q.rows, q.cols), (Some(User::Root), Some(40), Some(120)));
        assert_eq!(parse_query(None).unwrap(), PtyQuery::default());
        assert_eq!(parse_query(Some("pid=7&rows=3&cols=4")).unwrap().pid, Some(7));
        for bad in [
            "pid=1&cmd=ls",
            "cmd=a&argv=b",
            "rows=x",
            "rows=70000",
            "user=admin",
            "env=X",
            "nope=1",
            "cwd=a&cwd=b",
            "cmd=%zz",
        ] {
            assert!(parse_query(Some(bad)).is_err(), "{bad}");
        }
    }

    /// Found by the fuzz target `pty_frames`: `%+c` decoded as `%0c`.
    #[test]
    fn a_signed_escape_is_no_escape() {
        assert!(parse_query(Some("cwd=%2Bc")).is_ok());
        for bad in ["cwd=%+c", "cwd=%-1", "cmd=a%+0b"] {
            assert!(parse_query(Some(bad)).is_err(), "{bad}");
        }
    }
}
