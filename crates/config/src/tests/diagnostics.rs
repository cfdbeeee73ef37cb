//! How problems are reported: every one, with its line, column and a fix.

use super::*;

#[test]
fn every_error_is_listed_with_position() {
    let src = r#"listening_address = "localhost"
logging_level = "loud"
proxy_timeout = 70000
proxy_min_tls_version = "TLS_1_4"
nodelay = "yes"
[[proxy_rules]]
domain = "a.example"
max_age_seconds = -1
forward_ipv4 = "300.1.1.1"
forward_port_http = 8080
rule_type = "Greylist"
"#;
    let v = validate(src, 1);
    assert!(v.config.is_none());
    let errs: Vec<_> = v.errors().collect();
    let keyed: Vec<(&str, usize, usize)> = errs
        .iter()
        .map(|d| (d.key.as_str(), d.line, d.column))
        .collect();
    assert_eq!(
        keyed,
        vec![
            ("listening_address", 1, 21),
            ("logging_level", 2, 17),
            ("proxy_timeout", 3, 17),
            ("proxy_min_tls_version", 4, 25),
            ("nodelay", 5, 11),
            ("proxy_rules[0].max_age_seconds", 8, 19),
            ("proxy_rules[0].forward_ipv4", 9, 16),
            ("proxy_rules[0].rule_type", 11, 13),
        ],
        "{errs:#?}"
    );
    assert!(errs[0].message.contains("cannot be parsed"));
    assert!(errs[1]
        .hint
        .contains("off, trace, debug, info, warn, error"));
}

#[test]
fn syntax_errors_are_all_listed_with_positions() {
    let v = validate("a = \n[[proxy_rules]\n", 1);
    let e: Vec<_> = v
        .errors()
        .filter(|d| d.message.contains("not valid TOML"))
        .collect();
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!((e[0].line, e[1].line), (1, 2), "{e:?}");
    assert_eq!(e[1].hint, "write the header as `[[proxy_rules]]`");
    // The rest of the file is still checked: the repaired header starts a rule without a
    // domain.
    assert!(
        v.errors().any(|d| d.key == "proxy_rules[0].domain"),
        "{:?}",
        v.diagnostics
    );
    // Three independent mistakes, three errors; the bare word gets "quote it".
    let v = validate(
        "a = = 1\nlogging_level = info\n[[proxy_rules]]\ndomain = \"x\"\nc = [\n",
        1,
    );
    let e: Vec<_> = v
        .errors()
        .filter(|d| d.message.contains("not valid TOML"))
        .collect();
    assert_eq!(
        e.iter().map(|d| d.line).collect::<Vec<_>>(),
        [1, 2, 5],
        "{e:?}"
    );
    assert!(e[1].message.contains("needs quotes"), "{e:?}");
    assert_eq!(e[1].hint, "write it as `logging_level = \"info\"`");
}

#[test]
fn type_errors_suggest_the_value_they_meant() {
    let v = validate("listening_port_http = \"80\"\nadd_caching = \"false\"\n", 1);
    let hints: Vec<_> = v.errors().map(|d| d.hint.clone()).collect();
    assert_eq!(
        hints,
        [
            "write it as `listening_port_http = 80`",
            "write it as `add_caching = false`"
        ]
    );
    let v = validate("proxy_rules = \"x\"\n", 1);
    let e: Vec<_> = v.errors().collect();
    assert!(e[0].hint.contains("`[[proxy_rules]]` section"), "{e:?}");
    assert!(!e[0].hint.contains("= [["), "{e:?}");
}

#[test]
fn misspelt_keys_get_a_suggestion() {
    let v = validate(
        "workrs = 2\n[[proxy_rules]]\ndomain = \"x\"\nfoward_ipv4 = \"127.0.0.1\"\nforward_ipv4 = \"127.0.0.1\"\n",
        1,
    );
    let unknown: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.message.contains("unknown key"))
        .map(|d| (d.key.as_str(), d.hint.as_str()))
        .collect();
    assert_eq!(
        unknown,
        [
            ("workrs", "rename it to `workers`"),
            ("proxy_rules[0].foward_ipv4", "did you mean `forward_ipv4`?")
        ]
    );
}

#[test]
fn unknown_keys_warn_with_line() {
    let src = "max_backlg = 8080\n[[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"127.0.0.1\"\nmax_age = 3\n";
    let v = validate(src, 1);
    assert!(v.config.is_some());
    let unknown: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.message.contains("unknown key"))
        .map(|d| (d.key.as_str(), d.line))
        .collect();
    assert_eq!(
        unknown,
        vec![("max_backlg", 1), ("proxy_rules[0].max_age", 5)]
    );
}

#[test]
fn logging_level_is_a_prefix_test() {
    let v = validate("logging_level = \"info,hyper=warn\"\n", 1);
    assert_eq!(v.config.expect("config").logging_level, "info,hyper=warn");
}

#[test]
fn wrong_types_never_panic() {
    let src = r#"
workers = 0
listen = "127.0.0.1:80"
proxy_rules = 5
"#;
    let v = validate(src, 1);
    assert_eq!(errors(&v).len(), 3, "{:?}", v.diagnostics);
}

#[test]
fn a_bare_word_for_a_boolean_is_fixed_with_true_or_false() {
    // The fix is `true` or `false`, never a quoted word (`add_caching = "yes"` is itself a type
    // error).
    let v = validate(
        "add_caching = yes\nwatch_config = off\nlogging_level = warn\n",
        1,
    );
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 3, "{e:?}");
    assert_eq!(e[0].line, 1);
    assert!(
        e[0].message.contains("`add_caching` takes a boolean"),
        "{e:?}"
    );
    assert_eq!(e[0].hint, "write it as `add_caching = true`");
    assert_eq!(e[1].hint, "write it as `watch_config = false`");
    // A string key keeps "quote it".
    assert_eq!(e[2].hint, "write it as `logging_level = \"warn\"`");
}

#[test]
fn fix_lines_are_valid_toml_headers() {
    // The header a fix names is TOML (`[[proxy_rules[0].path_rules]]` would not be).
    for (section, header) in [
        (
            "[proxy_rules.path_rules]\npath = \"/a\"\n",
            "`[[proxy_rules.path_rules]]`",
        ),
        (
            "[proxy_rules.disallowed_user_agents]\nuser_agent = \"x\"\n",
            "`[[proxy_rules.disallowed_user_agents]]`",
        ),
    ] {
        let v = validate(
            &format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}{section}"),
            1,
        );
        let e: Vec<_> = v.errors().collect();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].hint.contains(header), "{e:?}");
        assert!(!e[0].hint.contains("[0]"), "{e:?}");
    }
}

#[test]
fn global_keys_after_a_rule_are_errors_that_say_why() {
    // TOML reads them as keys of the last rule; check says so as an error, not as "unknown key".
    let src = format!(
        "[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}add_sql_injection_protection = true\napi_key = \"0123456789abcdef0123\"\n"
    );
    let v = validate(&src, 1);
    assert!(v.config.is_none(), "{}", shown(&v));
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 2, "{}", shown(&v));
    assert_eq!(e[0].key, "proxy_rules[0].add_sql_injection_protection");
    assert!(
        e[0].message.contains("`add_sql_injection_protection` is a global key, but it comes after the `[[proxy_rules]]` header at line 1"),
        "{e:?}"
    );
    assert_eq!(e[0].hint, "move it above the first `[[proxy_rules]]`");
    assert!(e[1].message.contains("`api_key` is a global key"), "{e:?}");
    // A rule's key after its `[[proxy_rules.disallowed_user_agents]]` lands in that entry.
    let src = format!(
        "[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}[[proxy_rules.disallowed_user_agents]]\nuser_agent = \"x\"\nmatch_type = \"Contains\"\nallow_ips = [\"10.0.0.0/8\"]\n"
    );
    let v = validate(&src, 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 1, "{}", shown(&v));
    assert!(e[0].message.contains("`allow_ips` is a key of `[[proxy_rules]]`, but it comes after the `[[proxy_rules.disallowed_user_agents]]` header at line 14"), "{e:?}");
    // A rule's key at the top level is named too (a warning: it was never in effect anywhere).
    let v = validate(
        &format!("forward_ipv4 = \"10.0.0.1\"\n[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}"),
        1,
    );
    assert!(
        shown(&v).contains("`forward_ipv4` is a key of `[[proxy_rules]]`; here it does nothing"),
        "{}",
        shown(&v)
    );
}

#[test]
fn a_key_set_twice_in_a_rule_names_the_first_and_why() {
    // Not just "duplicate key / fix the syntax at this position".
    let src =
        format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}enable_compression = true\n");
    let v = validate(&src, 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 1, "{}", shown(&v));
    assert_eq!(e[0].line, 14);
    assert!(
        e[0].message.contains("`enable_compression` is set twice in one section (first at line 11): every key after the `[[proxy_rules]]` header at line 1 belongs to that section"),
        "{e:?}"
    );
    assert!(
        e[0].hint
            .contains("move it above the first `[[proxy_rules]]` (line 1)"),
        "{e:?}"
    );
    // The rest was checked: a warning from after the duplicate still shows.
    let v = validate(&format!("{src}bogus_key = 1\n"), 1);
    assert!(
        shown(&v).contains("proxy_rules[0].bogus_key"),
        "{}",
        shown(&v)
    );
}

#[test]
fn a_nested_section_before_its_rule_is_explained() {
    // Not just "duplicate key" at a later line with no explanation.
    let src = format!("[[proxy_rules.disallowed_user_agents]]\nuser_agent = \"x\"\nmatch_type = \"Contains\"\n[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}");
    let v = validate(&src, 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e[0].line, 4, "{}", shown(&v));
    assert!(
        e[0].message.contains(
            "`[[proxy_rules.disallowed_user_agents]]` at line 1 comes before any `[[proxy_rules]]`"
        ),
        "{e:?}"
    );
    assert!(
        e[0].hint
            .contains("move the section at line 1 (its header and its keys) below the last key of the `[[proxy_rules]]` it belongs to, after that rule's own keys"),
        "{e:?}"
    );
    // Nothing after it could be read: said plainly.
    assert!(
        e.iter()
            .any(|d| d.message.contains("the rest of the file was not checked")),
        "{e:?}"
    );
}

#[test]
fn a_misspelt_protection_is_an_error_linked_with_what_is_missing() {
    // A misspelt user-agent block list is an error, not a warning with exit status 0.
    let src = format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}[[proxy_rules.disalowed_user_agents]]\nuser_agent = \"x\"\nmatch_type = \"Contains\"\n");
    let v = validate(&src, 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 1, "{}", shown(&v));
    assert!(
        e[0].message
            .contains("did you mean `disallowed_user_agents`"),
        "{e:?}"
    );
    // `enable_minificaton`: one message, not "unknown key" plus "enable_minification missing".
    let rule = RULE_KEYS.replace("enable_minification", "enable_minificaton");
    let v = validate(&format!("[[proxy_rules]]\ndomain = \"a.test\"\n{rule}"), 1);
    let about: Vec<_> = v
        .diagnostics
        .iter()
        .filter(|d| d.key.contains("enable_minific"))
        .collect();
    assert_eq!(about.len(), 1, "{}", shown(&v));
    assert_eq!(about[0].key, "proxy_rules[0].enable_minificaton");
    assert!(about[0].message.contains("did you mean `enable_minification`? `enable_minification` is not set, so rampart uses `enable_minification = false`"), "{about:?}");
    assert_eq!(about[0].severity, Severity::Warning);
}

#[test]
fn a_misspelt_key_that_decides_where_traffic_goes_is_an_error() {
    // `foward_port_http = 18081` was a warning: "configuration OK", and the rule forwarded
    // to port 80.
    let rule = RULE_KEYS.replace("forward_port_http = 8080", "foward_port_http = 18081");
    let v = validate(&format!("[[proxy_rules]]\ndomain = \"a.test\"\n{rule}"), 1);
    let e: Vec<_> = v.errors().collect();
    assert_eq!(e.len(), 1, "{}", shown(&v));
    assert_eq!(e[0].key, "proxy_rules[0].foward_port_http");
    assert_eq!(e[0].hint, "rename it to `forward_port_http`");
    assert!(v.config.is_none());
    for (written, line) in [
        (
            "[[proxy_rules]]\ndomian = \"a.test\"\n",
            "proxy_rules[0].domian",
        ),
        (
            "listning_address = \"0.0.0.0\"\n[[proxy_rules]]\ndomain = \"a.test\"\n",
            "listning_address",
        ),
        (
            "lisen = [\"127.0.0.1:80\"]\n[[proxy_rules]]\ndomain = \"a.test\"\n",
            "lisen",
        ),
        (
            "[[proxy_rules]]\ndomain = \"a.test\"\nupstream = [\"127.0.0.1:9\"]\n",
            "proxy_rules[0].upstream",
        ),
    ] {
        let v = validate(&format!("{written}{RULE_KEYS}"), 1);
        assert!(
            v.errors()
                .any(|d| d.key == line && d.message.starts_with("unknown key; did you mean")),
            "{written}: {}",
            shown(&v)
        );
    }
    // An unknown key that is near no such key stays a warning.
    let v = validate(
        &format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}colour = 1\n"),
        1,
    );
    assert!(v.errors().next().is_none(), "{}", shown(&v));
    assert!(v
        .diagnostics
        .iter()
        .any(|d| d.key == "proxy_rules[0].colour" && d.severity == Severity::Warning));
}

#[test]
fn an_unused_rule_is_said_once_and_first() {
    // Only "never used", not seven "missing" warnings before it.
    let src = format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}[[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = 9\nmisspeled = 1\n");
    let v = validate(&src, 1);
    let w: Vec<_> = v.diagnostics.iter().collect();
    assert_eq!(w.len(), 1, "{}", shown(&v)); // no warning, and no note either
    assert!(w[0].message.contains("this rule is never used"), "{w:?}");
}

#[test]
fn syntax_errors_do_not_hide_the_rest() {
    // Every problem at once, not two syntax errors first and the rest after fixing them.
    let src = "listening_port_http = \"80\"\nadd_caching = yes\nworkers = 0\n[[proxy_rules]\ndomain = \"a.test\"\nmax_age_seconds = -5\nforward_ipv4 = \"1.2.3\"\n";
    let v = validate(src, 1);
    let lines: Vec<_> = v.errors().map(|d| d.line).collect();
    assert_eq!(lines, [1, 2, 3, 4, 6, 7], "{}", shown(&v));
}

#[test]
fn strict_makes_every_warning_an_error() {
    let src = format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}bogus = 1\n");
    let v = validate(&src, 1);
    assert!(v.config.is_some());
    assert_eq!(warnings(&v).len(), 1);
    let v = v.strict();
    assert!(v.config.is_none());
    assert_eq!(errors(&v).len(), 1);
    // A clean file stays accepted.
    let v = validate(
        &format!("[[proxy_rules]]\ndomain = \"a.test\"\n{RULE_KEYS}"),
        1,
    )
    .strict();
    assert!(v.config.is_some(), "{}", shown(&v));
}
