//! Giving the user's screen back after `sandlot sandbox shell`: what a full-screen program in the
//! sandbox switched on (the alternate screen, mouse reporting, bracketed paste, application keys, a
//! hidden cursor, colours) stays on when it is killed mid-screen, or when a hostile one prints it.
//! [`ScreenReset`] writes the sequences that switch it off again when the session ends, on every way
//! out (a panic's hook calls [`reset`]), when standard output is a terminal.
//!
//! The alternate screen is left only if the program entered it and did not leave: leaving it
//! restores the cursor saved on entry (xterm does so even when it was never entered), which would
//! move the cursor over what is on the screen.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Mouse reporting (X10, button, any-event; UTF-8, SGR and urxvt encodings), bracketed paste,
/// application cursor keys and keypad off; cursor shown; attributes reset.
const RESET: &[u8] =
    b"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?2004l\x1b[?1l\x1b>\x1b[?25h\x1b[0m";
/// Leaves the alternate screen (restoring the cursor saved when it was entered).
const LEAVE_ALT: &[u8] = b"\x1b[?1049l";
const ENTER: [&[u8]; 3] = [b"\x1b[?1049h", b"\x1b[?1047h", b"\x1b[?47h"];
const LEAVE: [&[u8]; 3] = [b"\x1b[?1049l", b"\x1b[?1047l", b"\x1b[?47l"];
/// The longest sequence watched for, less one: what is kept from one piece of output to the next.
const CARRY: usize = 7;

/// Whether a reset is due (armed and not yet written).
static ARMED: AtomicBool = AtomicBool::new(false);
/// Whether the remote side is on the alternate screen, as far as its output says.
static IN_ALT: AtomicBool = AtomicBool::new(false);

/// Follows the output for the alternate screen's entry and exit, across pieces.
#[derive(Default)]
pub(super) struct AltScreen {
    tail: Vec<u8>,
}

fn last(hay: &[u8], needles: &[&[u8]]) -> Option<usize> {
    needles.iter().filter_map(|n| hay.windows(n.len()).rposition(|w| w == *n)).max()
}

impl AltScreen {
    /// Notes one piece of output on its way to the screen.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        let mut hay = std::mem::take(&mut self.tail);
        hay.extend_from_slice(bytes);
        match (last(&hay, &ENTER), last(&hay, &LEAVE)) {
            (Some(e), l) if l.is_none_or(|l| e > l) => IN_ALT.store(true, Ordering::SeqCst),
            (_, Some(_)) => IN_ALT.store(false, Ordering::SeqCst),
            _ => {}
        }
        self.tail = hay[hay.len().saturating_sub(CARRY)..].to_vec();
    }
}

/// The bytes that give the screen back: [`RESET`], after leaving the alternate screen if `in_alt`.
fn sequence(in_alt: bool) -> Vec<u8> {
    let mut out = if in_alt { LEAVE_ALT.to_vec() } else { Vec::new() };
    out.extend_from_slice(RESET);
    out
}

/// Writes the reset to standard output if one is armed (once).
pub(super) fn reset() {
    if ARMED.swap(false, Ordering::SeqCst) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&sequence(IN_ALT.swap(false, Ordering::SeqCst)));
        let _ = out.flush();
    }
}

/// The screen reset, written when dropped (also on unwind) or by the panic hook.
pub(super) struct ScreenReset;

impl ScreenReset {
    /// Arms the reset; call it only when standard output is a terminal.
    pub(super) fn arm() -> ScreenReset {
        IN_ALT.store(false, Ordering::SeqCst);
        ARMED.store(true, Ordering::SeqCst);
        ScreenReset
    }
}

impl Drop for ScreenReset {
    fn drop(&mut self) {
        reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_alt(pieces: &[&[u8]]) -> bool {
        IN_ALT.store(false, Ordering::SeqCst);
        let mut alt = AltScreen::default();
        for p in pieces {
            alt.feed(p);
        }
        IN_ALT.load(Ordering::SeqCst)
    }

    /// One test, as the state is global.
    #[test]
    fn the_alternate_screen_is_followed_across_pieces_and_left_only_when_entered() {
        assert!(!in_alt(&[b"plain output\r\n"]));
        assert!(in_alt(&[b"x\x1b[?1049hdrawing"]));
        assert!(in_alt(&[b"x\x1b[?10", b"49hdrawing"]), "split across pieces");
        assert!(in_alt(&[b"\x1b[", b"?", b"4", b"7h"]), "split into many");
        assert!(!in_alt(&[b"\x1b[?1049h vim \x1b[?1049l"]));
        assert!(!in_alt(&[b"\x1b[?1049h", b"vim", b"\x1b[?104", b"9lback"]));
        assert!(in_alt(&[b"\x1b[?1049l\x1b[?1049h", b"again"]));
        assert!(in_alt(&[b"\x1b[?1049h", b"a long stretch of drawing after it"]), "remembered past the carry");
        assert!(sequence(true).starts_with(b"\x1b[?1049l"));
        assert!(!String::from_utf8(sequence(false)).unwrap().contains("1049"), "not left when never entered");
        let all = String::from_utf8(sequence(true)).unwrap();
        for mode in ["?1000l", "?1002l", "?1003l", "?1006l", "?2004l", "?25h", "[0m"] {
            assert!(all.contains(mode), "{mode}");
        }
    }
}
