//! Many lifecycle cycles in a row: stop/resume keeps the files (processes end), pause/resume keeps the
//! files and the processes (they continue where they were frozen).

use std::fs;
use std::time::{Duration, Instant};

use sandlot_client::api::SandboxState;

use crate::server::Server;
use crate::support::{
    alive, audit_actions, eventually, persistent, sandbox_processes, sh, sh_ok, Latencies, Tree, MIB,
};

const CYCLES: usize = 50;

/// 50 stop/resume cycles keep every byte, mode, owner and symlink of a tree with a 50 MiB file.
#[test]
fn stop_resume_cycles_keep_a_file_tree_intact() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&persistent(Some("stop-cycler")));
    let id = sb.id().to_string();
    let tree = Tree::build(&sb, "/home/user/tree", 50 * MIB);
    let (mut stops, mut resumes) = (Latencies::default(), Latencies::default());
    for cycle in 0..CYCLES {
        let info = stops.time(|| sb.stop()).unwrap_or_else(|e| panic!("stop {cycle}: {e:?}"));
        assert_eq!(info.state, SandboxState::Stopped, "stop {cycle}: {info:?}");
        assert_eq!(client.get(&id).unwrap().state, SandboxState::Stopped);
        let left = sandbox_processes(&id);
        assert!(left.is_empty(), "stop {cycle} left processes of the sandbox running: {left:?}");
        let info = resumes.time(|| sb.resume()).unwrap_or_else(|e| panic!("resume {cycle}: {e:?}"));
        assert_eq!(info.state, SandboxState::Running, "resume {cycle}: {info:?}");
        tree.verify(&sb, &format!("after resume {cycle}"));
        let journal = sh_ok(&sb, &format!("echo {cycle} >> /home/user/journal && cat /home/user/journal"));
        let want: String = (0..=cycle).map(|i| format!("{i}\n")).collect();
        assert_eq!(journal, want, "the journal after resume {cycle}");
    }
    eprintln!("stop   latency over {CYCLES} cycles: {}", stops.summary());
    eprintln!("resume latency over {CYCLES} cycles: {}", resumes.summary());
    let actions = audit_actions(&client, &id);
    assert_eq!(actions.iter().filter(|a| *a == "sandbox.stop").count(), CYCLES, "{actions:?}");
    assert_eq!(actions.iter().filter(|a| *a == "sandbox.resume").count(), CYCLES, "{actions:?}");
}

/// 50 pause/resume cycles freeze a counter process and thaw the same one, continuing where it stopped.
#[test]
fn pause_resume_cycles_freeze_and_continue_the_same_process() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&persistent(Some("pause-cycler")));
    let id = sb.id().to_string();
    let tree = Tree::build(&sb, "/home/user/tree", 50 * MIB);
    let api_pid = sb
        .spawn(&sh("i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.01; done"))
        .expect("spawning the counter");
    let counter = Counter::find(&id);
    assert!(eventually(Duration::from_secs(10), || counter.read().is_some_and(|v| v >= 20)), "the counter never ran");
    let (mut pauses, mut resumes, mut first_exec) = (Latencies::default(), Latencies::default(), Latencies::default());
    for cycle in 0..CYCLES {
        let before = counter.read_settled();
        let info = pauses.time(|| sb.pause()).unwrap_or_else(|e| panic!("pause {cycle}: {e:?}"));
        assert_eq!(info.state, SandboxState::Paused, "pause {cycle}: {info:?}");
        assert_eq!(client.get(&id).unwrap().state, SandboxState::Paused);
        let frozen = counter.raw();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(counter.raw(), frozen, "pause {cycle}: the counter moved while paused");
        assert!(alive(counter.host_pid), "pause {cycle}: the counter's process is gone");
        let at_pause = frozen.trim().parse::<u64>().unwrap_or(before);
        assert!(at_pause >= before, "pause {cycle}: counter went back from {before} to {at_pause}");

        let t0 = Instant::now();
        let info = resumes.time(|| sb.resume()).unwrap_or_else(|e| panic!("resume {cycle}: {e:?}"));
        assert_eq!(info.state, SandboxState::Running, "resume {cycle}: {info:?}");
        sb.run(&["true"]).unwrap_or_else(|e| panic!("first exec after resume {cycle}: {e:?}"));
        first_exec.push(t0.elapsed());

        let after = counter.read_settled();
        assert!(after >= at_pause, "resume {cycle}: counter restarted ({after} < {at_pause} at pause)");
        assert!(
            eventually(Duration::from_secs(5), || counter.read().is_some_and(|v| v > after)),
            "resume {cycle}: the counter does not advance"
        );
        assert!(alive(counter.host_pid), "resume {cycle}: host pid {} of the counter is gone", counter.host_pid);
        let procs = sb.processes().expect("listing processes");
        assert!(
            procs.iter().any(|p| p.pid == api_pid && p.running),
            "resume {cycle}: process {api_pid} is not running: {procs:?}"
        );
        tree.verify(&sb, &format!("after resume {cycle}"));
    }
    eprintln!("pause latency over {CYCLES} cycles: {}", pauses.summary());
    eprintln!("resume (from paused) latency over {CYCLES} cycles: {}", resumes.summary());
    eprintln!("resume + first exec latency over {CYCLES} cycles: {}", first_exec.summary());
    let actions = audit_actions(&client, &id);
    assert_eq!(actions.iter().filter(|a| *a == "sandbox.pause").count(), CYCLES, "{actions:?}");
    assert_eq!(actions.iter().filter(|a| *a == "sandbox.resume").count(), CYCLES, "{actions:?}");
}

/// The counter loop of a sandbox, read from the host through its process's root (reading it through
/// the API would resume a paused sandbox).
struct Counter {
    host_pid: i32,
    path: String,
}

impl Counter {
    fn find(id: &str) -> Counter {
        let mut host_pid = None;
        assert!(
            eventually(Duration::from_secs(5), || {
                host_pid = sandbox_processes(id).into_iter().find(|(_, cmd)| cmd.contains("/tmp/counter")).map(|p| p.0);
                host_pid.is_some()
            }),
            "no counter process in the sandbox's cgroup: {:?}",
            sandbox_processes(id)
        );
        let host_pid = host_pid.expect("found");
        Counter { host_pid, path: format!("/proc/{host_pid}/root/tmp/counter") }
    }

    /// The file as it is (may be empty between the shell's truncate and write).
    fn raw(&self) -> String {
        fs::read_to_string(&self.path).unwrap_or_default()
    }

    fn read(&self) -> Option<u64> {
        self.raw().trim().parse().ok()
    }

    /// A value, retrying over the moment the shell rewrites the file.
    fn read_settled(&self) -> u64 {
        let mut v = None;
        assert!(eventually(Duration::from_secs(2), || {
            v = self.read();
            v.is_some()
        }));
        v.expect("read")
    }
}
