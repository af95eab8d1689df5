//! The sandbox state machine as one table: which transition each state allows, and the refusal
//! (409) every other pair gets.
//!
//! ```text
//!            create                pause             stop
//! (none) ──────────▶ creating ──▶ running ◀──────▶ paused ──────▶ stopped
//!                       │           │  ▲    resume               │   │
//!                       ▼           │  └────────────resume───────┘   │
//!                     failed        └──────────stop──────────────────┘
//! any state but creating ── delete ──▶ deleted
//! ```

use sandlot_api::SandboxState;

use crate::Error;

/// A transition a caller (or a service) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// stopped → running (fresh supervisor, same layer) or paused → running (thaw).
    Resume,
    /// running/paused → stopped.
    Stop,
    /// running → paused.
    Pause,
    /// A snapshot of the layer (no state change).
    Snapshot,
    /// any → deleted.
    Delete,
}

/// What a transition does from a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// It runs.
    Go,
    /// The sandbox is where the transition leads already: nothing to do, and no error.
    Already,
    /// It is refused (409).
    Refused,
}

/// The table.
pub fn step(state: SandboxState, t: Transition) -> Step {
    use SandboxState::*;
    use Transition::*;
    match (t, state) {
        (Resume, Paused | Stopped) => Step::Go,
        (Resume, Running) => Step::Already,
        (Stop, Running | Paused) => Step::Go,
        (Stop, Stopped) => Step::Already,
        (Pause, Running) => Step::Go,
        (Pause, Paused) => Step::Already,
        (Snapshot, Running | Paused | Stopped) => Step::Go,
        (Delete, Creating) => Step::Refused,
        (Delete, Deleted) => Step::Already,
        (Delete, _) => Step::Go,
        _ => Step::Refused,
    }
}

/// The 409 of a refused transition of sandbox `id` in `state`.
pub fn refusal(id: &str, state: SandboxState, t: Transition) -> Error {
    match t {
        Transition::Delete => {
            Error::conflict(format!("sandbox {id} is still being created; delete it once its create call has returned"))
        }
        _ => {
            let verb = match t {
                Transition::Resume => "resume",
                Transition::Stop => "stop",
                Transition::Pause => "pause",
                Transition::Snapshot => "snapshot",
                Transition::Delete => "delete",
            };
            Error::conflict(format!("cannot {verb} sandbox {id}: it is {}", state.as_str()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SandboxState::*;
    use Transition::*;

    const STATES: [SandboxState; 6] = [Creating, Running, Paused, Stopped, Failed, Deleted];

    #[test]
    fn the_table_allows_exactly_the_documented_transitions() {
        let allowed = |t| STATES.iter().copied().filter(|s| step(*s, t) == Step::Go).collect::<Vec<_>>();
        assert_eq!(allowed(Resume), [Paused, Stopped]);
        assert_eq!(allowed(Stop), [Running, Paused]);
        assert_eq!(allowed(Pause), [Running]);
        assert_eq!(allowed(Snapshot), [Running, Paused, Stopped]);
        assert_eq!(allowed(Delete), [Running, Paused, Stopped, Failed]);
    }

    #[test]
    fn a_transition_to_where_the_sandbox_is_is_no_error() {
        assert_eq!(step(Running, Resume), Step::Already);
        assert_eq!(step(Stopped, Stop), Step::Already);
        assert_eq!(step(Paused, Pause), Step::Already);
        assert_eq!(step(Deleted, Delete), Step::Already);
    }

    #[test]
    fn a_refusal_names_the_state_and_is_a_conflict() {
        assert_eq!(step(Failed, Resume), Step::Refused);
        let e = refusal("sb_1", Failed, Resume);
        assert_eq!((e.kind, e.message.as_str()), (crate::Kind::Conflict, "cannot resume sandbox sb_1: it is failed"));
        assert!(refusal("sb_1", Creating, Delete).message.contains("still being created"));
    }
}
