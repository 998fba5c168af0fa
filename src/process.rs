//! Process identity: whether a process id names a live process, and its *incarnation* digest,
//! which tells a reused process id from the process that wrote a lock or a temporary file.
//!
//! The incarnation is `SHA-256("linux\0" + boot_id + "\0" + starttime)`, the owner identity the
//! reference implementation writes into its spool locks (the producer lock format): `boot_id`
//! from `/proc/sys/kernel/random/boot_id`, `starttime` field 22 of `/proc/<pid>/stat`. Both are
//! Linux-only; elsewhere no incarnation is known and only liveness is checked.
//!
//! Why our own code: the incarnation must be the reference's exact digest (the same bytes hashed
//! in the same way), which no crate computes, and it needs one field of `/proc/<pid>/stat` read
//! so that a command name with spaces or parentheses cannot shift it. Process-listing crates
//! (`sysinfo`, `procfs`) would bring a whole process table, or a large API, for two reads;
//! liveness is one `kill(pid, 0)` through `rustix`, which the crate already uses.

use crate::identity::Digest;

/// The process incarnation digest of `pid` (see the module docs), computed fresh; `None` when the
/// process does not exist, is a zombie or dead, or `/proc` cannot be read.
pub fn process_incarnation(pid: u32) -> Option<Digest> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let boot = boot.trim(); // ASCII text, where this equals JavaScript's trim

    let (state, start) = proc_stat(pid)?;
    if state == "Z" || state == "X" {
        return None;
    }
    Some(Digest::of(format!("linux\0{boot}\0{start}")))
}

/// `(state, starttime)` of `/proc/<pid>/stat`: fields 3 and 22, counted after the last `)` so
/// that a command name containing spaces or parentheses cannot shift them.
fn proc_stat(pid: u32) -> Option<(String, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')' the first field is field 3 (state); field 22 is at index 19.
    Some(((*fields.first()?).to_owned(), (*fields.get(19)?).to_owned()))
}

/// Whether `pid` names a live process: `kill(pid, 0)` succeeds or fails with `EPERM` (exists,
/// not ours), and it is not a zombie or dead.
pub fn pid_alive(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(p) {
        Ok(()) | Err(rustix::io::Errno::PERM) => {}
        Err(_) => return false,
    }
    !matches!(proc_stat(pid), Some((s, _)) if s == "Z" || s == "X")
}
