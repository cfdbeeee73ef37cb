//! The process's families: resident memory, CPU seconds, start time, build.

use prometheus_client::registry::Unit;

use crate::telemetry::metrics::Metrics;

use super::{unix, Families, Value};

/// The standard `process_*` figures (Linux).
pub(super) fn process(m: &Metrics, f: &mut Families) {
    if let Some((rss, _)) = process_memory() {
        f.add(
            "process_resident_memory",
            "Resident memory size.",
            Some(Unit::Bytes),
        )
        .gauge(vec![], rss as f64);
    }
    if let Some(cpu) = cpu_seconds() {
        f.add(
            "process_cpu",
            "User and system CPU time spent.",
            Some(Unit::Seconds),
        )
        .samples
        .push((vec![], Value::FloatCounter(cpu)));
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        f.add("process_open_fds", "Open file descriptors.", None)
            .gauge(vec![], fds.count() as f64);
    }
    f.add(
        "process_start_time",
        "Start time of the process (Unix time).",
        Some(Unit::Seconds),
    )
    .gauge(vec![], unix(m.started).floor());
}

/// Resident and peak resident memory of this process, in bytes (Linux `/proc`).
pub fn process_memory() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// User plus system CPU time of the process.
#[allow(unsafe_code)]
fn cpu_seconds() -> Option<f64> {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return None;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Some(t(u.ru_utime) + t(u.ru_stime))
}
