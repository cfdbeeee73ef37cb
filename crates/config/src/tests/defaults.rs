//! The effective configuration: every key with the value in effect.

use super::*;

#[test]
fn every_key_the_reader_knows_has_its_default_listed() {
    let catalog = crate::validate::catalog();
    for (kind, k) in catalog {
        for key in &k.keys {
            assert!(
                crate::effective::KEYS
                    .iter()
                    .any(|(kd, n, ..)| kd == kind && n == key),
                "{kind}.{key} is read but not in effective::KEYS (its owner and default)"
            );
        }
    }
    for (kind, key, ..) in crate::effective::KEYS {
        assert!(
            catalog.get(*kind).is_some_and(|k| k.keys.contains(key)),
            "effective::KEYS lists {kind}.{key}, which the reader does not read"
        );
    }
}

#[test]
fn every_listed_default_is_the_one_in_effect() {
    use crate::effective::Fallback;
    // The second file leaves out what the first sets (ARC2's required keys among them).
    const BARE: &str = "[[proxy_rules]]\ndomain = \"a.test\"\nforward_ipv4 = \"127.0.0.1\"\n\
        [[proxy_rules.path_rules]]\npath = \"/s\"\nmatch_type = \"StartsWith\"\n";
    let mut wrong = Vec::new();
    for file in [EVERY_SECTION, BARE] {
        let base = validate(file, 3);
        let base_config = base
            .config
            .clone()
            .unwrap_or_else(|| panic!("{}", shown(&base)));
        for (kind, key, _, default) in crate::effective::KEYS {
            let Fallback::Value(v) = default else {
                continue;
            };
            if !kind.is_empty() && !file.contains(&format!("{kind}]")) {
                continue;
            }
            let src = add_to(file, kind, &format!("{key} = {v}"));
            if toml_edit::Document::parse(src.as_str()).is_err() {
                continue; // the file sets it already
            }
            let with_key = validate(&src, 3);
            if with_key.config.as_ref() != Some(&base_config) {
                wrong.push(format!("`{key} = {v}` in [{kind}] {}", shown(&with_key)));
            }
        }
    }
    assert!(wrong.is_empty(), "not the defaults: {wrong:#?}");
}

#[test]
fn the_effective_configuration_reads_back_as_the_same_configuration() {
    let src = add_to(
        &add_to(
            EVERY_SECTION,
            "",
            "cache_memory = \"64MiB\"  # a comment\nbogus_key = 1",
        ),
        "proxy_rules",
        "cache_heuristic = \"none\"",
    );
    let v = validate(&src, 3);
    let printed = crate::effective(&src, 3);
    let again = validate(&printed, 3);
    assert_eq!(again.config, v.config, "{printed}");
    // Written lines are active and marked with their owner; defaults are comments.
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("cache_memory = \"64MiB\" ") && l.ends_with("# rampart")),
        "{printed}"
    );
    assert!(printed.contains("listening_port_http = 8080"), "{printed}");
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("# listening_address = \"0.0.0.0\"")
                && l.ends_with("# ARC2, default")),
        "{printed}"
    );
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("# workers = 3") && l.contains("the number of CPUs")),
        "{printed}"
    );
    assert!(
        printed.contains("# bogus_key: not a key of this section, ignored"),
        "{printed}"
    );
    // A rule's inherited key shows the global value it gets.
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("# store_set_cookie = false")
                && l.contains("default: the global one")),
        "{printed}"
    );
    // A path rule's max_age_seconds comes from its rule.
    let sections: Vec<_> = printed.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(
        sections,
        [
            "[[proxy_rules]]",
            "[[proxy_rules.path_rules]]",
            "[[proxy_rules.disallowed_user_agents]]",
            "[[proxy_rules]]",
            "[proxy_rules.routing_rules]",
            "[[proxy_rules.routing_rules.routing_locations]]"
        ]
    );
}
