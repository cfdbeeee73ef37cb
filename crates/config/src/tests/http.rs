//! HTTP keys of a rule: header rules, redirects, rewrites, cache tags, error pages.

use super::*;

#[test]
fn header_rules_redirects_rewrites_and_error_pages() {
    let page = std::env::temp_dir().join(format!("rampart-page-{}.html", std::process::id()));
    std::fs::write(&page, "<h1>down</h1>").expect("write");
    let src = format!(
        r#"error_pages_dir = {:?}
[[proxy_rules]]
domain = "x"
max_age_seconds = 60
forward_ipv4 = "127.0.0.1"
[proxy_rules.request_headers]
set = {{ "X-Real-IP" = "{{client_ip}}", "X-Url" = "{{scheme}}://{{host}}{{path}}" }}
add = {{ "X-Via" = "rampart" }}
remove = ["X-Debug"]
[proxy_rules.response_headers]
set = {{ "X-Frame-Options" = "DENY" }}
remove = ["Server"]
[[proxy_rules.redirects]]
from = "^/old/(.*)$"
to = "https://new.example/$1"
status = 308
[[proxy_rules.rewrites]]
from = "^/api/v1/(?P<rest>.*)$"
to = "/v1/${{rest}}"
[proxy_rules.error_pages]
503 = {:?}
404 = {{ body = "<p>not here</p>" }}
origin_errors = true
[[proxy_rules.path_rules]]
path = "/static"
match_type = "StartsWith"
rule_type = "Whitelist"
max_age_seconds = 600
[proxy_rules.path_rules.response_headers]
set = {{ "Cache-Control" = "public, max-age=600" }}
"#,
        std::env::temp_dir().display().to_string(),
        page.display().to_string()
    );
    let v = validate(&src, 1);
    let c = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
    let r = &c.rules[0];
    assert_eq!(r.request_headers.set.len(), 2);
    assert_eq!(r.request_headers.set[0].0, "x-real-ip");
    assert_eq!(
        r.request_headers.set[0].1.parts,
        [TemplatePart::Var(Variable::ClientIp)]
    );
    assert_eq!(r.request_headers.remove[0], "x-debug");
    assert!(r.request_headers.uses(Variable::Host));
    assert_eq!(r.response_headers.set[0].0, "x-frame-options");
    assert_eq!(r.redirects[0].status, 308);
    assert!(r.redirects[0].keep_query);
    assert_eq!(r.rewrites[0].to, "/v1/${rest}");
    assert_eq!(r.error_pages.get(503).expect("503").body, b"<h1>down</h1>");
    assert_eq!(
        r.error_pages.get(503).expect("503").content_type,
        "text/html; charset=utf-8"
    );
    assert_eq!(
        r.error_pages.get(404).expect("404").content_type,
        "text/html; charset=utf-8"
    );
    assert!(r.error_pages.origin_errors);
    assert_eq!(r.path_rules[0].response_headers.set.len(), 1);
    // The printed file reads back the same.
    let printed = crate::effective(&src, 1);
    assert_eq!(validate(&printed, 1).config, Some(c), "{printed}");

    // Every mistake, at its line.
    for (bad, want) in [
        ("{client_ip}", "{nope}"),
        ("\"X-Real-IP\"", "\"Content-Length\""),
        ("\"X-Real-IP\"", "\"Bad Name\""),
        ("status = 308", "status = 200"),
        ("to = \"https://new.example/$1\"", "to = \"new.example/$1\""),
        (
            "to = \"https://new.example/$1\"",
            "to = \"https://x/{client_ip}\"",
        ),
        ("to = \"/v1/${rest}\"", "to = \"v1?x=1\""),
        ("from = \"^/old/(.*)$\"", "from = \"^/old/(.*$\""),
        ("404 = {", "200 = {"),
        ("origin_errors = true", "origin_errors = \"yes\""),
    ] {
        let text = src.replace(bad, want);
        assert_ne!(text, src, "{bad}");
        let v = validate(&text, 1);
        let e = errors(&v);
        assert_eq!(e.len(), 1, "{want}: {e:?}");
        assert!(e[0].starts_with("error at "), "{e:?}");
    }
    let missing = src.replace(
        &format!("{:?}", page.display().to_string()),
        &format!(
            "{:?}",
            std::env::temp_dir()
                .join("nonexistent-503.html")
                .display()
                .to_string()
        ),
    );
    assert!(errors(&validate(&missing, 1))[0].contains("cannot read the error page"));
    let _ = std::fs::remove_file(&page);
}

#[test]
fn cache_tag_headers() {
    let c = with("", "").config.expect("config");
    let names: Vec<_> = c
        .cache
        .tag_headers
        .iter()
        .map(|h| h.as_str().to_owned())
        .collect();
    assert_eq!(names, ["surrogate-key", "cache-tag", "xkey"]);
    let c = with("cache_tag_headers = []", "").config.expect("config");
    assert!(c.cache.tag_headers.is_empty());
    let v = with("cache_tag_headers = [\"X-Tags\", \"bad name\"]", "");
    let e = errors(&v);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("\"bad name\" is not a valid header field name"),
        "{e:?}"
    );
}

#[test]
fn a_field_name_with_a_dot_is_read_whole() {
    let v = with(
        "",
        "[proxy_rules.response_headers]\nset = { \"X.Trace\" = \"on\" }\n",
    );
    let c = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
    assert_eq!(c.rules[0].response_headers.set[0].0, "x.trace");
}

#[test]
fn a_redirect_target_with_a_line_break_or_a_control_character_is_an_error_at_its_line() {
    // It passed, and at run time the answer had no `Location` (a field value cannot hold
    // them). Non-ASCII text has the same fate.
    for (written, fixed) in [
        (
            r#"to = "/new\r\nSet-Cookie: a=b""#,
            r#"to = "/new%0D%0ASet-Cookie: a=b""#,
        ),
        (r#"to = "/a\tb/$1""#, r#"to = "/a%09b/$1""#),
        (r#"to = "/x\u0000\"\\""#, r#"to = "/x%00\"\\""#),
        (
            r#"to = "https://{host}/\u007f""#,
            r#"to = "https://{host}/%7F""#,
        ),
        (r#"to = "/café""#, r#"to = "/caf%C3%A9""#),
    ] {
        let src =
            format!("{ARC2_BENCH}[[proxy_rules.redirects]]\nfrom = \"^/old/(.*)$\"\n{written}\n");
        let line = src.lines().count();
        let v = validate(&src, 1);
        let e: Vec<&Diagnostic> = v.errors().collect();
        assert_eq!(e.len(), 1, "{written}: {e:?}");
        assert_eq!((e[0].line, e[0].column), (line, 6), "{written}: {e:?}");
        assert_eq!(e[0].key, "proxy_rules[0].redirects[0].to");
        assert!(e[0].message.contains("cannot be in a `Location`"), "{e:?}");
        // The fix, pasted in place of the line, passes.
        let fix = pasted_fix(&e[0].hint, "to");
        assert_eq!(fix, fixed);
        let v = validate(&src.replace(written, &fix), 1);
        assert!(v.config.is_some(), "{fix}: {:?}", v.diagnostics);
    }
}

#[test]
fn error_pages_are_read_only_from_error_pages_dir() {
    // An API-key holder could publish any file the process can read (`/etc/shadow`), read
    // /dev/urandom without a limit, or block `check` on a FIFO.
    let root = scratch_dir("pages");
    let conf_dir = root.join("etc");
    std::fs::create_dir_all(conf_dir.join("errors")).expect("mkdir");
    let config = conf_dir.join("rampart.toml");
    std::fs::write(conf_dir.join("502.html"), "<h1>Away</h1>").expect("write");
    std::fs::write(conf_dir.join("errors/503.html"), "<h1>Busy</h1>").expect("write");
    std::fs::write(root.join("secret.txt"), "the secret").expect("write");
    std::os::unix::fs::symlink(root.join("secret.txt"), conf_dir.join("link.html")).expect("ln");
    std::fs::write(conf_dir.join("big.html"), vec![b'x'; (1 << 20) + 1]).expect("write");
    std::fs::write(
        conf_dir.join("key.txt"),
        "-----BEGIN PRIVATE KEY-----\nMIIE\n",
    )
    .expect("write");
    let fifo = std::process::Command::new("mkfifo")
        .arg(conf_dir.join("pipe.html"))
        .status()
        .expect("mkfifo");
    assert!(fifo.success());
    let file_of = |page: &str| {
        format!("{ARC2_BENCH}[proxy_rules.error_pages]\n502 = {page}\n503 = \"errors/503.html\"\n")
    };
    let page_line = |src: &str| {
        1 + src
            .lines()
            .position(|l| l.starts_with("502 ="))
            .expect("502")
    };

    // Inside: relative (from the configuration file's directory) or absolute.
    for page in [
        "\"502.html\"".to_owned(),
        format!("{:?}", conf_dir.join("502.html").display().to_string()),
    ] {
        let v = validate_file(&file_of(&page), 1, &config);
        let c = v
            .config
            .unwrap_or_else(|| panic!("{page}: {:?}", v.diagnostics));
        assert_eq!(
            c.rules[0].error_pages.get(502).expect("502").body,
            b"<h1>Away</h1>"
        );
        assert_eq!(
            c.rules[0].error_pages.get(503).expect("503").body,
            b"<h1>Busy</h1>"
        );
    }

    let secret = root.join("secret.txt").display().to_string();
    for (page, says, fix) in [
        (
            format!("{secret:?}"),
            "is outside `error_pages_dir`",
            Some("copy"),
        ),
        (
            "\"/etc/passwd\"".to_owned(),
            "is outside `error_pages_dir`",
            Some("copy"),
        ),
        (
            "\"../secret.txt\"".to_owned(),
            "has `..` in it",
            Some("copy"),
        ),
        (
            "\"errors/../502.html\"".to_owned(),
            "has `..` in it",
            Some("paste"),
        ),
        (
            "{ file = \"./errors/../errors/503.html\" }".to_owned(),
            "has `..` in it",
            Some("paste"),
        ),
        (
            "\"link.html\"".to_owned(),
            "is a symbolic link to",
            Some("copy"),
        ),
        ("\"pipe.html\"".to_owned(), "not a regular file", None),
        ("\"big.html\"".to_owned(), "larger than 1048576 bytes", None),
        (
            "{ file = \"key.txt\", content_type = \"text/plain\" }".to_owned(),
            "holds a private key",
            None,
        ),
        (
            "{ file = \"rampart.toml\", content_type = \"text/plain\" }".to_owned(),
            "the configuration file itself",
            None,
        ),
        (
            "\"missing.html\"".to_owned(),
            "cannot read the error page",
            None,
        ),
    ] {
        let src = file_of(&page);
        std::fs::write(&config, &src).expect("write");
        let v = validate_file_in_time(&src, &config);
        let e: Vec<&Diagnostic> = v.errors().collect();
        assert_eq!(e.len(), 1, "{page}: {e:?}");
        assert_eq!(e[0].key, "proxy_rules[0].error_pages.502", "{page}");
        assert_eq!((e[0].line, e[0].column), (page_line(&src), 1), "{page}");
        assert!(e[0].message.contains(says), "{page}: {e:?}");
        assert!(
            e[0].message.contains("error_pages_dir") || e[0].hint.contains("error_pages_dir"),
            "{page}: {e:?}"
        );
        // The fix works when pasted (after copying the file, when it says to).
        let key = if page.starts_with('{') { "file" } else { "502" };
        match fix {
            Some("paste") => {
                let line = pasted_fix(&e[0].hint, key);
                let fixed = if key == "file" {
                    src.replace(&page, &format!("{{ {line} }}"))
                } else {
                    src.replace(&format!("502 = {page}"), &line)
                };
                let v = validate_file(&fixed, 1, &config);
                assert!(v.config.is_some(), "{line}: {:?}", v.diagnostics);
            }
            Some(_) => {
                assert!(e[0].hint.starts_with("copy the file into"), "{e:?}");
                let line = pasted_fix(&e[0].hint, key);
                let name = line.rsplit('"').nth(1).expect("a name");
                let from = if page.contains("passwd") {
                    std::path::PathBuf::from("/etc/passwd")
                } else {
                    root.join("secret.txt")
                };
                std::fs::copy(from, conf_dir.join(name)).expect("copy");
                let fixed = src.replace(&format!("502 = {page}"), &line);
                // (`passwd` has no extension to tell its content type by: given here.)
                let v = validate_file(
                    &fixed
                        .replace("502 = ", "502 = { content_type = \"text/plain\", file = ")
                        .replace(&format!("{name}\"\n"), &format!("{name}\" }}\n")),
                    1,
                    &config,
                );
                assert!(v.config.is_some(), "{line}: {:?}", v.diagnostics);
                std::fs::remove_file(conf_dir.join(name)).expect("rm");
            }
            None => {}
        }
    }

    // Device files are refused whatever the directory: /dev/urandom is never read.
    let src = format!(
        "error_pages_dir = \"/dev\"\n{ARC2_BENCH}[proxy_rules.error_pages]\n502 = {{ file = \"urandom\", content_type = \"text/plain\" }}\n"
    );
    let e = errors(&validate_file_in_time(&src, &config));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("not a regular file"), "{e:?}");

    // `error_pages_dir`: relative to the configuration file's directory; one that does not
    // exist is an error at its line.
    let src = format!(
        "error_pages_dir = \"errors\"\n{ARC2_BENCH}[proxy_rules.error_pages]\n503 = \"503.html\"\n"
    );
    let v = validate_file(&src, 1, &config);
    assert!(v.config.is_some(), "{:?}", v.diagnostics);
    let v = validate_file(&src.replace("\"errors\"", "\"nowhere\""), 1, &config);
    let e: Vec<&Diagnostic> = v.errors().collect();
    assert_eq!(e[0].key, "error_pages_dir", "{e:?}");
    assert_eq!((e[0].line, e[0].column), (1, 19), "{e:?}");
    let _ = std::fs::remove_dir_all(&root);
}
