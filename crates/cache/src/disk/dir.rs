//! The tier's directory, held open: what it trusts about its directory, and the only way the
//! tier touches a file.
//!
//! # What the directory must be
//!
//! A directory owned by the user rampart runs as (or by root), writable by no one else (no
//! group or other write bit, whatever the sticky bit), below parents that no one else can
//! rearrange (each owned by root or that user, and not writable by others unless it has the
//! sticky bit, as `/tmp` has). OpenSSH holds `~/.ssh` to the same. `rampart check` and the
//! start refuse any other (see [`trust`]), saying which part is wrong and how to fix it.
//!
//! # How files in it are opened
//!
//! Relative to the directory's own descriptor, taken once at open, never by a path through
//! it; never through a symbolic link (`O_NOFOLLOW`); without blocking on a FIFO (`O_NONBLOCK`);
//! and kept only when the handle is a regular file owned by rampart's user with one link —
//! what the tier itself makes. New files are made with `O_EXCL` (a name already there, link or
//! not, is an error, never a file written through), mode 0600. Removal and renaming act on
//! the name in the directory, never on what a link points at. Checks are made on the handle
//! after it is open, so nothing can be swapped in between a check and an open.

use std::fs::File;
use std::io::{Error, ErrorKind, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// The tier's directory, open.
#[derive(Debug)]
pub struct CacheDir {
    fd: OwnedFd,
    path: PathBuf,
    uid: u32,
}

/// Flags every open in the directory carries.
fn base() -> OFlags {
    OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK
}

fn user() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Why a directory may not hold the tier, and the command that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    pub why: String,
    pub fix: String,
}

impl std::fmt::Display for Untrusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; fix: {}", self.why, self.fix)
    }
}

/// What is wrong with a directory (or a parent) for holding the tier, and how to fix it: `None`
/// when it is fine.
fn problem(path: &Path, st: &rustix::fs::Stat, uid: u32, the_dir: bool) -> Option<Untrusted> {
    let mode = st.st_mode & 0o7777;
    let kind = FileType::from_raw_mode(st.st_mode);
    let shown = path.display().to_string();
    let shell = shell_quote(&shown);
    let untrusted = |why: String, fix: String| Some(Untrusted { why, fix });
    if kind != FileType::Directory {
        return untrusted(
            format!("{shown:?} is not a directory"),
            "name a directory".into(),
        );
    }
    let owner = st.st_uid;
    if owner != uid && owner != 0 {
        return untrusted(
            format!(
                "{shown:?} belongs to user id {owner}, not to the user rampart runs as (id {uid}) \
                 or root"
            ),
            format!("chown {uid} {shell}"),
        );
    }
    let others_write = mode & 0o022 != 0;
    if the_dir && others_write {
        return untrusted(
            format!(
                "{shown:?} can be written by other users (mode {mode:04o}), who could plant links \
                 in it"
            ),
            format!("chmod 700 {shell}"),
        );
    }
    if !the_dir && others_write && mode & 0o1000 == 0 {
        return untrusted(
            format!(
                "{shown:?}, a parent of the disk cache, can be written by other users (mode \
                 {mode:04o}), who could replace the cache directory"
            ),
            format!("chmod go-w {shell}, or put the cache elsewhere"),
        );
    }
    None
}

/// `s` as one shell word.
fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Whether `dir` may hold the tier (see the module notes): checked on the directory when it
/// exists, and on every parent that exists. An error says what is wrong and how to fix it.
pub fn trust(dir: &Path) -> Result<(), Untrusted> {
    let uid = user();
    let full = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Untrusted {
                why: format!("the current directory cannot be read ({e})"),
                fix: "give cache_disk as an absolute path".into(),
            })?
            .join(dir)
    };
    // The path as the kernel resolves it: links in it are the operator's to make.
    let mut existing = full.as_path();
    let mut missing = false;
    let resolved = loop {
        match std::fs::canonicalize(existing) {
            Ok(p) => break p,
            Err(_) => match existing.parent() {
                Some(p) => {
                    existing = p;
                    missing = true;
                }
                None => return Ok(()),
            },
        }
    };
    let mut at = Some(resolved.as_path());
    let mut first = true;
    while let Some(p) = at {
        let st = rustix::fs::stat(p).map_err(|e| Untrusted {
            why: format!("{:?} cannot be examined ({})", p.display(), Error::from(e)),
            fix: "name a directory rampart's user can reach".into(),
        })?;
        if let Some(why) = problem(p, &st, uid, first && !missing) {
            return Err(why);
        }
        first = false;
        at = p.parent();
    }
    Ok(())
}

impl CacheDir {
    /// Opens `path` (created, mode 0700, when missing) and checks it and its parents (see
    /// [`trust`]); the error says what is wrong.
    pub fn open(path: &Path) -> std::io::Result<CacheDir> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)?;
        trust(path).map_err(|u| Error::new(ErrorKind::PermissionDenied, u.to_string()))?;
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let uid = user();
        // What was opened, checked again on the handle (the path could have changed since).
        let st = rustix::fs::fstat(&fd)?;
        if let Some(u) = problem(path, &st, uid, true) {
            return Err(Error::new(ErrorKind::PermissionDenied, u.to_string()));
        }
        Ok(CacheDir {
            fd,
            path: path.to_path_buf(),
            uid,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The handle, if it is a file the tier could have made.
    fn checked(&self, fd: OwnedFd, name: &str) -> std::io::Result<File> {
        let st = rustix::fs::fstat(&fd)?;
        let kind = FileType::from_raw_mode(st.st_mode);
        let why = if kind != FileType::RegularFile {
            Some(format!("{name} is not a regular file ({kind:?})"))
        } else if st.st_uid != self.uid {
            Some(format!(
                "{name} belongs to user id {}, not to rampart's (id {})",
                st.st_uid, self.uid
            ))
        } else if st.st_nlink != 1 {
            Some(format!(
                "{name} has {} links (rampart makes one)",
                st.st_nlink
            ))
        } else {
            None
        };
        match why {
            Some(why) => Err(Error::new(ErrorKind::InvalidData, why)),
            None => Ok(File::from(fd)),
        }
    }

    fn refused(name: &str, e: rustix::io::Errno) -> Error {
        if e == rustix::io::Errno::LOOP {
            Error::new(
                ErrorKind::InvalidData,
                format!("{name} is a symbolic link (never followed)"),
            )
        } else {
            Error::from(e)
        }
    }

    /// An existing file of the tier, for reading (and writing with `write`).
    pub fn open_file(&self, name: &str, write: bool) -> std::io::Result<File> {
        let mode = if write { OFlags::RDWR } else { OFlags::RDONLY };
        let fd = rustix::fs::openat(&self.fd, name, base() | mode, Mode::empty())
            .map_err(|e| Self::refused(name, e))?;
        self.checked(fd, name)
    }

    /// A new file (an error if the name is taken, by a link or anything else).
    pub fn create_new(&self, name: &str) -> std::io::Result<File> {
        let flags = base() | OFlags::RDWR | OFlags::CREATE | OFlags::EXCL;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o600))
            .map_err(|e| Self::refused(name, e))?;
        self.checked(fd, name)
    }

    /// A new file under a temporary name: whatever had the name before (a file of an
    /// interrupted write, or anything planted there) is removed first, never written through.
    pub fn create_fresh(&self, name: &str) -> std::io::Result<File> {
        match self.remove(name) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.create_new(name)
    }

    /// An existing file, or a new one when there is none (the lock file).
    pub fn open_or_create(&self, name: &str) -> std::io::Result<File> {
        let flags = base() | OFlags::RDWR | OFlags::CREATE;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o600))
            .map_err(|e| Self::refused(name, e))?;
        self.checked(fd, name)
    }

    /// A file's bytes, at most `cap` of them (more is an error).
    pub fn read(&self, name: &str, cap: u64) -> std::io::Result<Vec<u8>> {
        let f = self.open_file(name, false)?;
        let mut out = Vec::new();
        f.take(cap.saturating_add(1)).read_to_end(&mut out)?;
        if out.len() as u64 > cap {
            return Err(Error::new(
                ErrorKind::InvalidData,
                format!("{name} is larger than {cap} bytes"),
            ));
        }
        Ok(out)
    }

    /// The length of a file of the tier; 0 when it is absent or not one.
    pub fn len_of(&self, name: &str) -> u64 {
        self.open_file(name, false)
            .and_then(|f| f.metadata())
            .map_or(0, |m| m.len())
    }

    /// Removes a name from the directory (a link itself, never its target).
    pub fn remove(&self, name: &str) -> std::io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()).map_err(Error::from)
    }

    /// Renames `from` to `to` in the directory (a link at `to` is replaced, not followed).
    pub fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        rustix::fs::renameat(&self.fd, from, &self.fd, to).map_err(Error::from)
    }

    /// Flushes the directory's entries (after a rename or a new file).
    pub fn sync(&self) -> std::io::Result<()> {
        rustix::fs::fsync(&self.fd).map_err(Error::from)
    }

    /// The names in the directory (those that are not UTF-8 are left out: the tier makes none).
    pub fn names(&self) -> std::io::Result<Vec<String>> {
        let mut dir = rustix::fs::Dir::read_from(self.fd.as_fd())?;
        let mut out = Vec::new();
        while let Some(e) = dir.read() {
            let e = e?;
            if let Ok(n) = e.file_name().to_str() {
                if n != "." && n != ".." {
                    out.push(n.to_owned());
                }
            }
        }
        Ok(out)
    }
}
