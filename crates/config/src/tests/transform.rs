//! Transform keys: compression, minification, WebP.

use super::*;

#[test]
fn compression_needs_both_switches_and_reads_its_flags_leniently() {
    let v = with("enable_compression = true", "enable_compression = true");
    let c = v.config.expect("config");
    assert_eq!(
        c.rules[0].compression,
        Some(Compression {
            br: Some(5),
            zstd: Some(3),
            gzip: Some(6),
            min_length: 256,
            types: None
        })
    );
    // The rule alone: off, with a warning that says why.
    let v = with("", "enable_compression = true");
    assert_eq!(
        v.config.as_ref().expect("config").rules[0].compression,
        None
    );
    assert!(
        warnings(&v).iter().any(|w| w.contains("off globally")),
        "{:?}",
        warnings(&v)
    );
    // Flags: named codings only, levels, a threshold; nonsense ignored with a warning. The
    // rule's flags replace the global ones.
    let v = with(
        "enable_compression = true\ncompression_flags = \"gzip\"",
        "enable_compression = true\ncompression_flags = \"BR=7; gzip , min_length=1024 turbo zstd=99\"",
    );
    let ws = warnings(&v);
    assert!(
        ws.iter().any(|w| w.contains("ignored turbo, zstd=99")),
        "{ws:?}"
    );
    assert_eq!(
        v.config.expect("config").rules[0].compression,
        Some(Compression {
            br: Some(7),
            zstd: None,
            gzip: Some(6),
            min_length: 1024,
            types: None
        })
    );
    let v = with(
        "enable_compression = true\ncompression_flags = \"gzip=1\"",
        "enable_compression = true",
    );
    let gz = v.config.expect("config").rules[0]
        .compression
        .clone()
        .expect("on");
    assert_eq!((gz.br, gz.gzip), (None, Some(1)), "the global flags apply");
}

#[test]
fn minification_and_webp_settings() {
    let v = with(
        "",
        "enable_minification = true\nenable_webp_transformation = true",
    );
    let r = &v.config.expect("config").rules[0];
    assert_eq!(
        r.minify,
        Some(Minify {
            html: true,
            css: true,
            js: true,
            html_comments: false
        })
    );
    assert_eq!(r.webp.map(|w| w.min_age.as_secs()), Some(21_600));
    let v = with(
        "",
        "enable_minification = true\nminification_flags = \"css,JS,php,comments\"\nenable_webp_transformation = true\nwebp_transformation_min_age = 60",
    );
    assert!(
        warnings(&v).iter().any(|w| w.contains("ignored php")),
        "{:?}",
        warnings(&v)
    );
    let r = &v.config.expect("config").rules[0];
    assert_eq!(
        r.minify,
        Some(Minify {
            html: false,
            css: true,
            js: true,
            html_comments: true
        })
    );
    assert_eq!(r.webp.map(|w| w.min_age.as_secs()), Some(60));
    let v = with(
        "",
        "enable_minification = true\nminification_flags = \"php\"",
    );
    assert_eq!(v.config.expect("config").rules[0].minify, None);
    // No routing or transform key is reported as inactive.
    let v = with(
        "enable_compression = true\ncompression_flags = \"br\"",
        "enable_compression = true\nenable_minification = true\nminification_flags = \"html\"\n\
         enable_webp_transformation = true\nwebp_transformation_min_age = 1",
    );
    assert!(
        !v.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Inactive),
        "{:?}",
        v.diagnostics
    );
}

#[test]
fn compression_types_and_min_length_are_read_and_a_rule_replaces_the_global_ones() {
    let v = with(
        "enable_compression = true\ncompression_types = [\"text/*\", \"application/json\"]\ncompression_min_length = \"1KiB\"",
        "enable_compression = true",
    );
    assert!(errors(&v).is_empty(), "{:?}", v.diagnostics);
    let c = v.config.expect("config").rules[0]
        .compression
        .clone()
        .expect("on");
    assert_eq!(
        c.types,
        Some(vec![
            MediaRange::Type("text".into()),
            MediaRange::Exact("application/json".into())
        ])
    );
    assert_eq!(c.min_length, 1024);
    // The rule's own keys replace the global ones; `*` and `*/*` are every type.
    let v = with(
        "enable_compression = true\ncompression_types = [\"text/*\"]\ncompression_min_length = 1024",
        "enable_compression = true\ncompression_types = [\"*\", \"Image/SVG+XML\"]\ncompression_min_length = 10",
    );
    let c = v.config.expect("config").rules[0]
        .compression
        .clone()
        .expect("on");
    assert_eq!(
        c.types,
        Some(vec![
            MediaRange::Any,
            MediaRange::Exact("image/svg+xml".into())
        ])
    );
    assert_eq!(c.min_length, 10);
}

#[test]
fn the_nearest_compression_threshold_wins() {
    // The global key over the global flag; a rule's flag over the global key; within one
    // section the key over the flag, with a warning.
    let cases = [
        (
            "compression_flags = \"min_length=100\"\ncompression_min_length = 200",
            "",
            200,
            true,
        ),
        (
            "compression_min_length = 200",
            "compression_flags = \"gzip min_length=300\"",
            300,
            false,
        ),
        (
            "compression_flags = \"min_length=100\"",
            "compression_flags = \"gzip\"",
            100,
            false,
        ),
        (
            "",
            "compression_flags = \"min_length=5\"\ncompression_min_length = 7",
            7,
            true,
        ),
        ("", "", 256, false),
    ];
    for (global, rule, want, warned) in cases {
        let v = with(
            &format!("enable_compression = true\n{global}"),
            &format!("enable_compression = true\n{rule}"),
        );
        let ws = warnings(&v);
        assert_eq!(
            ws.iter()
                .any(|w| w.contains("`compression_min_length` is used")),
            warned,
            "{global} / {rule}: {ws:?}"
        );
        let c = v.config.expect("config").rules[0].compression.clone();
        assert_eq!(c.expect("on").min_length, want, "{global} / {rule}");
    }
}

#[test]
fn a_compression_type_without_a_slash_is_an_error_at_its_line_and_the_fix_pastes() {
    let written =
        "compression_types = [\"html\", \"text/css; charset=utf-8\", \"application/json\", \"??\"]";
    let src = format!("enable_compression = true\n{written}\n{ARC2_BENCH}");
    let v = validate(&src, 1);
    let e: Vec<&Diagnostic> = v.errors().collect();
    assert_eq!(e.len(), 3, "{e:?}");
    assert_eq!((e[0].line, e[0].column), (2, 22), "{e:?}");
    assert_eq!(e[0].key, "compression_types[0]");
    assert_eq!((e[1].line, e[1].column), (2, 30), "{e:?}");
    assert!(e[2].message.contains("\"??\" is not a media type"), "{e:?}");
    let fix = pasted_fix(&e[0].hint, "compression_types");
    assert_eq!(
        fix,
        "compression_types = [\"text/html\", \"text/css\", \"application/json\"]"
    );
    let v = validate(&src.replace(written, &fix), 1);
    assert!(errors(&v).is_empty(), "{fix}: {:?}", v.diagnostics);
    // A size that is not one.
    let v = validate(
        &format!("enable_compression = true\ncompression_min_length = \"big\"\n{ARC2_BENCH}"),
        1,
    );
    let e: Vec<&Diagnostic> = v.errors().collect();
    assert_eq!(
        (e[0].key.as_str(), e[0].line),
        ("compression_min_length", 2),
        "{e:?}"
    );
    let fix = pasted_fix(&e[0].hint, "compression_min_length");
    let v = validate(
        &format!("enable_compression = true\n{fix}\n{ARC2_BENCH}"),
        1,
    );
    assert!(errors(&v).is_empty(), "{fix}: {:?}", v.diagnostics);
}
