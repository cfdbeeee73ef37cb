//! Diagnostics (stderr, `logging_level`, changed by a reload) and the access log's subscriber.

use rampart_config::Config;
use rampart_proxy::ACCESS_TARGET;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{reload, Layer as _, Registry};

/// The installed subscriber's handles.
pub struct Logging {
    level: std::sync::Mutex<String>,
    filter: Option<reload::Handle<EnvFilter, Registry>>,
}

impl Logging {
    /// Installs the subscriber: diagnostics on stderr at `logging_level`, the access log on
    /// stdout (each request decides whether it writes a line: `add_logging` and the rule's
    /// `enable_logging`).
    pub fn init(config: &Config) -> Logging {
        let (filter, handle) = reload::Layer::new(diagnostics_filter(&config.logging_level));
        let diagnostics = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            // Colours only for a terminal: logs piped to a file or a collector stay plain text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter);
        let access = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stdout)
            .with_ansi(false)
            .with_target(false)
            .with_level(false)
            .with_filter(Targets::new().with_target(ACCESS_TARGET, LevelFilter::INFO));
        let installed = tracing_subscriber::registry()
            .with(diagnostics)
            .with(access)
            .try_init()
            .is_ok();
        if config.backtracing {
            std::env::set_var("RUST_BACKTRACE", "1");
        }
        Logging {
            level: std::sync::Mutex::new(config.logging_level.clone()),
            filter: installed.then_some(handle),
        }
    }

    /// Applies a reloaded configuration's `logging_level`.
    pub fn apply(&self, config: &Config) {
        let mut level = self.level.lock().unwrap_or_else(|p| p.into_inner());
        if *level == config.logging_level {
            return;
        }
        if let Some(h) = &self.filter {
            if h.reload(diagnostics_filter(&config.logging_level)).is_ok() {
                *level = config.logging_level.clone();
            }
        }
    }

    /// SIGUSR1 (logrotate): reopens log files.
    pub fn reopen(&self) {
        tracing::info!("SIGUSR1: logs go to stdout and stderr; nothing to reopen");
    }
}

/// The diagnostics filter from `logging_level`. ARC2 accepts any value that starts with a level
/// name ("warning", "errors"); tracing would read such a word as a target name and silence
/// everything, so a leading word that is not exactly a level becomes the level it starts with.
fn diagnostics_filter(level: &str) -> EnvFilter {
    const LEVELS: [&str; 6] = ["off", "trace", "debug", "info", "warn", "error"];
    let mut parts: Vec<String> = level.split(',').map(|p| p.trim().to_owned()).collect();
    if let Some(first) = parts.first_mut() {
        if !first.contains('=') && !LEVELS.contains(&first.as_str()) {
            if let Some(l) = LEVELS.iter().find(|l| first.starts_with(**l)) {
                *first = (*l).to_owned();
            }
        }
    }
    parts.push(format!("{ACCESS_TARGET}=off"));
    EnvFilter::try_new(parts.join(","))
        .unwrap_or_else(|_| EnvFilter::new(format!("error,{ACCESS_TARGET}=off")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directives(level: &str) -> Vec<String> {
        let mut d: Vec<String> = diagnostics_filter(level)
            .to_string()
            .split(',')
            .map(str::to_owned)
            .collect();
        d.sort();
        d
    }

    #[test]
    fn logging_level_words_that_start_with_a_level_become_that_level() {
        assert_eq!(directives("warning"), ["access=off", "warn"]);
        assert_eq!(
            directives("info,hyper=warn"),
            ["access=off", "hyper=warn", "info"]
        );
        assert_eq!(directives("error"), ["access=off", "error"]);
    }
}
