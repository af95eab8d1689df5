//! envd's messages, written from E2B's `spec/envd/{process,filesystem}/*.proto`: prost derives for
//! the binary form (`application/proto`), serde attributes for protobuf's JSON mapping
//! (`application/json`, what the Python and JS SDKs send): camelCase names, bytes as base64, enums
//! by name, 64-bit integers as strings, a oneof as the one member present, Timestamps as RFC 3339.
//! Unknown JSON fields are ignored, as protobuf's JSON parsers with `ignore_unknown_fields` do.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// JSON forms of protobuf scalars that serde does not write the protobuf way.
pub mod json {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    /// `bytes`: standard base64 with padding out; standard or URL-safe, padded or not, in.
    pub mod b64 {
        use super::*;

        pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
            let s = Option::<String>::deserialize(d)?.unwrap_or_default();
            decode(&s).map_err(serde::de::Error::custom)
        }

        /// Decodes any of protobuf JSON's accepted base64 spellings.
        pub fn decode(s: &str) -> Result<Vec<u8>, String> {
            let trimmed = s.trim_end_matches('=');
            let engine = if trimmed.contains(['-', '_']) {
                &base64::engine::general_purpose::URL_SAFE_NO_PAD
            } else {
                &base64::engine::general_purpose::STANDARD_NO_PAD
            };
            engine.decode(trimmed).map_err(|e| format!("bytes field is not base64: {e}"))
        }
    }

    /// `int64`: a decimal string out; a string or a number in.
    pub mod i64_str {
        use super::*;

        pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&v.to_string())
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum Either {
                S(String),
                N(i64),
            }
            match Option::<Either>::deserialize(d)? {
                None => Ok(0),
                Some(Either::N(n)) => Ok(n),
                Some(Either::S(s)) => s.parse().map_err(|_| serde::de::Error::custom(format!("not an int64: {s:?}"))),
            }
        }
    }

    /// `google.protobuf.Timestamp`: RFC 3339 in UTC (`2024-05-01T12:00:00.123Z`).
    pub mod timestamp {
        use super::super::Timestamp;
        use super::*;

        pub fn serialize<S: Serializer>(v: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(t) => s.serialize_str(&rfc3339(t)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
            // Only sandlot writes timestamps (requests carry none); reading one is not needed.
            let _ = Option::<String>::deserialize(d)?;
            Ok(None)
        }

        pub fn rfc3339(t: &Timestamp) -> String {
            let (days, secs) = (t.seconds.div_euclid(86_400), t.seconds.rem_euclid(86_400));
            let (y, m, d) = sandlot_api::civil_from_days(days);
            let (hh, mm, ss) = (secs / 3600, secs / 60 % 60, secs % 60);
            let frac =
                if t.nanos > 0 { format!(".{:09}", t.nanos).trim_end_matches('0').to_string() } else { String::new() };
            format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}{frac}Z")
        }
    }
}

/// An enum's JSON form: its value's name out; a name or a number in.
macro_rules! enum_json {
    ($module:ident, $ty:ident) => {
        pub mod $module {
            use serde::{Deserialize, Deserializer, Serializer};

            pub fn serialize<S: Serializer>(v: &i32, s: S) -> Result<S::Ok, S::Error> {
                match super::$ty::try_from(*v) {
                    Ok(e) => s.serialize_str(e.as_str_name()),
                    Err(_) => s.serialize_i32(*v),
                }
            }

            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Either {
                    S(String),
                    N(i32),
                }
                match Option::<Either>::deserialize(d)? {
                    None => Ok(0),
                    Some(Either::N(n)) => Ok(n),
                    Some(Either::S(s)) => super::$ty::from_str_name(&s)
                        .map(|e| e as i32)
                        .ok_or_else(|| serde::de::Error::custom(format!("unknown {} value {s:?}", stringify!($ty)))),
                }
            }
        }
    };
}

/// `google.protobuf.Timestamp`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

// ---- process.Process ----

/// `process.PTY`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Pty {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<PtySize>,
}

/// `process.PTY.Size`.
#[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PtySize {
    #[prost(uint32, tag = "1")]
    pub cols: u32,
    #[prost(uint32, tag = "2")]
    pub rows: u32,
}

/// `process.ProcessConfig`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProcessConfig {
    #[prost(string, tag = "1")]
    pub cmd: String,
    #[prost(string, repeated, tag = "2")]
    pub args: Vec<String>,
    #[prost(map = "string, string", tag = "3")]
    pub envs: HashMap<String, String>,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `process.ListRequest`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
pub struct ListRequest {}

/// `process.ProcessInfo`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProcessInfo {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<ProcessConfig>,
    #[prost(uint32, tag = "2")]
    pub pid: u32,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// `process.ListResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListResponse {
    #[prost(message, repeated, tag = "1")]
    pub processes: Vec<ProcessInfo>,
}

/// `process.StartRequest`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StartRequest {
    #[prost(message, optional, tag = "1")]
    pub process: Option<ProcessConfig>,
    #[prost(message, optional, tag = "2")]
    pub pty: Option<Pty>,
    #[prost(string, optional, tag = "3")]
    pub tag: Option<String>,
    /// Absent means on (older SDKs); the SDKs send `false` unless asked.
    #[prost(bool, optional, tag = "4")]
    pub stdin: Option<bool>,
}

/// `process.UpdateRequest`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct UpdateRequest {
    #[prost(message, optional, tag = "1")]
    pub process: Option<ProcessSelector>,
    #[prost(message, optional, tag = "2")]
    pub pty: Option<Pty>,
}

/// `process.ProcessEvent`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProcessEvent {
    #[prost(oneof = "process_event::Event", tags = "1, 2, 3, 4")]
    #[serde(flatten)]
    pub event: Option<process_event::Event>,
}

/// The members of `process.ProcessEvent`.
pub mod process_event {
    use serde::{Deserialize, Serialize};

    /// `oneof event`.
    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Event {
        #[prost(message, tag = "1")]
        Start(StartEvent),
        #[prost(message, tag = "2")]
        Data(DataEvent),
        #[prost(message, tag = "3")]
        End(EndEvent),
        #[prost(message, tag = "4")]
        Keepalive(KeepAlive),
    }

    /// `ProcessEvent.StartEvent`.
    #[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default, rename_all = "camelCase")]
    pub struct StartEvent {
        #[prost(uint32, tag = "1")]
        pub pid: u32,
    }

    /// `ProcessEvent.DataEvent`.
    #[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default, rename_all = "camelCase")]
    pub struct DataEvent {
        #[prost(oneof = "Output", tags = "1, 2, 3")]
        #[serde(flatten)]
        pub output: Option<Output>,
    }

    /// `DataEvent.oneof output`.
    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Output {
        #[prost(bytes, tag = "1")]
        Stdout(#[serde(with = "super::json::b64")] Vec<u8>),
        #[prost(bytes, tag = "2")]
        Stderr(#[serde(with = "super::json::b64")] Vec<u8>),
        #[prost(bytes, tag = "3")]
        Pty(#[serde(with = "super::json::b64")] Vec<u8>),
    }

    /// `ProcessEvent.EndEvent`.
    #[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default, rename_all = "camelCase")]
    pub struct EndEvent {
        #[prost(sint32, tag = "1")]
        pub exit_code: i32,
        #[prost(bool, tag = "2")]
        pub exited: bool,
        #[prost(string, tag = "3")]
        pub status: String,
        #[prost(string, optional, tag = "4")]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub error: Option<String>,
    }

    /// `ProcessEvent.KeepAlive`.
    #[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
    pub struct KeepAlive {}
}

/// `process.StartResponse` (and `process.ConnectResponse`: the same shape).
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StartResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<ProcessEvent>,
}

/// `process.SendInputRequest`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SendInputRequest {
    #[prost(message, optional, tag = "1")]
    pub process: Option<ProcessSelector>,
    #[prost(message, optional, tag = "2")]
    pub input: Option<ProcessInput>,
}

/// `process.SendInputResponse` and the other empty answers (`StreamInputResponse`,
/// `SendSignalResponse`, `CloseStdinResponse`, filesystem's `RemoveResponse`, …).
#[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
pub struct Empty {}

/// `process.ProcessInput`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProcessInput {
    #[prost(oneof = "process_input::Input", tags = "1, 2")]
    #[serde(flatten)]
    pub input: Option<process_input::Input>,
}

/// The members of `process.ProcessInput`.
pub mod process_input {
    use serde::{Deserialize, Serialize};

    /// `oneof input`.
    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Input {
        #[prost(bytes, tag = "1")]
        Stdin(#[serde(with = "super::json::b64")] Vec<u8>),
        #[prost(bytes, tag = "2")]
        Pty(#[serde(with = "super::json::b64")] Vec<u8>),
    }
}

/// `process.StreamInputRequest`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StreamInputRequest {
    #[prost(oneof = "stream_input_request::Event", tags = "1, 2, 3")]
    #[serde(flatten)]
    pub event: Option<stream_input_request::Event>,
}

/// The members of `process.StreamInputRequest`.
pub mod stream_input_request {
    use serde::{Deserialize, Serialize};

    /// `oneof event`.
    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Event {
        #[prost(message, tag = "1")]
        Start(StartEvent),
        #[prost(message, tag = "2")]
        Data(DataEvent),
        #[prost(message, tag = "3")]
        Keepalive(super::Empty),
    }

    /// `StreamInputRequest.StartEvent`.
    #[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default, rename_all = "camelCase")]
    pub struct StartEvent {
        #[prost(message, optional, tag = "1")]
        pub process: Option<super::ProcessSelector>,
    }

    /// `StreamInputRequest.DataEvent`.
    #[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default, rename_all = "camelCase")]
    pub struct DataEvent {
        #[prost(message, optional, tag = "2")]
        pub input: Option<super::ProcessInput>,
    }
}

/// `process.Signal`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Signal {
    Unspecified = 0,
    Sigterm = 15,
    Sigkill = 9,
}

impl Signal {
    /// The value's name in the .proto (its JSON form).
    pub fn as_str_name(self) -> &'static str {
        match self {
            Signal::Unspecified => "SIGNAL_UNSPECIFIED",
            Signal::Sigterm => "SIGNAL_SIGTERM",
            Signal::Sigkill => "SIGNAL_SIGKILL",
        }
    }

    /// The value named `name` in the .proto.
    pub fn from_str_name(name: &str) -> Option<Self> {
        [Signal::Unspecified, Signal::Sigterm, Signal::Sigkill].into_iter().find(|s| s.as_str_name() == name)
    }
}

enum_json!(signal_json, Signal);

/// `process.SendSignalRequest`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SendSignalRequest {
    #[prost(message, optional, tag = "1")]
    pub process: Option<ProcessSelector>,
    #[prost(enumeration = "Signal", tag = "2")]
    #[serde(with = "signal_json")]
    pub signal: i32,
}

/// `process.CloseStdinRequest` and `process.ConnectRequest` (the same shape).
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SelectRequest {
    #[prost(message, optional, tag = "1")]
    pub process: Option<ProcessSelector>,
}

/// `process.ProcessSelector`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProcessSelector {
    #[prost(oneof = "process_selector::Selector", tags = "1, 2")]
    #[serde(flatten)]
    pub selector: Option<process_selector::Selector>,
}

/// The members of `process.ProcessSelector`.
pub mod process_selector {
    use serde::{Deserialize, Serialize};

    /// `oneof selector`.
    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Selector {
        #[prost(uint32, tag = "1")]
        Pid(u32),
        #[prost(string, tag = "2")]
        Tag(String),
    }
}

// ---- filesystem.Filesystem ----

/// `filesystem.FileType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum FileType {
    Unspecified = 0,
    File = 1,
    Directory = 2,
    Symlink = 3,
}

impl FileType {
    /// The value's name in the .proto (its JSON form).
    pub fn as_str_name(self) -> &'static str {
        match self {
            FileType::Unspecified => "FILE_TYPE_UNSPECIFIED",
            FileType::File => "FILE_TYPE_FILE",
            FileType::Directory => "FILE_TYPE_DIRECTORY",
            FileType::Symlink => "FILE_TYPE_SYMLINK",
        }
    }

    /// The value named `name` in the .proto.
    pub fn from_str_name(name: &str) -> Option<Self> {
        [FileType::Unspecified, FileType::File, FileType::Directory, FileType::Symlink]
            .into_iter()
            .find(|s| s.as_str_name() == name)
    }
}

enum_json!(file_type_json, FileType);

/// `filesystem.EntryInfo`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EntryInfo {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(enumeration = "FileType", tag = "2")]
    #[serde(with = "file_type_json")]
    pub r#type: i32,
    #[prost(string, tag = "3")]
    pub path: String,
    #[prost(int64, tag = "4")]
    #[serde(with = "json::i64_str")]
    pub size: i64,
    #[prost(uint32, tag = "5")]
    pub mode: u32,
    #[prost(string, tag = "6")]
    pub permissions: String,
    #[prost(string, tag = "7")]
    pub owner: String,
    #[prost(string, tag = "8")]
    pub group: String,
    #[prost(message, optional, tag = "9")]
    #[serde(with = "json::timestamp", skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<Timestamp>,
    #[prost(string, optional, tag = "10")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    /// User metadata (the file's `user.e2b.*` extended attributes, prefix stripped).
    #[prost(btree_map = "string, string", tag = "11")]
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// `filesystem.StatRequest`, `MakeDirRequest` and `RemoveRequest` (the same shape).
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PathRequest {
    #[prost(string, tag = "1")]
    pub path: String,
}

/// `filesystem.StatResponse`, `MakeDirResponse` and `MoveResponse` (the same shape).
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EntryResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// `filesystem.MoveRequest`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MoveRequest {
    #[prost(string, tag = "1")]
    pub source: String,
    #[prost(string, tag = "2")]
    pub destination: String,
}

/// `filesystem.ListDirRequest`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListDirRequest {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(uint32, tag = "2")]
    pub depth: u32,
}

/// `filesystem.ListDirResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListDirResponse {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<EntryInfo>,
}

/// `filesystem.EventType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum EventType {
    Unspecified = 0,
    Create = 1,
    Write = 2,
    Remove = 3,
    Rename = 4,
    Chmod = 5,
}

impl EventType {
    /// The value's name in the .proto (its JSON form).
    pub fn as_str_name(self) -> &'static str {
        match self {
            EventType::Unspecified => "EVENT_TYPE_UNSPECIFIED",
            EventType::Create => "EVENT_TYPE_CREATE",
            EventType::Write => "EVENT_TYPE_WRITE",
            EventType::Remove => "EVENT_TYPE_REMOVE",
            EventType::Rename => "EVENT_TYPE_RENAME",
            EventType::Chmod => "EVENT_TYPE_CHMOD",
        }
    }

    /// The value named `name` in the .proto.
    pub fn from_str_name(name: &str) -> Option<Self> {
        [
            EventType::Unspecified,
            EventType::Create,
            EventType::Write,
            EventType::Remove,
            EventType::Rename,
            EventType::Chmod,
        ]
        .into_iter()
        .find(|s| s.as_str_name() == name)
    }
}

enum_json!(event_type_json, EventType);

/// `filesystem.WatchDirRequest` and `filesystem.CreateWatcherRequest` (the same shape).
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WatchRequest {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(bool, tag = "2")]
    pub recursive: bool,
    #[prost(bool, tag = "3")]
    pub include_entry: bool,
    #[prost(bool, tag = "4")]
    pub allow_network_mounts: bool,
}

/// `filesystem.FilesystemEvent`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct FilesystemEvent {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(enumeration = "EventType", tag = "2")]
    #[serde(with = "event_type_json")]
    pub r#type: i32,
    #[prost(message, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// `filesystem.WatchDirResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WatchDirResponse {
    #[prost(oneof = "watch_dir_response::Event", tags = "1, 2, 3")]
    #[serde(flatten)]
    pub event: Option<watch_dir_response::Event>,
}

/// The members of `filesystem.WatchDirResponse`.
pub mod watch_dir_response {
    use serde::{Deserialize, Serialize};

    /// `oneof event`.
    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(clippy::large_enum_variant, reason = "one short-lived value per event sent; boxing buys nothing")]
    pub enum Event {
        #[prost(message, tag = "1")]
        Start(super::Empty),
        #[prost(message, tag = "2")]
        Filesystem(super::FilesystemEvent),
        #[prost(message, tag = "3")]
        Keepalive(super::Empty),
    }
}

/// `filesystem.CreateWatcherResponse`, `GetWatcherEventsRequest` and `RemoveWatcherRequest` (the
/// same shape).
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WatcherId {
    #[prost(string, tag = "1")]
    pub watcher_id: String,
}

/// `filesystem.GetWatcherEventsResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GetWatcherEventsResponse {
    #[prost(message, repeated, tag = "1")]
    pub events: Vec<FilesystemEvent>,
}
