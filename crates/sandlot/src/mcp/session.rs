//! One MCP session's state: whom it belongs to, its sandbox (made on first need and reused), and the
//! sandboxes it made, deleted when it ends unless one was created with `keep`.

use std::collections::HashMap;
use std::sync::Mutex;

use super::backend::{SandboxBackend, ToolError, ToolResult};

/// A sandbox the session made, and the backend (its creator's) that deletes it.
struct Made<B> {
    id: String,
    backend: B,
}

/// Shared by every clone of a session's handler; its drop is the session's end.
pub struct Session<B: SandboxBackend> {
    owner: Mutex<Option<String>>,
    /// The sandbox a tool call without `sandbox_id` acts on. An async lock: two first calls at once
    /// make one sandbox.
    current: tokio::sync::Mutex<Option<String>>,
    made: Mutex<Vec<Made<B>>>,
    /// Per sandbox, whether its code interpreter answered (true) or nothing listens for one (false),
    /// as found by the first `run_code` on it.
    interpreters: Mutex<HashMap<String, bool>>,
}

impl<B: SandboxBackend> Default for Session<B> {
    fn default() -> Self {
        Session {
            owner: Mutex::new(None),
            current: tokio::sync::Mutex::new(None),
            made: Mutex::new(Vec::new()),
            interpreters: Mutex::new(HashMap::new()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<B: SandboxBackend> Session<B> {
    /// Binds the session to its first caller; refuses a caller that is someone else.
    pub fn check_owner(&self, backend: &B) -> ToolResult<()> {
        let mut owner = lock(&self.owner);
        match owner.as_deref() {
            None => {
                *owner = Some(backend.owner().to_string());
                Ok(())
            }
            Some(o) if o == backend.owner() => Ok(()),
            Some(_) => Err(ToolError::new(
                "forbidden",
                "this MCP session belongs to another tenant; start a session of your own with your API key",
            )),
        }
    }

    /// `given`, or the session's sandbox, made now (default image and limits, ephemeral) if it has
    /// none yet, or if the one it had is gone: an agent that paused past the sandbox's lifetime, or
    /// deleted it through another client, gets a fresh one rather than `not_found` on every call.
    pub async fn sandbox(&self, backend: &B, given: Option<String>) -> ToolResult<String> {
        if let Some(id) = given.filter(|s| !s.is_empty()) {
            return Ok(id);
        }
        let mut current = self.current.lock().await;
        if let Some(id) = current.clone() {
            match backend.info(id.clone()).await {
                Ok(info) if info.state != sandlot_api::SandboxState::Deleted => return Ok(id),
                Ok(_) => {}
                Err(e) if e.code == sandlot_api::codes::NOT_FOUND => {}
                Err(e) => return Err(e),
            }
            lock(&self.made).retain(|m| m.id != id);
            *current = None;
        }
        let info = backend.create(session_sandbox()).await?;
        self.made(backend, &info.id, false);
        *current = Some(info.id.clone());
        Ok(info.id)
    }

    /// The session's sandbox, if it has one.
    pub async fn current(&self) -> Option<String> {
        self.current.lock().await.clone()
    }

    /// Makes `id` the session's sandbox.
    pub async fn set_current(&self, id: &str) {
        *self.current.lock().await = Some(id.to_string());
    }

    /// Records a sandbox the session made: deleted at its end unless `keep`.
    pub fn made(&self, backend: &B, id: &str, keep: bool) {
        if !keep {
            lock(&self.made).push(Made { id: id.to_string(), backend: backend.clone() });
        }
    }

    /// Forgets a sandbox that was deleted.
    pub async fn forget(&self, id: &str) {
        lock(&self.made).retain(|m| m.id != id);
        lock(&self.interpreters).remove(id);
        let mut current = self.current.lock().await;
        if current.as_deref() == Some(id) {
            *current = None;
        }
    }

    /// Whether `id`'s code interpreter answered (`Some(true)`), or did not (`Some(false)`), as last found.
    pub fn interpreter(&self, id: &str) -> Option<bool> {
        lock(&self.interpreters).get(id).copied()
    }

    /// Remembers whether `id` has a code interpreter answering.
    pub fn set_interpreter(&self, id: &str, answers: bool) {
        lock(&self.interpreters).insert(id.to_string(), answers);
    }

    /// Deletes the sandboxes the session made (stdio: at stdin's end, before the process exits).
    pub async fn close(&self) {
        let made = std::mem::take(&mut *lock(&self.made));
        delete_all(made).await;
    }
}

/// What the session's own sandbox is created with: the server's defaults, marked as MCP's.
fn session_sandbox() -> sandlot_api::CreateSandbox {
    sandlot_api::CreateSandbox {
        metadata: [("sandlot.mcp".to_string(), "session".to_string())].into(),
        ..Default::default()
    }
}

async fn delete_all<B: SandboxBackend>(made: Vec<Made<B>>) {
    for m in made {
        match m.backend.delete(m.id.clone()).await {
            Ok(()) => tracing::info!("MCP session ended: deleted its sandbox {}", m.id),
            // Already gone (deleted by another client, or expired): nothing to do.
            Err(e) if e.code == "not_found" => {}
            Err(e) => tracing::warn!("MCP session ended: deleting its sandbox {}: {}", m.id, e.message),
        }
    }
}

impl<B: SandboxBackend> Drop for Session<B> {
    /// HTTP: the session was closed (DELETE), expired or the server is stopping; its handler went.
    fn drop(&mut self) {
        let made = std::mem::take(&mut *lock(&self.made));
        if made.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(delete_all(made));
            }
            Err(_) => {
                let ids: Vec<_> = made.iter().map(|m| m.id.as_str()).collect();
                tracing::warn!("MCP session ended outside a runtime: sandboxes {ids:?} are left to expire");
            }
        }
    }
}
