//! Capped output capture: the first half of the cap is kept as the head, the last half as the tail, and
//! what falls between is counted, never silently lost. A terminal's capture is a scrollback instead
//! ([`Capture::scrollback`]): only the last `cap` bytes are kept, and output streams live however long
//! it runs.

use std::collections::VecDeque;

/// One captured stream: the only copy of its bytes the daemon keeps. Live events and replays are
/// byte spans of it, copied out a bounded piece at a time ([`Capture::piece`]).
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
    /// No head: the last `cap` bytes are kept and every byte is streamed live (a terminal).
    scrollback: bool,
}

/// Bytes `[start, end)` of a stream.
pub(crate) type Span = (u64, u64);

impl Capture {
    pub(crate) fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Capture {
            head_cap,
            tail_cap: cap - head_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            emitted: 0,
            scrollback: false,
        }
    }

    /// A scrollback of the last `cap` bytes: output is streamed live whatever its length (a follower
    /// that falls more than `cap` bytes behind skips to the oldest byte kept), and a replay or the
    /// final text is the last `cap` bytes.
    pub(crate) fn scrollback(cap: usize) -> Self {
        Capture { head_cap: 0, tail_cap: cap, scrollback: true, ..Capture::new(0) }
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
        let end = if dropping && !self.scrollback {
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
    #[cfg(test)]
    pub(crate) fn text_of(&self, span: Span) -> String {
        String::from_utf8_lossy(&self.range(span.0, span.1)).into_owned()
    }

    /// The first held bytes of `span`, at most `max` of them (`max` > 0), and the stream offset where
    /// they end, from which the rest of the span is read. A span starting in the dropped middle starts
    /// at the tail instead; a span wholly dropped gives no bytes and its end. The piece never crosses
    /// from the head into the tail (the truncation between them is its own event), and a piece cut at
    /// `max` ends before a UTF-8 sequence it would split, so text conversion of each piece mangles
    /// nothing. The returned bytes are the only allocation: at most `max`, never the span's length,
    /// which a sandbox chooses (it may cover the whole dropped middle).
    pub(crate) fn piece(&self, (from, to): Span, max: usize) -> (Vec<u8>, u64) {
        let head_len = self.head.len() as u64;
        let tail_start = self.total - self.tail.len() as u64;
        let start = if from >= head_len && from < tail_start { tail_start } else { from };
        if start >= to.min(self.total) {
            return (Vec::new(), to.max(from));
        }
        let to = to.min(self.total);
        let region_end = if start < head_len { to.min(head_len) } else { to };
        let mut end = region_end.min(start + max as u64);
        if end < region_end {
            let cut = incomplete_suffix(&self.range(end.saturating_sub(3).max(start), end)) as u64;
            if end - cut > start {
                end -= cut;
            }
        }
        (self.range(start, end), end)
    }

    /// Copies stream bytes `[from, to)` that are still held (head or tail), allocating exactly what is
    /// copied.
    fn range(&self, from: u64, to: u64) -> Vec<u8> {
        let head_len = self.head.len() as u64;
        let tail_start = self.total - self.tail.len() as u64;
        let to = to.min(self.total);
        let in_head = (from.min(head_len), to.min(head_len));
        let in_tail = (from.max(tail_start), to.max(tail_start));
        let held = in_head.1.saturating_sub(in_head.0) + in_tail.1.saturating_sub(in_tail.0);
        let mut out = Vec::with_capacity(held as usize);
        if in_head.0 < in_head.1 {
            out.extend_from_slice(&self.head[in_head.0 as usize..in_head.1 as usize]);
        }
        if in_tail.0 < in_tail.1 {
            let (s, e) = ((in_tail.0 - tail_start) as usize, (in_tail.1 - tail_start) as usize);
            let (a, b) = self.tail.as_slices();
            let a_end = e.min(a.len());
            if s < a_end {
                out.extend_from_slice(&a[s..a_end]);
            }
            let (bs, be) = (s.saturating_sub(a.len()), e.saturating_sub(a.len()));
            if bs < be {
                out.extend_from_slice(&b[bs..be]);
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

    /// A terminal's scrollback streams every byte live past its cap and keeps the last `cap` bytes; a
    /// span that starts before them starts at the oldest byte kept.
    #[test]
    fn a_scrollback_streams_everything_and_keeps_the_last_bytes() {
        let mut c = Capture::scrollback(10);
        let mut streamed = String::new();
        for i in 0..100u8 {
            let (span, _) = c.push(&[b'a' + (i % 26)]);
            streamed.push_str(&c.text_of(span.expect("every byte is live")));
        }
        assert_eq!(streamed.len(), 100, "nothing held back");
        assert_eq!((c.held(), c.dropped()), (10, 90));
        assert_eq!(c.finish(), None, "everything was streamed");
        let (bytes, end) = c.piece((0, 100), 1 << 20);
        assert_eq!((bytes.as_slice(), end), (&b"mnopqrstuv"[..], 100), "the last 10 bytes");
    }

    #[test]
    fn split_utf8_is_not_mangled_in_live_chunks() {
        let mut c = Capture::new(100);
        let snow = "☃".as_bytes();
        assert_eq!(c.push(&snow[..1]).0, None);
        assert_eq!(live(&mut c, &snow[1..]).as_deref(), Some("☃"));
    }

    /// A span across the dropped middle costs what is held of it, never its length.
    #[test]
    fn a_piece_over_the_dropped_middle_allocates_only_held_bytes() {
        let mut c = Capture::new(10);
        c.push(&vec![b'z'; 1 << 20]);
        let (bytes, end) = c.piece((0, 1 << 20), 1 << 30);
        assert_eq!((bytes.len(), bytes.capacity(), end), (5, 5, 5), "the head, up to its end");
        let (bytes, end) = c.piece((end, 1 << 20), 1 << 30);
        assert_eq!((bytes.len(), bytes.capacity(), end), (5, 5, 1 << 20), "the middle skipped, the tail");
        let (bytes, end) = c.piece((100, 200), 1 << 30);
        assert_eq!((bytes.len(), end), (0, 200), "wholly dropped: nothing, and past it");
        assert_eq!(c.piece((0, 1 << 20), 2).0, b"zz", "at most `max`");
    }
}
