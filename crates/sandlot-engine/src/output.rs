//! Capped output capture: the first half of the cap is kept as the head, the last half as the tail, and
//! what falls between is counted, never silently lost.

use std::collections::VecDeque;

/// One captured stream.
#[derive(Debug)]
pub(crate) struct Capture {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    /// Bytes handed to live listeners so far (a prefix of the stream).
    streamed: u64,
    /// Incomplete UTF-8 sequence held back from the last live chunk.
    pending: Vec<u8>,
}

impl Capture {
    pub(crate) fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Capture {
            head_cap,
            tail_cap: cap - head_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            streamed: 0,
            pending: Vec::new(),
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Bytes dropped from the middle.
    pub(crate) fn dropped(&self) -> u64 {
        self.total - self.head.len() as u64 - self.tail.len() as u64
    }

    /// Adds bytes; returns the text to stream live, if any, and whether truncation began with this chunk.
    pub(crate) fn push(&mut self, mut data: &[u8]) -> (Option<String>, bool) {
        let was_dropping = self.dropped() > 0;
        self.total += data.len() as u64;
        let to_head = (self.head_cap - self.head.len()).min(data.len());
        self.head.extend_from_slice(&data[..to_head]);
        data = &data[to_head..];
        self.tail.extend(data);
        let excess = self.tail.len().saturating_sub(self.tail_cap);
        self.tail.drain(..excess);
        // Live streaming covers everything until the first byte is dropped; after that the rest of the
        // head is gone from the stream and only the tail is sent, at the end.
        let dropping = self.dropped() > 0;
        let live_end = if dropping { self.head.len() as u64 } else { self.total };
        let live = if live_end > self.streamed {
            let bytes = self.range(self.streamed, live_end);
            self.streamed = live_end;
            self.decode(&bytes, false)
        } else {
            None
        };
        (live, dropping && !was_dropping)
    }

    /// Copies stream bytes `[from, to)` that are still held (head or tail).
    fn range(&self, from: u64, to: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity((to - from) as usize);
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

    /// The tail bytes not yet streamed, sent once the process has exited.
    pub(crate) fn finish_stream(&mut self) -> Option<String> {
        let tail_start = self.total - self.tail.len() as u64;
        let from = self.streamed.max(tail_start);
        let bytes = if from < self.total { self.range(from, self.total) } else { Vec::new() };
        self.streamed = self.total;
        self.decode(&bytes, true)
    }

    /// Decodes for a live event, holding back a trailing partial UTF-8 sequence unless `flush`.
    fn decode(&mut self, bytes: &[u8], flush: bool) -> Option<String> {
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(bytes);
        if !flush {
            let keep = incomplete_suffix(&buf);
            self.pending = buf.split_off(buf.len() - keep);
        }
        (!buf.is_empty()).then(|| String::from_utf8_lossy(&buf).into_owned())
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

    #[test]
    fn small_output_is_kept_whole_and_streamed_whole() {
        let mut c = Capture::new(100);
        assert_eq!(c.push(b"hello ").0.as_deref(), Some("hello "));
        assert_eq!(c.push(b"world").0.as_deref(), Some("world"));
        assert_eq!(c.finish_stream(), None);
        assert_eq!(c.text(), "hello world");
        assert_eq!(c.dropped(), 0);
    }

    #[test]
    fn flood_keeps_head_and_tail_with_exact_counts() {
        let mut c = Capture::new(10);
        let mut streamed = String::new();
        let mut began = 0;
        for i in 0..100u8 {
            let (live, start) = c.push(&[b'a' + (i % 26)]);
            streamed.push_str(&live.unwrap_or_default());
            began += start as usize;
        }
        assert_eq!(began, 1, "truncation is announced once");
        assert_eq!(c.total(), 100);
        assert_eq!(c.dropped(), 90);
        streamed.push_str(&c.finish_stream().unwrap());
        // head = first 5 bytes, tail = last 5 (bytes 95..100 = r s t u v).
        assert_eq!(c.text(), "abcde\n[sandlot: 90 bytes omitted]\nrstuv");
        assert!(streamed.starts_with("abcde") && streamed.ends_with("rstuv"), "{streamed}");
    }

    #[test]
    fn split_utf8_is_not_mangled_in_live_chunks() {
        let mut c = Capture::new(100);
        let snow = "☃".as_bytes();
        assert_eq!(c.push(&snow[..1]).0, None);
        assert_eq!(c.push(&snow[1..]).0.as_deref(), Some("☃"));
    }
}
