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

/// Days since 1970-01-01 → (year, month, day) (H. Hinnant's civil-from-days).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
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
    let (y, m, d) = civil(epoch.div_euclid(86_400));
    let version = format!(
        "{} (commit {commit}{}, built {y:04}-{m:02}-{d:02})",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        if dirty { ", modified" } else { "" }
    );
    println!("cargo:rustc-env=RAMPART_LONG_VERSION={version}");
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
