//! `error_pages_dir` and the reading of error page files (`[proxy_rules.error_pages]`).
//!
//! An error page is published: every client of its rule can get it. And a rule can come from
//! the management API (`POST /_rampart/rules`), whose caller must not be able to publish any
//! file the process can read. So a page file is read only from inside `error_pages_dir` (by
//! default the configuration file's directory): no `..` in its path, its real path (symbolic
//! links resolved) inside the directory, a regular file (opened without blocking and without
//! following a last symbolic link, then checked through the handle, so a FIFO or a device is
//! refused rather than waited on or read forever), at most [`MAX_PAGE`] bytes, enforced while
//! reading. The configuration file itself and a file holding a private key are refused too:
//! the default directory often has both.

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use crate::reader::{At, Section, Sink};
use crate::validate::{error, toml_string};

/// Largest error page.
pub(crate) const MAX_PAGE: u64 = 1 << 20;

/// Where error pages may be read from.
pub(crate) struct PagesDir {
    /// As written (relative to the configuration file's directory), or that directory.
    dir: PathBuf,
    /// Its real path, or why it cannot be used.
    real: Result<PathBuf, String>,
    /// The configuration file's real path.
    config_file: Option<PathBuf>,
}

/// How a page names its file: `503 = "…"` or `503 = { file = "…" }` (the fix is written the
/// same way).
#[derive(Clone, Copy)]
pub(crate) enum Written<'a> {
    Bare(&'a str),
    Table,
}

impl Written<'_> {
    /// The line that names `file`, as the reader can paste it.
    fn line(self, file: &str) -> String {
        match self {
            Written::Bare(status) => format!("{status} = {}", toml_string(file)),
            Written::Table => format!("file = {}", toml_string(file)),
        }
    }
}

impl PagesDir {
    /// `error_pages_dir` (global): relative to the configuration file's directory; by default
    /// that directory (the working directory for text that came from no file).
    pub(crate) fn read(s: &mut Section<'_>, sink: &mut Sink<'_>, file: Option<&Path>) -> Self {
        let base = file
            .and_then(Path::parent)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let config_file = file.and_then(|f| std::fs::canonicalize(f).ok());
        let Some(at) = s.string(sink, "error_pages_dir") else {
            let real = real_dir(&base);
            return PagesDir {
                dir: base,
                real,
                config_file,
            };
        };
        let written = at.value.trim();
        if written.is_empty() {
            error(
                sink,
                &at,
                "`error_pages_dir` is empty",
                "name the directory that holds the error pages, e.g. `error_pages_dir = \"/etc/rampart/errors\"`, or remove the key for the configuration file's directory",
            );
            return PagesDir {
                real: Err("it is empty".into()),
                dir: base,
                config_file,
            };
        }
        let dir = base.join(written);
        let real = real_dir(&dir);
        if let Err(e) = &real {
            error(
                sink,
                &at,
                format!("cannot use {:?} as the directory of error pages: {e}", dir),
                "name an existing directory that holds the error pages and nothing else, e.g. `error_pages_dir = \"/etc/rampart/errors\"` (relative: from the configuration file's directory)",
            );
        }
        PagesDir {
            dir,
            real,
            config_file,
        }
    }

    /// The bytes of the page file `name`; every reason it cannot be used is reported at
    /// `entry`.
    pub(crate) fn read_page(
        &self,
        sink: &mut Sink<'_>,
        entry: &At<&toml_edit::Item>,
        name: &str,
        written: Written<'_>,
    ) -> Option<Vec<u8>> {
        let read = self
            .locate(name, written)
            .and_then(|real| self.contents(name, &real));
        match read {
            Ok(body) => Some(body),
            Err((message, hint)) => {
                error(sink, entry, message, hint);
                None
            }
        }
    }

    /// Where the page file `name` really is, when that is inside the directory; else what to
    /// say and the fix.
    fn locate(&self, name: &str, written: Written<'_>) -> Result<PathBuf, (String, String)> {
        let path = Path::new(name);
        let shown = self.dir.display();
        let copy = |file: &Path| {
            let file_name = file
                .file_name()
                .map_or_else(|| "page.html".into(), |n| n.to_string_lossy().into_owned());
            format!(
                "copy the file into {shown} and write `{}` (or set `error_pages_dir` above the first [[proxy_rules]] to a directory that holds error pages and nothing else)",
                written.line(&file_name)
            )
        };
        let full = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.dir.join(path)
        };
        if path.components().any(|c| c == Component::ParentDir) {
            // What the path means without `..`: inside the directory, that is the fix.
            let inside = lexical(&full)
                .strip_prefix(lexical(&self.dir))
                .ok()
                .filter(|r| !r.as_os_str().is_empty())
                .map(|rel| format!("write `{}`", written.line(&rel.to_string_lossy())));
            return Err((
                format!(
                    "{name:?} has `..` in it: error pages are read only from `error_pages_dir` ({shown}), and `..` may lead out of it"
                ),
                inside.unwrap_or_else(|| copy(path)),
            ));
        }
        let real_dir = self.real.as_ref().map_err(|e| {
            (
                format!("cannot read the error page {name:?}: error pages are read only from `error_pages_dir` ({shown}), which cannot be used: {e}"),
                "set `error_pages_dir` above the first [[proxy_rules]] to an existing directory that holds the error pages".to_owned(),
            )
        })?;
        let real = std::fs::canonicalize(&full).map_err(|e| {
            (
                format!("cannot read the error page {name:?}: {e}"),
                format!("give the path of a file in `error_pages_dir` ({shown}); relative paths start there"),
            )
        })?;
        if real.starts_with(real_dir) {
            return Ok(real);
        }
        let message = if full.starts_with(&self.dir) || full.starts_with(real_dir) {
            format!(
                "{name:?} is a symbolic link to {}, outside `error_pages_dir` ({shown}); error pages are read only from there",
                real.display()
            )
        } else {
            format!(
                "{name:?} is outside `error_pages_dir` ({shown}); error pages are read only from there"
            )
        };
        Err((message, copy(&real)))
    }

    /// The bytes of the page file at `real` (inside the directory), unless it is not one to
    /// publish: the configuration file, anything but a regular file of at most 1 MiB, a private
    /// key.
    fn contents(&self, name: &str, real: &Path) -> Result<Vec<u8>, (String, String)> {
        let shown = self.dir.display();
        let own_dir = "name a page file; keep error pages in a directory of their own and set `error_pages_dir` to it";
        if self.config_file.as_deref() == Some(real) {
            return Err((
                format!("{name:?} is the configuration file itself, which is never published as an error page (it is in `error_pages_dir`, {shown})"),
                own_dir.to_owned(),
            ));
        }
        let body = read_regular(real).map_err(|why| {
            (
                format!("cannot read the error page {name:?}: {why}"),
                format!("name a regular file of at most 1 MiB in `error_pages_dir` ({shown})"),
            )
        })?;
        if contains(&body, b"PRIVATE KEY-----") {
            return Err((
                format!("{name:?} holds a private key, which is never published as an error page"),
                own_dir.to_owned(),
            ));
        }
        Ok(body)
    }
}

/// The real path of `dir`, which must be a directory.
fn real_dir(dir: &Path) -> Result<PathBuf, String> {
    let real = std::fs::canonicalize(dir).map_err(|e| e.to_string())?;
    if !real.is_dir() {
        return Err("it is not a directory".into());
    }
    Ok(real)
}

/// `path` with `.` and `..` resolved by their names alone (no symbolic link followed).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// Reads a regular file of at most [`MAX_PAGE`] bytes. Opened without blocking (a FIFO
/// would wait for a writer) and without following a symbolic link last in the path (the
/// path is already resolved: a link there now was put in since); what it is, is asked of
/// the opened handle.
fn read_regular(path: &Path) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a device, a FIFO or a socket)"
        };
        return Err(format!("it is {what}"));
    }
    let mut body = Vec::new();
    file.take(MAX_PAGE + 1)
        .read_to_end(&mut body)
        .map_err(|e| e.to_string())?;
    if body.len() as u64 > MAX_PAGE {
        return Err(format!(
            "it is larger than {MAX_PAGE} bytes (1 MiB), the most an error page may have"
        ));
    }
    Ok(body)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
