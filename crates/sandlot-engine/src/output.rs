//! Capped output capture: the first half of the cap is kept as the head, the last half as the tail, and
//! what falls between is counted, never silently lost.

use std::collections::VecDeque;

/// One captured stream: the only copy of its bytes the daemon keeps. Live events and replays are
/// byte spans of it ([`Capture::text_of`]), never copies.
#[derive(Debug)]
pub(crate) struct Capture {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    /// End of the last span handed out for live streaming (a prefix of the stream; the spans never
    /// split a UTF-8 sequence, except where truncation cuts one).
    emitted: u64,
}

/// Bytes `[start, end)` of a stream.
pub(crate) type Span = (u64, u64);

impl Capture {
    pub(crate) fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Capture { head_cap, tail_cap: cap - head_cap, head: Vec::new(), tail: VecDeque::new(), total: 0, emitted: 0 }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Bytes held (head and tail), what this stream costs the daemon.
    pub(crate) fn held(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// End of the last live span.
    pub(crate) fn emitted(&self) -> u64 {
        self.emitted
    }

    /// Bytes dropped from the middle.
    pub(crate) fn dropped(&self) -> u64 {
        self.total - self.held() as u64
    }

    /// Adds bytes; returns the new span to stream live, if any, and whether truncation began with this
    /// chunk. Live streaming covers everything until the first byte is dropped; after that the rest of
    /// the head is gone from the stream and only the tail is sent, at the end ([`Capture::finish`]).
    pub(crate) fn push(&mut self, mut data: &[u8]) -> (Option<Span>, bool) {
        let was_dropping = self.dropped() > 0;
        self.total += data.len() as u64;
        let to_head = (self.head_cap - self.head.len()).min(data.len());
        self.head.extend_from_slice(&data[..to_head]);
        data = &data[to_head..];
        self.tail.extend(data);
        let excess = self.tail.len().saturating_sub(self.tail_cap);
        self.tail.drain(..excess);
        let dropping = self.dropped() > 0;
        let end = if dropping {
            // The head is complete: a UTF-8 sequence cut at its end is never completed, so it goes now.
            self.head.len() as u64
        } else {
            let last = self.range(self.total.saturating_sub(3).max(self.emitted), self.total);
            self.total - incomplete_suffix(&last) as u64
        };
        (self.span_to(end), dropping && !was_dropping)
    }

    /// The span still to stream once the process has exited: the tail not yet sent.
    pub(crate) fn finish(&mut self) -> Option<Span> {
        let tail_start = self.total - self.tail.len() as u64;
        self.emitted = self.emitted.max(tail_start);
        self.span_to(self.total)
    }

    fn span_to(&mut self, end: u64) -> Option<Span> {
        (end > self.emitted).then(|| {
            let span = (self.emitted, end);
            self.emitted = end;
            span
        })
    }

    /// Text of stream bytes `[from, to)` that are still held; bytes dropped between head and tail
    /// are skipped.
    pub(crate) fn text_of(&self, (from, to): Span) -> String {
        String::from_utf8_lossy(&self.range(from, to)).into_owned()
    }

    /// Copies stream bytes `[from, to)` that are still held (head or tail).
    fn range(&self, from: u64, to: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        let head_len = self.head.len() as u64;
        let tail_start = self.total - self.tail.len() as u64;
        let mut pos = from;
        while pos < to {
            if pos < head_len {
                let end = to.min(head_len);
                out.extend_from_slice(&self.head[pos as usize..end as usize]);
                pos = end;
            } else if pos >= tail_start {
                let s = (pos - tail_start) as usize;
                let e = (to - tail_start) as usize;
                out.extend(self.tail.range(s..e));
                pos = to;
            } else {
                pos = tail_start;
            }
        }
        out
    }

    /// The captured text: whole stream, or head + a marker naming the dropped count + tail.
    pub(crate) fn text(&self) -> String {
        let dropped = self.dropped();
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if dropped > 0 {
            s.push_str(&format!("\n[sandlot: {dropped} bytes omitted]\n"));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }
}

/// Length of a trailing UTF-8 sequence that is incomplete (0..=3).
fn incomplete_suffix(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let byte = b[b.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // continuation byte: look further back for the lead
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(c: &mut Capture, data: &[u8]) -> Option<String> {
        c.push(data).0.map(|span| c.text_of(span))
    }

    #[test]
    fn small_output_is_kept_whole_and_streamed_whole() {
        let mut c = Capture::new(100);
        assert_eq!(live(&mut c, b"hello ").as_deref(), Some("hello "));
        assert_eq!(live(&mut c, b"world").as_deref(), Some("world"));
        assert_eq!(c.finish(), None);
        assert_eq!(c.text(), "hello world");
        assert_eq!(c.dropped(), 0);
        assert_eq!(c.held(), 11);
    }

    #[test]
    fn flood_keeps_head_and_tail_with_exact_counts() {
        let mut c = Capture::new(10);
        let mut streamed = String::new();
        let mut began = 0;
        for i in 0..100u8 {
            let (span, start) = c.push(&[b'a' + (i % 26)]);
            streamed.push_str(&span.map(|s| c.text_of(s)).unwrap_or_default());
            began += start as usize;
        }
        assert_eq!(began, 1, "truncation is announced once");
        assert_eq!(c.total(), 100);
        assert_eq!(c.dropped(), 90);
        assert_eq!(c.held(), 10, "head and tail only, whatever the flood");
        let tail = c.finish().unwrap();
        streamed.push_str(&c.text_of(tail));
        // head = first 5 bytes, tail = last 5 (bytes 95..100 = r s t u v).
        assert_eq!(c.text(), "abcde\n[sandlot: 90 bytes omitted]\nrstuv");
        // Bytes 5..10 were streamed live while the tail still held them, before anything was dropped.
        assert_eq!(streamed, "abcdefghijrstuv");
    }

    #[test]
    fn split_utf8_is_not_mangled_in_live_chunks() {
        let mut c = Capture::new(100);
        let snow = "☃".as_bytes();
        assert_eq!(c.push(&snow[..1]).0, None);
        assert_eq!(live(&mut c, &snow[1..]).as_deref(), Some("☃"));
    }
}
