//! Caching keys: sizes, the disk tier, heuristics, statuses, lifetimes and stale windows.

use super::*;

#[test]
fn cache_sizes() {
    let v = validate("cache_memory = \"64MiB\"\ncache_max_object = 1000\n", 1);
    let c = v.config.expect("config");
    assert_eq!(c.cache.memory, 64 << 20);
    assert_eq!(c.cache.max_object, 1000);
    assert!(c.cache.enabled);
    let v = validate("cache_memory = \"lots\"\ncache_max_object = -1\n", 1);
    assert_eq!(errors(&v).len(), 2, "{:?}", v.diagnostics);
    assert_eq!(validate::parse_size("2GiB"), Some(2 << 30));
    assert_eq!(validate::parse_size("5MB"), Some(5_000_000));
    assert_eq!(validate::parse_size("12 K"), Some(12 << 10));
    assert_eq!(validate::parse_size("99999999999999G"), None);
}

#[test]
fn the_disk_tier_keys() {
    let dir = std::env::temp_dir().join(format!("rampart-cfg-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Off by default; a missing directory is fine (created at start), and `check` creates
    // nothing.
    let v = validate("", 1);
    assert_eq!(v.config.expect("config").cache.disk, None);
    let src = format!(
        "cache_disk = {:?}\ncache_disk_size = \"64MiB\"\ncache_disk_min_uses = 3\n",
        dir.join("sub").display().to_string()
    );
    std::fs::create_dir_all(&dir).expect("dir");
    let v = validate(&src, 1);
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let d = v.config.expect("config").cache.disk.expect("disk");
    assert_eq!((d.size, d.min_uses), (64 << 20, 3));
    assert_eq!(d.path, dir.join("sub"));
    assert!(!dir.join("sub").exists(), "check must not create it");
    let names: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
    assert!(names.is_empty(), "the probe file is removed: {names:?}");
    // Defaults: 1 GiB, written at the second use.
    let v = validate(
        &format!("cache_disk = {:?}\n", dir.display().to_string()),
        1,
    );
    let d = v.config.expect("config").cache.disk.expect("disk");
    assert_eq!((d.size, d.min_uses), (1 << 30, 2));

    // Bad values: each reported at its line and column.
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").expect("file");
    let v = validate(
        &format!(
            "cache_disk = {:?}\ncache_disk_size = \"1MiB\"\ncache_disk_min_uses = 0\n",
            file.display().to_string()
        ),
        1,
    );
    let e = errors(&v);
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(
        e[0].starts_with("error at 1:14 `cache_disk`") && e[0].contains("not a directory"),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.starts_with("error at 2:19 `cache_disk_size`")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.starts_with("error at 3:23 `cache_disk_min_uses`")),
        "{e:?}"
    );
    let v = validate(
        &format!(
            "cache_disk = {:?}\n",
            file.join("below").display().to_string()
        ),
        1,
    );
    assert!(
        errors(&v)[0].contains("a part of its path is a file"),
        "{:?}",
        v.diagnostics
    );
    for bad in ["cache_disk = true", "cache_disk = \"\"", "cache_disk = 5"] {
        assert_eq!(errors(&validate(bad, 1)).len(), 1, "{bad}");
    }
    let bad_size = format!(
        "cache_disk_size = \"big\"\ncache_disk = {:?}",
        dir.display().to_string()
    );
    assert_eq!(errors(&validate(&bad_size, 1)).len(), 1, "{bad_size}");
    // `/tmp` itself: anyone may write there.
    let e = errors(&validate("cache_disk = \"/tmp\"", 1));
    assert!(
        e.len() == 1 && e[0].contains("can be written by other users"),
        "{e:?}"
    );
    // A directory rampart cannot write (not when the tests run as root, who can).
    let ro = dir.join("ro");
    std::fs::create_dir_all(&ro).expect("dir");
    let mut perms = std::fs::metadata(&ro).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
    std::fs::set_permissions(&ro, perms).expect("chmod");
    if std::fs::File::create(ro.join("x")).is_err() {
        let v = validate(&format!("cache_disk = {:?}\n", ro.display().to_string()), 1);
        let e = errors(&v);
        assert!(e.len() == 1 && e[0].contains("cannot write in it"), "{e:?}");
        let v = validate(
            &format!("cache_disk = {:?}\n", ro.join("new").display().to_string()),
            1,
        );
        assert!(
            errors(&v)[0].contains("cannot create it"),
            "{:?}",
            v.diagnostics
        );
    }
    // Sizes without a directory do nothing: said so.
    let v = validate("cache_disk_size = \"2GiB\"\ncache_disk = false\n", 1);
    assert!(errors(&v).is_empty());
    assert!(
        warnings(&v)
            .iter()
            .any(|w| w.contains("no effect without `cache_disk`")),
        "{:?}",
        v.diagnostics
    );

    // Per rule: a switch only.
    let global = format!("cache_disk = {:?}", dir.display().to_string());
    let v = with(&global, "cache_disk = false");
    let c = v.config.expect("config");
    assert!(c.cache.disk.is_some());
    assert!(!c.rules.last().expect("rule").cache_disk);
    let on = with(&global, "").config.expect("config");
    assert!(on.rules.last().expect("rule").cache_disk);
    let v = with(&global, "cache_disk = \"/elsewhere\"");
    assert!(
        errors(&v)[0].contains("cannot have a disk directory of its own"),
        "{:?}",
        v.diagnostics
    );
    let v = with("", "cache_disk = true");
    assert!(
        warnings(&v)
            .iter()
            .any(|w| w.contains("no global `cache_disk`")),
        "{:?}",
        v.diagnostics
    );

    let mut perms = std::fs::metadata(&ro).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    let _ = std::fs::set_permissions(&ro, perms);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cache_heuristic_and_store_set_cookie() {
    let rule = "forward_ipv4 = \"127.0.0.1\"\nmax_age_seconds = 60\n";
    // Defaults: ARC2's behaviour.
    let v = validate(&format!("[[proxy_rules]]\ndomain = \"a\"\n{rule}"), 1);
    let c = v.config.expect("config");
    assert_eq!(c.cache.heuristic, CacheHeuristic::MaxAge);
    assert!(!c.cache.store_set_cookie);
    assert_eq!(c.rules[0].cache_heuristic, CacheHeuristic::MaxAge);
    assert!(!c.rules[0].store_set_cookie);
    // Global values are the rules' defaults; a rule may set its own.
    let v = validate(
        &format!(
            "cache_heuristic = \"last_modified\"\nstore_set_cookie = true\n\
             [[proxy_rules]]\ndomain = \"a\"\n{rule}\
             [[proxy_rules]]\ndomain = \"b\"\n{rule}cache_heuristic = \"none\"\nstore_set_cookie = false\n"
        ),
        1,
    );
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config");
    assert_eq!(c.cache.heuristic, CacheHeuristic::LastModified);
    assert_eq!(
        (c.rules[0].cache_heuristic, c.rules[0].store_set_cookie),
        (CacheHeuristic::LastModified, true)
    );
    assert_eq!(
        (c.rules[1].cache_heuristic, c.rules[1].store_set_cookie),
        (CacheHeuristic::None, false)
    );
    // Bad values are listed with their positions.
    let v = validate(
        &format!(
            "cache_heuristic = \"heuristic\"\n[[proxy_rules]]\ndomain = \"a\"\n{rule}\
             cache_heuristic = 3\nstore_set_cookie = \"yes\"\n"
        ),
        1,
    );
    assert!(v.config.is_none());
    let errs = errors(&v);
    for needle in [
        "error at 1:19 `cache_heuristic`",
        "error at 6:19 `proxy_rules[0].cache_heuristic`",
        "error at 7:20 `proxy_rules[0].store_set_cookie`",
    ] {
        assert!(
            errs.iter().any(|e| e.contains(needle)),
            "missing {needle:?} in {errs:#?}"
        );
    }
    assert!(
        errs.iter().any(|e| e.contains("\"last_modified\"")),
        "{errs:#?}"
    );
}

#[test]
fn cache_statuses_global_and_per_rule() {
    let v = with("", "");
    let c = v.config.expect("config");
    assert_eq!(c.cache.statuses, CacheStatuses::Arc2);
    assert_eq!(c.rules[0].cache_statuses, CacheStatuses::Arc2);
    let c = with("cache_statuses = \"rfc9111\"", "")
        .config
        .expect("config");
    assert_eq!(c.rules[0].cache_statuses, CacheStatuses::Rfc9111);
    let c = with("cache_statuses = \"rfc9111\"", "cache_statuses = \"arc2\"")
        .config
        .expect("config");
    assert_eq!(c.rules[0].cache_statuses, CacheStatuses::Arc2);
    let v = with("", "cache_statuses = \"all\"");
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("unknown cache_statuses \"all\""), "{e:?}");
}

/// `check` called a directory anyone could write (mode 1777) fine,
/// and the disk tier then followed links planted in it. Refused at its line and column, with
/// a fix that works when pasted.
#[test]
fn a_disk_cache_directory_others_can_write_is_an_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("rampart-cfg-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let src = format!(
        "cache_disk = {:?}\ncache_disk_size = \"64MiB\"\n",
        dir.display().to_string()
    );
    let v = validate(&src, 1);
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("error at 1:14 `cache_disk`")
            && e[0].contains("can be written by other users (mode 1777)")
            && e[0].contains(&format!("chmod 700 {}", dir.display())),
        "{e:?}"
    );
    // The fix, pasted, makes it pass.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod 700");
    assert!(errors(&validate(&src, 1)).is_empty());
    // A link planted under the probe's name is not written through.
    let victim = dir.join("victim");
    std::fs::write(&victim, b"keep").expect("victim");
    let probe = dir.join(format!(".rampart-probe-{}", std::process::id()));
    std::os::unix::fs::symlink(&victim, &probe).expect("link");
    let _ = validate(&src, 1);
    assert_eq!(std::fs::read(&victim).expect("victim"), b"keep");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn expires_takes_seconds_durations_and_off() {
    let path = "[[proxy_rules.path_rules]]\npath = \"/live\"\nmatch_type = \"StartsWith\"\nrule_type = \"Whitelist\"\nmax_age_seconds = 1\nexpires = \"off\"\n\
                [[proxy_rules.path_rules]]\npath = \"/static\"\nmatch_type = \"StartsWith\"\nrule_type = \"Whitelist\"\nmax_age_seconds = 1\nexpires = \"1h30m\"\n";
    let v = with("", &format!("expires = \"7d\"\n{path}"));
    let c = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
    let r = &c.rules[0];
    assert_eq!(r.expires, Some(604_800));
    assert_eq!(r.path_rules[0].expires, Some(None));
    assert_eq!(r.path_rules[1].expires, Some(Some(5_400)));
    assert_eq!(
        with("", "expires = 0\n").config.expect("valid").rules[0].expires,
        Some(0)
    );
    assert_eq!(with("", "").config.expect("valid").rules[0].expires, None);
    for bad in ["\"7 days\"", "\"20y\"", "-1", "true", "\"3651d\""] {
        let v = with("", &format!("expires = {bad}\n"));
        let e: Vec<_> = v.errors().collect();
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert_eq!(e[0].line, 21, "{bad}: {e:?}");
        assert!(e[0].message.contains("lifetime"), "{bad}: {e:?}");
        assert!(e[0].hint.contains("expires = \"7d\""), "{bad}: {e:?}");
    }
}

#[test]
fn max_age_by_status_per_rule_and_path_rule() {
    let v = with(
        "",
        "max_age_by_status = { 200 = 600, 404 = 60, any = 5 }\n\
         [[proxy_rules.path_rules]]\npath = \"/api/\"\nmatch_type = \"StartsWith\"\n\
         rule_type = \"Whitelist\"\nmax_age_seconds = 60\nmax_age_by_status = { 404 = 0 }\n\
         [[proxy_rules.path_rules]]\npath = \"/static/\"\nmatch_type = \"StartsWith\"\n\
         rule_type = \"Whitelist\"\nmax_age_seconds = 60\n",
    );
    let c = v
        .config
        .clone()
        .unwrap_or_else(|| panic!("{:?}", errors(&v)));
    let r = &c.rules[0];
    assert_eq!(*r.max_age_by_status, [(200, 600), (404, 60), (0, 5)]);
    assert_eq!(
        r.path_rules[0].max_age_by_status.as_deref(),
        Some(&[(404, 0)][..])
    );
    assert_eq!(r.path_rules[1].max_age_by_status, None);
    assert!(with("", "").config.expect("config").rules[0]
        .max_age_by_status
        .is_empty());
    // The printed file reads back the same.
    let src = format!("{ARC2_BENCH}max_age_by_status = {{ 200 = 600, 404 = 60 }}\n");
    let c = validate(&src, 1).config.expect("config");
    let printed = crate::effective(&src, 1);
    assert_eq!(validate(&printed, 1).config, Some(c), "{printed}");
}

#[test]
fn max_age_by_status_reports_bad_entries_where_they_are() {
    let v = with(
        "",
        "max_age_by_status = { 200 = 600, 99 = 1, 304 = 60, 404 = \"1m\", ok = 3 }",
    );
    let e = errors(&v);
    assert_eq!(e.len(), 4, "{e:?}");
    let line = ARC2_BENCH.lines().count() + 2;
    assert!(e.iter().all(|m| m.contains(&format!("{line}:"))), "{e:?}");
    assert!(e[0].contains("\"99\" is not a status code"), "{e:?}");
    assert!(e[1].contains("status 304 is never stored"), "{e:?}");
    assert!(
        e[2].contains("the lifetime of 404 must be a whole number of seconds"),
        "{e:?}"
    );
    assert!(e[3].contains("\"ok\" is not a status code"), "{e:?}");
    let v = with("", "max_age_by_status = 600");
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("expected a table"), "{e:?}");
}

#[test]
fn stale_windows_global_and_per_rule() {
    let c = with("", "").config.expect("config");
    assert_eq!(c.cache.stale_while_revalidate, None);
    assert_eq!(c.rules[0].stale_if_error, None);
    let c = with(
        "stale_while_revalidate_seconds = 30\nstale_if_error_seconds = 86400",
        "stale_if_error_seconds = 60",
    )
    .config
    .expect("config");
    assert_eq!(c.rules[0].stale_while_revalidate, Some(30));
    assert_eq!(c.rules[0].stale_if_error, Some(60));
    let v = with("", "stale_while_revalidate_seconds = -1");
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("stale_while_revalidate_seconds"), "{e:?}");
}
