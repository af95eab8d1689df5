//! The Prometheus text exposition format (version 0.0.4), written by hand: `# HELP` and `# TYPE` once
//! per family, then its samples, label values escaped (`\\`, `\"`, `\n`).

use std::fmt::Write;

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A document being written.
#[derive(Default)]
pub struct Text {
    out: String,
}

/// Metric types of the format.
#[derive(Clone, Copy)]
pub enum Type {
    Counter,
    Gauge,
    Histogram,
}

impl Text {
    /// Starts family `name`: its help line and type. Its samples follow.
    pub fn family(&mut self, name: &str, kind: Type, help: &str) {
        let kind = match kind {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample: `name{labels} value`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.out.push_str(&number(value));
        self.out.push('\n');
    }

    /// A family with one sample.
    pub fn single(&mut self, name: &str, kind: Type, help: &str, labels: &[(&str, &str)], value: f64) {
        self.family(name, kind, help);
        self.sample(name, labels, value);
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A sample value: integers without a fraction, infinities and NaN as the format spells them.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_samples_are_written_in_the_text_format() {
        let mut t = Text::default();
        t.family("sandlot_x_total", Type::Counter, "Things.\nMore \\ help");
        t.sample("sandlot_x_total", &[("a", "1"), ("b", "q\"uo\\te\nnl")], 3.0);
        t.single("sandlot_up", Type::Gauge, "Up.", &[], 1.0);
        assert_eq!(
            t.finish(),
            "# HELP sandlot_x_total Things.\\nMore \\\\ help\n# TYPE sandlot_x_total counter\n\
             sandlot_x_total{a=\"1\",b=\"q\\\"uo\\\\te\\nnl\"} 3\n\
             # HELP sandlot_up Up.\n# TYPE sandlot_up gauge\nsandlot_up 1\n"
        );
    }

    #[test]
    fn numbers_are_spelled_as_the_format_wants() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(1e20), "100000000000000000000");
    }
}
