//! Diagnostics: stderr, filtered by `logging_level` (a reload applies a new one). The access
//! log is written by the proxy itself (`rampart_proxy::telemetry::access_log`).

use rampart_config::Config;
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{reload, Layer as _, Registry};

/// The installed subscriber's handles.
pub struct Logging {
    level: std::sync::Mutex<String>,
    filter: Option<reload::Handle<EnvFilter, Registry>>,
}

impl Logging {
    /// Installs the subscriber: diagnostics on stderr at `logging_level`.
    pub fn init(config: &Config) -> Logging {
        let (filter, handle) = reload::Layer::new(diagnostics_filter(&config.logging_level));
        let diagnostics = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            // Colours only for a terminal: logs piped to a file or a collector stay plain text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter);
        let installed = tracing_subscriber::registry()
            .with(diagnostics)
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
    EnvFilter::try_new(parts.join(",")).unwrap_or_else(|_| EnvFilter::new("error"))
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
        assert_eq!(directives("warning"), ["warn"]);
        assert_eq!(directives("info,hyper=warn"), ["hyper=warn", "info"]);
        assert_eq!(directives("error"), ["error"]);
    }
}
