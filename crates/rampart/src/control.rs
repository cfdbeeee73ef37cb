//! The running process's control loop: signals, reloads and rule changes.
//!
//! - SIGINT / SIGTERM: graceful shutdown.
//! - SIGHUP, `POST /_rampart/reload`, or a change of the file under `watch_config = true`: the
//!   file is read and validated again; a file with errors is reported (every problem, with its
//!   line and column) and the configuration in service stays; a valid one is put in service.
//! - The rule operations of the management API: the file is edited (`rampart_config::edit`),
//!   validated, written beside the file, put in service, then renamed over the file. If any
//!   step fails, nothing changed: neither the file nor the configuration in service.
//! - SIGUSR1: reopens the access log file (logrotate).
//! - SIGUSR2: upgrade: starts the binary again with the listening sockets (`upgrade.rs`).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use http::StatusCode;
use rampart_config::edit::{self, EditError};
use rampart_config::{Config, Diagnostic, Severity};
use rampart_proxy::admin::commands::{Answer, Request};
use rampart_proxy::{Reloaded, Running};
use serde_json::json;

use crate::logging::Logging;
use crate::upgrade::Upgrader;

/// Where the configuration came from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file: it can be reloaded and its rules edited. The stamp is the file's version as
    /// it was read at startup (taken before reading, so a change made while rampart starts is
    /// seen by `watch_config`).
    File(PathBuf, Stamp),
    /// Text the command made (`rampart demo`, `rampart proxy`): nothing to reload.
    Embedded(&'static str),
}

/// How often a watched file is checked.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// What identifies a version of the file: modified time, length, inode, and a hash of the
/// text (two saves within one tick of the file system's clock keep the same time).
pub type Stamp = Option<(Option<SystemTime>, u64, u64, u64)>;

pub fn stamp(path: &Path) -> Stamp {
    use std::hash::{Hash as _, Hasher as _};
    let m = std::fs::metadata(path).ok()?;
    let text = std::fs::read(path).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    Some((
        m.modified().ok(),
        m.len(),
        std::os::unix::fs::MetadataExt::ino(&m),
        h.finish(),
    ))
}

/// The control loop's runtime and its signal handlers.
pub struct Signals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
}

impl Signals {
    /// Takes over SIGTERM, SIGHUP and SIGUSR1 (SIGINT is taken when the loop starts).
    pub fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _in = rt.enter();
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
            rt,
        })
    }
}

/// The control loop: runs until SIGINT or SIGTERM.
pub struct Controller<'a> {
    running: &'a mut Running,
    source: Source,
    logging: &'a Logging,
    config: Config,
    /// Warnings already printed (startup or an earlier reload).
    shown: Shown,
    upgrader: Upgrader,
}

/// A warning already shown (key, message): a reload prints only new ones.
type Shown = Vec<(String, String)>;

fn warnings(diagnostics: &[Diagnostic]) -> Shown {
    diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .map(|d| (d.key.clone(), d.message.clone()))
        .collect()
}

impl<'a> Controller<'a> {
    pub fn new(
        running: &'a mut Running,
        source: Source,
        logging: &'a Logging,
        config: Config,
        upgrader: Upgrader,
    ) -> Self {
        // The warnings startup printed.
        let shown = match &source {
            Source::File(p, _) => std::fs::read_to_string(p)
                .map(|src| {
                    warnings(&rampart_config::validate_file(&src, crate::cpus(), p).diagnostics)
                })
                .unwrap_or_default(),
            Source::Embedded(_) => Vec::new(),
        };
        Controller {
            running,
            source,
            logging,
            config,
            shown,
            upgrader,
        }
    }

    /// Runs the loop on `signals` (installed before the listening lines are printed: a signal
    /// sent as soon as they appear must not find the default action, which ends the process).
    pub fn run(mut self, signals: Signals) -> anyhow::Result<()> {
        let Signals {
            rt,
            mut term,
            mut hup,
            mut usr1,
            mut usr2,
        } = signals;
        rt.block_on(self.serve(&mut term, &mut hup, &mut usr1, &mut usr2))?;
        Ok(())
    }

    async fn serve(
        &mut self,
        term: &mut tokio::signal::unix::Signal,
        hup: &mut tokio::signal::unix::Signal,
        usr1: &mut tokio::signal::unix::Signal,
        usr2: &mut tokio::signal::unix::Signal,
    ) -> std::io::Result<()> {
        let mut requests = self.running.take_requests();
        let mut tick = tokio::time::interval(WATCH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seen = match &self.source {
            Source::File(_, at_startup) => *at_startup,
            Source::Embedded(_) => None,
        };
        loop {
            tokio::select! {
                r = tokio::signal::ctrl_c() => { r?; break; }
                _ = term.recv() => break,
                _ = hup.recv() => {
                    let _ = self.reload("SIGHUP");
                    seen = self.path().and_then(stamp);
                }
                _ = usr1.recv() => match self.running.reopen_logs() {
                    Ok(()) => eprintln!("rampart: access log reopened (SIGUSR1)"),
                    Err(e) => eprintln!("rampart: SIGUSR1: {e}; lines go to the file open before"),
                },
                Some(msg) = async { match requests.as_mut() { Some(r) => r.recv().await, None => None } } => {
                    let answer = self.answer(msg.request);
                    seen = self.path().and_then(stamp);
                    let _ = msg.reply.send(answer);
                }
                _ = usr2.recv() => match self.upgrader.start(self.running) {
                    Ok(pid) => eprintln!(
                        "rampart: upgrade: started {} as process {pid}; it takes over the listening sockets and stops this process once it serves",
                        self.upgrader.exe().display()
                    ),
                    Err(e) => eprintln!("rampart: upgrade refused: {e}"),
                },
                _ = tick.tick() => {
                    self.upgrader.poll();
                    let now = self.path().and_then(stamp);
                    if self.config.watch_config && now.is_some() && now != seen {
                        seen = now;
                        let _ = self.reload("the file changed");
                    }
                }
            }
        }
        eprintln!("rampart: shutting down, finishing in-flight requests");
        Ok(())
    }

    fn path(&self) -> Option<&Path> {
        match &self.source {
            Source::File(p, _) => Some(p),
            Source::Embedded(_) => None,
        }
    }

    /// Reads the file again and applies it; `Err` carries the answer for the API.
    fn reload(&mut self, why: &str) -> Result<Answer, Answer> {
        let Some(path) = self.path().map(Path::to_path_buf) else {
            let Source::Embedded(what) = &self.source else {
                unreachable!()
            };
            eprintln!(
                "rampart: {why}: nothing to reload ({what} runs without a configuration file)"
            );
            return Err(refusal(
                StatusCode::CONFLICT,
                format!("{what} runs without a configuration file: nothing to reload"),
            ));
        };
        let src = match std::fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "rampart: reload ({why}) refused: cannot read {}: {e}; the configuration in service stays",
                    path.display()
                );
                rampart_proxy::telemetry::metrics::get().reloaded(false);
                return Err(refusal(
                    StatusCode::CONFLICT,
                    format!("cannot read {}: {e}", path.display()),
                ));
            }
        };
        let done = self.apply(&path, &src, why, None, true);
        if matches!(&done, Err(a) if a.status == StatusCode::UNPROCESSABLE_ENTITY) {
            // An invalid file (a failure to put a valid one in service is counted there).
            rampart_proxy::telemetry::metrics::get().reloaded(false);
        }
        done
    }

    /// Validates `src` and puts it in service. `commit`, when given, runs after the new
    /// configuration is in service and before it is reported (the rule operations rename
    /// their file there); its failure puts the previous configuration back.
    ///
    /// `keep_rules`: a file without any `[[proxy_rules]]` does not replace one with rules (a
    /// truncated or half-written file would answer every request 404); `proxy_rules = []`
    /// says it on purpose. The rule API removing the last rule is on purpose too.
    fn apply(
        &mut self,
        path: &Path,
        src: &str,
        why: &str,
        commit: Option<&dyn Fn() -> std::io::Result<()>>,
        keep_rules: bool,
    ) -> Result<Answer, Answer> {
        let v = rampart_config::validate_file(src, crate::cpus(), path);
        let Some(config) = v.config else {
            return Err(invalid(path, why, &v));
        };
        let no_rules_key = v
            .diagnostics
            .iter()
            .any(|d| d.key == "proxy_rules" && d.severity == Severity::Warning);
        if keep_rules && no_rules_key && config.rules.is_empty() && !self.config.rules.is_empty() {
            eprintln!(
                "rampart: reload ({why}) refused: {} has no [[proxy_rules]] (truncated?) and would answer every request 404; the configuration in service stays ({} rule(s)). To run without rules on purpose, write `proxy_rules = []`",
                path.display(),
                self.config.rules.len()
            );
            rampart_proxy::telemetry::metrics::get().reloaded(false);
            return Err(refusal(
                StatusCode::CONFLICT,
                format!(
                    "{} has no [[proxy_rules]]: every request would be answered 404; the configuration in service stays (write `proxy_rules = []` to run without rules on purpose)",
                    path.display()
                ),
            ));
        }
        let previous = self.config.clone();
        let report = match self.running.reload(config.clone()) {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "rampart: reload ({why}) failed: {e}; the configuration in service stays"
                );
                return Err(refusal(
                    StatusCode::CONFLICT,
                    format!("{e}; the configuration in service stays"),
                ));
            }
        };
        if let Some(commit) = commit {
            if let Err(e) = commit() {
                let _ = self.running.reload(previous);
                eprintln!(
                    "rampart: cannot write {}: {e}; nothing changed",
                    path.display()
                );
                return Err(refusal(
                    StatusCode::CONFLICT,
                    format!("cannot write {}: {e}; nothing changed", path.display()),
                ));
            }
        }
        let now = warnings(&v.diagnostics);
        for d in v.diagnostics.iter().filter(|d| {
            d.severity == Severity::Warning
                && !self.shown.contains(&(d.key.clone(), d.message.clone()))
        }) {
            crate::print_diag(path, d);
        }
        self.shown = now;
        self.logging.apply(&config);
        print_reloaded(path, why, &config, &report);
        let answer = json!({
            "reloaded": true,
            "file": path.display().to_string(),
            "rules": config.rules.len(),
            "opened": report.opened.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "closed": report.closed.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "restart_needed": report.restart_needed,
            "warnings": v.diagnostics.iter().filter(|d| d.severity == Severity::Warning).map(problem).collect::<Vec<_>>(),
        });
        self.config = config;
        Ok(Answer::new(StatusCode::OK, answer.to_string()))
    }

    fn answer(&mut self, request: Request) -> Answer {
        let result = match request {
            Request::Reload => self.reload("POST /_rampart/reload"),
            Request::ListRules => self.list_rules(),
            Request::AddRule { body, json } => {
                self.edit("rule added", StatusCode::CREATED, |src| {
                    edit::add_rule(src, &text(&body)?, json)
                })
            }
            Request::ReplaceRule { domain, body, json } => {
                self.edit("rule replaced", StatusCode::OK, |src| {
                    edit::replace_rule(src, &domain, &text(&body)?, json)
                })
            }
            Request::RemoveRule { domain } => self.edit("rule removed", StatusCode::OK, |src| {
                edit::remove_rule(src, &domain)
            }),
        };
        result.unwrap_or_else(|a| a)
    }

    fn file(&self) -> Result<(PathBuf, String), Answer> {
        let path = match &self.source {
            Source::File(p, _) => p.clone(),
            Source::Embedded(what) => {
                return Err(refusal(
                    StatusCode::CONFLICT,
                    format!(
                        "{what} runs without a configuration file: rule changes could not be kept"
                    ),
                ))
            }
        };
        let src = std::fs::read_to_string(&path).map_err(|e| {
            refusal(
                StatusCode::CONFLICT,
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        Ok((path, src))
    }

    fn list_rules(&self) -> Result<Answer, Answer> {
        let (path, src) = self.file()?;
        let rules = edit::list_rules(&src).map_err(edit_refusal)?;
        // `rules` is JSON already (the rule editor's listing).
        let rules: serde_json::Value = serde_json::from_str(&rules).map_err(|e| {
            refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot list the rules: {e}"),
            )
        })?;
        let listing = json!({ "file": path.display().to_string(), "rules": rules });
        Ok(Answer::new(StatusCode::OK, listing.to_string()))
    }

    /// A rule operation: edit, validate, write beside the file, apply, rename over the file.
    fn edit(
        &mut self,
        what: &str,
        status: StatusCode,
        op: impl FnOnce(&str) -> Result<String, EditError>,
    ) -> Result<Answer, Answer> {
        let (path, src) = self.file()?;
        let new = op(&src).map_err(edit_refusal)?;
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let temp = sibling(&real);
        if let Err(e) = write_new(&real, &temp, &new) {
            let _ = std::fs::remove_file(&temp);
            eprintln!(
                "rampart: {what} refused: cannot write beside {}: {e}",
                real.display()
            );
            return Err(refusal(
                StatusCode::CONFLICT,
                format!(
                    "the change cannot be kept: cannot write beside {}: {e}; nothing changed",
                    real.display()
                ),
            ));
        }
        let rename = || std::fs::rename(&temp, &real);
        let result = self.apply(&path, &new, what, Some(&rename), false);
        let _ = std::fs::remove_file(&temp);
        result.map(|mut a| {
            a.status = status;
            a
        })
    }
}

/// The API's text of a rule body.
fn text(body: &[u8]) -> Result<String, EditError> {
    String::from_utf8(body.to_vec()).map_err(|_| EditError::Entry("the body is not UTF-8".into()))
}

/// `dir/.name.rampart-new`: beside the file, so the rename is atomic.
fn sibling(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.rampart-new"))
}

/// Writes `text` to `temp` with the permissions of `path`, flushed to disk.
fn write_new(path: &Path, temp: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::File::create(temp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    if let Ok(m) = std::fs::metadata(path) {
        std::fs::set_permissions(temp, m.permissions())?;
    }
    Ok(())
}

/// A file that does not validate: every error printed, the answer lists them.
fn invalid(path: &Path, why: &str, v: &rampart_config::Validated) -> Answer {
    let errors: Vec<&Diagnostic> = v.errors().collect();
    for d in &errors {
        crate::print_diag(path, d);
    }
    eprintln!(
        "rampart: reload ({why}) refused: {} error(s) in {}; the configuration in service stays",
        errors.len(),
        path.display()
    );
    Answer::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({
            "error": "the configuration is not valid; the configuration in service stays",
            "problems": errors.iter().map(|d| problem(d)).collect::<Vec<_>>(),
        })
        .to_string(),
    )
}

/// What a reload changed, on stderr; the summary line comes last (whoever waits for it has
/// seen the rest).
fn print_reloaded(path: &Path, why: &str, config: &Config, report: &Reloaded) {
    for a in &report.opened {
        eprintln!("rampart: now also listening on {a}");
    }
    for a in &report.closed {
        eprintln!("rampart: no longer listening on {a}");
    }
    if !report.restart_needed.is_empty() {
        eprintln!(
            "rampart: changed, applied at the next restart only: {}",
            report.restart_needed.join(", ")
        );
    }
    eprintln!(
        "rampart: configuration reloaded from {} ({why}): {} rule(s)",
        path.display(),
        config.rules.len()
    );
}

fn problem(d: &Diagnostic) -> serde_json::Value {
    json!({
        "key": d.key,
        "line": d.line,
        "column": d.column,
        "message": d.message,
        "hint": d.hint,
    })
}

fn refusal(status: StatusCode, error: String) -> Answer {
    Answer::new(status, json!({ "error": error }).to_string())
}

fn edit_refusal(e: EditError) -> Answer {
    let status = match e {
        EditError::NotFound(_) => StatusCode::NOT_FOUND,
        EditError::Exists(_) | EditError::File(_) => StatusCode::CONFLICT,
        EditError::Entry(_) => StatusCode::BAD_REQUEST,
    };
    refusal(status, e.to_string())
}
