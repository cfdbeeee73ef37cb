//! `rampart check`: every error with its line and column, `--strict`, the listeners it lists,
//! and a bare address quoted.
#![allow(clippy::unwrap_used)]

use crate::support;
use support::*;

#[test]
fn check_lists_every_error_with_line_and_column() {
    let path = scratch("bad.toml");
    std::fs::write(
        &path,
        "listening_address = \"localhost\"\nlogging_level = \"chatty\"\nproxy_timeout = 99999\nsurprise = 1\n\
         [[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"1.2.3\"\nrule_type = \"Greylist\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(rampart_bin())
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let p = path.display().to_string();
    for expected in [
        format!("{p}:1:21: error: `listening_address`"),
        format!("{p}:2:17: error: `logging_level`"),
        format!("{p}:3:17: error: `proxy_timeout`"),
        format!("{p}:4:1: warning: `surprise` unknown key"),
        format!("{p}:7:16: error: `proxy_rules[0].forward_ipv4`"),
        format!("{p}:8:13: error: `proxy_rules[0].rule_type`"),
    ] {
        assert!(err.contains(&expected), "missing {expected:?} in:\n{err}");
    }
    assert!(err.contains("fix:"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("5 error(s)"));

    // A good file passes and reports inactive keys.
    std::fs::write(
        &path,
        "azure_table_storage_key = \"k\"\n[[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"127.0.0.1\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(rampart_bin())
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("accepted, not yet active"));
}

#[test]
fn check_strict_fails_on_warnings_and_print_shows_the_effective_file() {
    let path = scratch("strict.toml");
    let check = |args: &[&str]| {
        let mut cmd = std::process::Command::new(rampart_bin());
        cmd.args(["check", "--config", path.to_str().unwrap()])
            .args(args);
        cmd.output().unwrap()
    };
    // One misplaced global key (an error in every mode) ...
    std::fs::write(
        &path,
        "[[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"127.0.0.1\"\napi_key = \"0123456789abcdef0123\"\n",
    )
    .unwrap();
    let out = check(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":4:1: error: `proxy_rules[0].api_key` `api_key` is a global key, but it comes after the `[[proxy_rules]]` header at line 1"),
        "{err}"
    );
    // ... moved above the rule: the warnings (ARC2's required rule keys) pass without
    // --strict and fail with it.
    std::fs::write(
        &path,
        "api_key = \"0123456789abcdef0123\"\n[[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"127.0.0.1\"\n",
    )
    .unwrap();
    assert_eq!(check(&[]).status.code(), Some(0));
    let out = check(&["--strict"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("--strict: every warning counts as an error")
    );
    // --print: stdout is the file as rampart reads it, and itself a valid file.
    let out = check(&["--print"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("api_key = ") && l.ends_with("# ARC2")),
        "{printed}"
    );
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("# cache_memory = \"256MiB\"")
                && l.ends_with("# rampart, default")),
        "{printed}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("configuration OK"));
    std::fs::write(&path, &printed).unwrap();
    assert_eq!(check(&[]).status.code(), Some(0));
}

#[test]
fn check_counts_and_lists_the_listeners_run_opens() {
    // `tls = "internal"` opens HTTP and HTTPS (and HTTP/3 with `http3`): `check` said
    // "1 listener(s)", counting the plain-HTTP addresses only.
    let path = scratch("listeners.toml");
    let check = |toml: &str| {
        std::fs::write(&path, toml).unwrap();
        let out = std::process::Command::new(rampart_bin())
            .args(["check", "--config", path.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let rule = "[[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 3000\n";
    let both = format!("listen = [\"127.0.0.1:18080\"]\nlisten_https = [\"127.0.0.1:18443\"]\ntls = \"internal\"\n{rule}");
    let out = check(&both);
    assert!(
        out.contains("2 listener(s): HTTP 127.0.0.1:18080, HTTPS 127.0.0.1:18443;"),
        "{out}"
    );
    let out = check(&format!("http3 = true\n{both}"));
    assert!(
        out.contains("3 listener(s): HTTP 127.0.0.1:18080, HTTPS 127.0.0.1:18443, HTTP/3 127.0.0.1:18443 (UDP);"),
        "{out}"
    );
    // No rule has a certificate: `run` opens the plain-HTTP listener only.
    let out = check(&format!(
        "listen = [\"127.0.0.1:18080\"]\nlisten_https = [\"127.0.0.1:18443\"]\n{rule}"
    ));
    assert!(
        out.contains("1 listener(s): HTTP 127.0.0.1:18080;"),
        "{out}"
    );
}

#[test]
fn check_quotes_a_bare_address_and_says_nothing_else_about_it() {
    // `forward_ipv4 = 127.0.0.1` gave "invalid float" with "fix the syntax at this position",
    // after a misleading "`forward_port_http` is set but no origin address".
    let path = scratch("bare.toml");
    std::fs::write(
        &path,
        "listen = [\"127.0.0.1:8080\"]\n\n[[proxy_rules]]\ndomain = \"example.com\"\nmax_age_seconds = \"1h\"\npaths = \"/\"\nforward_ipv4 = 127.0.0.1\nforward_port_http = 3000\n",
    )
    .unwrap();
    let out = std::process::Command::new(rampart_bin())
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let p = path.display().to_string();
    let errors: Vec<&str> = err.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(errors.len(), 3, "{err}");
    for expected in [
        format!("{p}:5:19: error: `proxy_rules[0].max_age_seconds` expected an integer, found a string\n    fix: write it as `max_age_seconds = 3600`"),
        format!("{p}:6:9: error: `proxy_rules[0].paths` expected an array of strings, found a string\n    fix: write it as `paths = [\"/\"]`"),
        format!("{p}:7:16: error: not valid TOML: the value \"127.0.0.1\" is a string and needs quotes\n    fix: write it as `forward_ipv4 = \"127.0.0.1\"`"),
    ] {
        assert!(err.contains(&expected), "missing {expected:?} in:\n{err}");
    }
}
