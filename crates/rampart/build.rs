//! `rampart --version`: the package version, the commit it was built from, and the build date.
//! Outside a git checkout (a source tarball) the commit is "unknown"; `SOURCE_DATE_EPOCH` sets
//! the date for reproducible builds.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    // RAMPART_COMMIT: for builds without the repository (a container build).
    let given = std::env::var("RAMPART_COMMIT")
        .ok()
        .filter(|c| !c.is_empty());
    let commit = given
        .clone()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let dirty =
        given.is_none() && git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    let date = time::OffsetDateTime::from_unix_timestamp(epoch)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let (y, m, d) = (date.year(), u8::from(date.month()), date.day());
    let version = format!(
        "{} (commit {commit}{}, built {y:04}-{m:02}-{d:02})",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        if dirty { ", modified" } else { "" }
    );
    println!("cargo:rustc-env=RAMPART_LONG_VERSION={version}");
    println!(
        "cargo:rustc-env=RAMPART_COMMIT_ID={commit}{}",
        if dirty { "-modified" } else { "" }
    );
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-env-changed=RAMPART_COMMIT");
    // A new commit or checkout changes the version.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
        println!("cargo:rerun-if-changed={dir}/index");
    }
}
