//! Printing helpers: JSON, aligned tables, times and ages, and [`sanitize`] for text that came from
//! the server (and often from inside a sandbox) on its way to a human's terminal.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::Serialize;

/// Prints `value` as pretty JSON on stdout.
pub(super) fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value).context("writing JSON")?;
    writeln!(out).context("writing JSON")?;
    Ok(())
}

/// Prints a table with left-aligned columns on stdout; the last column is not padded.
pub(super) fn print_table(headers: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(table(headers, rows).as_bytes()).context("writing the table")?;
    Ok(())
}

/// Whether `c` must not reach a terminal as is: C0 controls (but `\t` and `\n` when `lines`), DEL,
/// C1 controls, and the bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), which
/// reorder what follows them on screen.
fn unsafe_char(c: char, lines: bool) -> bool {
    match c {
        '\t' | '\n' => !lines,
        '\0'..='\x1f' | '\x7f'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

fn sanitized(s: &str, lines: bool) -> Cow<'_, str> {
    if !s.chars().any(|c| unsafe_char(c, lines)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_char(c, lines) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` made safe for a human's terminal: every control character (tabs and newlines included) and
/// every bidirectional override or isolate is written as a visible escape (`\u{1b}`, `\u{202e}`), so
/// server text (file names, argv, reasons chosen inside a sandbox) cannot move the cursor, set the
/// title, write the clipboard or reorder the line. For table cells and one-line messages; `--json`
/// output, the terminal stream of `sandbox shell` and `sandbox exec` passthrough stay raw by design.
pub(crate) fn sanitize(s: &str) -> Cow<'_, str> {
    sanitized(s, false)
}

/// [`sanitize`] that keeps tabs and newlines (multi-line messages such as errors).
pub(crate) fn sanitize_text(s: &str) -> Cow<'_, str> {
    sanitized(s, true)
}

fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> =
        rows.iter().map(|row| row.iter().map(|cell| sanitize(cell).into_owned()).collect()).collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 3));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// Now, in Unix milliseconds.
pub(super) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
}

/// A duration in milliseconds as its largest unit: `45s`, `12m`, `3h`, `2d`.
pub(super) fn short_duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub(super) fn utc_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = sandlot_api::civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", of_day / 3600, of_day % 3600 / 60, of_day % 60)
}

/// A value quoted for a POSIX shell.
pub(super) fn shell_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_escapes_controls_and_bidi_overrides_only() {
        assert!(matches!(sanitize("plain é 日本 -_./"), Cow::Borrowed(_)));
        assert_eq!(sanitize("a\x1b]52;c;SGVsbG8=\x07b"), "a\\u{1b}]52;c;SGVsbG8=\\u{7}b");
        assert_eq!(sanitize("x\x1b[2J\ty\nz\r\x7f"), "x\\u{1b}[2J\\u{9}y\\u{a}z\\u{d}\\u{7f}");
        assert_eq!(sanitize("\u{9b}31m\u{85}"), "\\u{9b}31m\\u{85}", "C1 controls");
        assert_eq!(sanitize("invoice\u{202e}fdp.exe"), "invoice\\u{202e}fdp.exe");
        assert_eq!(sanitize("\u{202a}\u{2066}\u{2069}"), "\\u{202a}\\u{2066}\\u{2069}");
        assert_eq!(sanitize("\u{a0}\u{2065}\u{206a}"), "\u{a0}\u{2065}\u{206a}", "neighbours kept");
        assert_eq!(sanitize_text("line one\n\tline two\x1b[H"), "line one\n\tline two\\u{1b}[H");
    }

    #[test]
    fn table_cells_are_sanitized() {
        let t = table(&["NAME", "ARGV"], &[vec!["a\x1b[31m".into(), "x\ny\u{202e}".into()]]);
        assert_eq!(t, "NAME          ARGV\na\\u{1b}[31m   x\\u{a}y\\u{202e}\n");
    }

    #[test]
    fn tables_align_columns() {
        let rows = vec![
            vec!["sb_1".to_string(), "running".to_string(), "1m".to_string()],
            vec!["sb_long".to_string(), "ok".to_string(), "2d".to_string()],
        ];
        assert_eq!(
            table(&["ID", "STATE", "AGE"], &rows),
            "ID        STATE     AGE\nsb_1      running   1m\nsb_long   ok        2d\n"
        );
    }

    #[test]
    fn durations_use_the_largest_unit() {
        assert_eq!(short_duration(-5), "0s");
        assert_eq!(short_duration(59_999), "59s");
        assert_eq!(short_duration(60_000), "1m");
        assert_eq!(short_duration(7_200_000), "2h");
        assert_eq!(short_duration(3 * 86_400_000), "3d");
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_time(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_time(1_700_000_000_123), "2023-11-14T22:13:20Z");
    }
}
