//! The process: workers and their runtime, logging, shutdown.

use std::time::Duration;

use super::{error, secs};
use crate::model::{AccessLogConfig, LogFormat, RuntimeMode};
use crate::reader::{Section, Sink};

/// The process keys, for [`crate::Config`].
pub(super) struct Process {
    pub workers: usize,
    pub runtime: RuntimeMode,
    pub backtracing: bool,
    pub add_logging: bool,
    pub logging_level: String,
    pub shutdown_timeout: Duration,
    pub watch_config: bool,
    pub access_log: AccessLogConfig,
}

pub(super) fn read(s: &mut Section<'_>, sink: &mut Sink<'_>, cpus: usize) -> Process {
    let workers = s
        .int(sink, "workers", 1, 1024)
        .map_or(cpus.max(1), |w| w.value as usize);
    let runtime = match s.string(sink, "worker_runtime") {
        Some(r) => match r.value.as_str() {
            "per-core" => RuntimeMode::PerCore,
            "shared" => RuntimeMode::Shared,
            _ => {
                error(
                    sink,
                    &r,
                    format!("unknown worker_runtime {:?}", r.value),
                    "use \"per-core\" (default) or \"shared\"",
                );
                RuntimeMode::PerCore
            }
        },
        None => RuntimeMode::PerCore,
    };
    let backtracing = s.bool(sink, "backtracing").is_some_and(|b| b.value);
    let add_logging = s.bool(sink, "add_logging").is_none_or(|b| b.value);
    let logging_level = match s.string(sink, "logging_level") {
        Some(l) => {
            const LEVELS: [&str; 6] = ["off", "trace", "debug", "info", "warn", "error"];
            if LEVELS.iter().any(|p| l.value.starts_with(p)) {
                l.value
            } else {
                error(
                    sink,
                    &l,
                    format!("Provided logging level is incorrect: {:?}", l.value),
                    "select one of those: off, trace, debug, info, warn, error",
                );
                "error".to_owned()
            }
        }
        None => "error".to_owned(),
    };
    let shutdown_timeout = s
        .int(sink, "shutdown_timeout_seconds", 0, 3600)
        .map_or(Duration::from_secs(30), |v| secs(v.value));
    let watch_config = s.bool(sink, "watch_config").is_some_and(|b| b.value);
    let format = match s.string(sink, "access_log_format") {
        Some(f) => match f.value.as_str() {
            "kv" => LogFormat::Kv,
            "json" => LogFormat::Json,
            _ => {
                error(
                    sink,
                    &f,
                    format!("unknown access_log_format {:?}", f.value),
                    "use \"kv\" (key=value, the default) or \"json\"",
                );
                LogFormat::Kv
            }
        },
        None => LogFormat::Kv,
    };
    let path = match s.string(sink, "access_log_path") {
        Some(p) if p.value.trim().is_empty() => {
            error(
                sink,
                &p,
                "`access_log_path` is empty",
                "name a file, e.g. \"/var/log/rampart/access.log\", or remove the key for stdout",
            );
            None
        }
        Some(p) if p.value == "-" || p.value == "stdout" => None,
        Some(p) => Some(std::path::PathBuf::from(p.value)),
        None => None,
    };
    Process {
        access_log: AccessLogConfig { path, format },
        watch_config,
        workers,
        runtime,
        backtracing,
        add_logging,
        logging_level,
        shutdown_timeout,
    }
}
