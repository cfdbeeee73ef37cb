//! What every peer's config needs: its directory (absolute, open to the users the peers' workers
//! run as, and safe to write into a config language), config files readable by everyone,
//! templates filled in, the open-files limit and the system users to drop to.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub(super) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Characters that could change the meaning of a path written into one of the config languages
/// (quotes, comments, statement ends, blocks, variables, placeholders, shmcb's size suffix).
const UNSAFE_PATH_CHARS: &str = "\"'\\;{}#$`@()";

/// Creates the peer's directory and returns it absolute (configs name absolute paths, so neither
/// the runner's working directory nor NGINX's `-p` can change their meaning) with its text,
/// opened to the unprivileged users the peers' workers run as (0755).
pub(super) fn prepare_dir(dir: &Path) -> io::Result<(PathBuf, String)> {
    fs::create_dir_all(dir)?;
    let abs = fs::canonicalize(dir)?;
    fs::set_permissions(&abs, fs::Permissions::from_mode(0o755))?;
    let Some(text) = abs.to_str() else {
        return Err(invalid(format!("{} is not UTF-8", abs.display())));
    };
    if let Some(c) = text
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || UNSAFE_PATH_CHARS.contains(*c))
    {
        return Err(invalid(format!(
            "{text}: {c:?} cannot be written into the peers' config files; use a plainer directory"
        )));
    }
    let text = text.to_owned();
    Ok((abs, text))
}

/// Writes `name` in `dir`, readable by everyone (the peers read their configs after dropping
/// privileges), and returns its path.
pub(super) fn write_config(dir: &Path, name: &str, contents: &str) -> io::Result<String> {
    let path = dir.join(name);
    fs::write(&path, contents)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
    Ok(path.to_string_lossy().into_owned())
}

/// Replaces each placeholder with its value, in order.
pub(super) fn fill(template: &str, vars: &[(&str, String)]) -> String {
    let mut out = template.to_owned();
    for (key, value) in vars {
        out = out.replace(key, value);
    }
    out
}

pub(super) fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The hard limit on open files of this process (which the peers inherit); None when unlimited
/// or unknown.
pub(super) fn nofile_limit() -> Option<u64> {
    parse_nofile(&fs::read_to_string("/proc/self/limits").ok()?)
}

/// `Max open files  <soft>  <hard>  files` from /proc/PID/limits.
fn parse_nofile(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(4)?.parse().ok()
}

/// Whether every directory from `/` down to `dir` lets other users through (o+x): the workers
/// that NGINX and Varnish start as unprivileged users need that to reach their files.
pub(super) fn reachable_by_others(dir: &Path) -> bool {
    dir.ancestors()
        .all(|d| fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// A system account from /etc/passwd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SystemUser {
    pub(super) name: String,
    pub(super) uid: u32,
    pub(super) gid: u32,
}

/// The first of `candidates` that exists in /etc/passwd.
pub(super) fn system_user(candidates: &[&str]) -> Option<SystemUser> {
    parse_passwd(&fs::read_to_string("/etc/passwd").ok()?, candidates)
}

fn parse_passwd(passwd: &str, candidates: &[&str]) -> Option<SystemUser> {
    candidates.iter().find_map(|want| {
        passwd.lines().find_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            if name != *want {
                return None;
            }
            let _password = fields.next()?;
            let uid = fields.next()?.parse().ok()?;
            let gid = fields.next()?.parse().ok()?;
            Some(SystemUser {
                name: name.to_owned(),
                uid,
                gid,
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_files_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 20000                files     \n";
        assert_eq!(parse_nofile(limits), Some(20_000));
        let unlimited =
            "Max open files            unlimited            unlimited            files     \n";
        assert_eq!(parse_nofile(unlimited), None);
        assert_eq!(parse_nofile(""), None);
    }

    #[test]
    fn passwd_lookup() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
                      proxy:x:13:13:proxy:/bin:/usr/sbin/nologin\n";
        let found = parse_passwd(passwd, &["squid", "proxy", "nobody"]);
        assert_eq!(
            found,
            Some(SystemUser {
                name: "proxy".to_owned(),
                uid: 13,
                gid: 13
            })
        );
        assert_eq!(parse_passwd(passwd, &["www-data"]), None);
    }

    #[test]
    fn reachability() {
        assert!(reachable_by_others(Path::new("/")));
        assert!(!reachable_by_others(Path::new("/definitely/not/here")));
    }
}
