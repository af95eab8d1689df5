//! The identities a command or file operation may run as inside a sandbox.

use serde::{Deserialize, Serialize};

/// Identity a command or file operation runs as inside the sandbox.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum User {
    /// `user`, uid/gid 1000, home `/home/user` (the default).
    #[default]
    User,
    /// `root` of the sandbox's own user namespace (not root of the host).
    Root,
}

impl User {
    /// The sandbox uid (and gid) of this identity.
    pub fn uid(self) -> u32 {
        match self {
            User::User => 1000,
            User::Root => 0,
        }
    }

    /// Home directory inside the sandbox.
    pub fn home(self) -> &'static str {
        match self {
            User::User => "/home/user",
            User::Root => "/root",
        }
    }

    /// Login name.
    pub fn name(self) -> &'static str {
        match self {
            User::User => "user",
            User::Root => "root",
        }
    }
}
