//! Varnish as a peer: its VCL (the builtin one plus a hit header) and the `varnishd` command
//! line that carries the rest of its settings.

use std::io;

use super::config::{fill, prepare_dir, reachable_by_others, strings, write_config};
use super::{Launch, Peer, Setup};

/// Varnish with `-s malloc,256m` and the builtin VCL (plus an `X-Cache: HIT|MISS` header set in
/// `vcl_deliver`). The builtin VCL turns `Cache-Control: no-store` responses into hit-for-miss
/// objects, so such pages always reach the origin. `-p feature=+http2` makes both listeners serve
/// h2c with prior knowledge as well as HTTP/1.1.
///
/// Runs as `varnishd -F -T none -a 127.0.0.1:PORT -a 127.0.0.1:H2PORT -f DIR/default.vcl -s
/// malloc,256m -n DIR/varnish-work -p thread_pools=1 -p thread_pool_min=10 -p
/// thread_pool_max=500 -p feature=+http2`. `-T none`: no management CLI listener (the default
/// opens a random port). The work directory (`-n`, shared memory log and the compiled VCL) is in
/// DIR; varnishd compiles the VCL with the system C compiler and loads it from there, so DIR must
/// not be on a `noexec` file system. Started as root, the manager and the cache process drop to
/// the `varnish` and `vcache` users (`-j unix`); if a parent of DIR is closed to other users they
/// could not read the VCL, so the launch then adds `-j none` (everything stays root). No
/// environment variables are needed. Hits: `X-Cache: HIT`, or two ids in `X-Varnish`, or
/// `varnishstat -n DIR/varnish-work -1 -f MAIN.cache_hit`.
#[derive(Debug, Clone, Copy)]
pub struct Varnish;

const VARNISH_VCL: &str = r#"vcl 4.1;

# Varnish, malloc storage (rampart-bench). The builtin VCL does the rest: responses with
# Cache-Control no-store/no-cache/private or Set-Cookie become hit-for-miss, so they always reach
# the origin.

backend default {
    .host = "@HOST@";
    .port = "@OPORT@";
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
"#;

impl Peer for Varnish {
    fn name(&self) -> &'static str {
        "varnish"
    }
    fn label(&self) -> String {
        "Varnish malloc".to_owned()
    }
    fn binary(&self) -> &'static str {
        "varnishd"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install varnish"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, dir_text) = prepare_dir(setup.dir)?;
        let vcl = fill(
            VARNISH_VCL,
            &[
                ("@HOST@", setup.origin.ip().to_string()),
                ("@OPORT@", setup.origin.port().to_string()),
            ],
        );
        let vcl_path = write_config(&dir, "default.vcl", &vcl)?;
        let mut args = vec!["-F".to_owned()];
        if !reachable_by_others(&dir) {
            args.extend(strings(&["-j", "none"]));
        }
        args.extend(strings(&["-T", "none", "-a"]));
        args.push(format!("127.0.0.1:{}", setup.port));
        args.push("-a".to_owned());
        args.push(format!("127.0.0.1:{}", setup.h2_port));
        args.push("-f".to_owned());
        args.push(vcl_path);
        args.extend(strings(&["-s", "malloc,256m", "-n"]));
        args.push(format!("{dir_text}/varnish-work"));
        args.extend(strings(&[
            "-p",
            "thread_pools=1",
            "-p",
            "thread_pool_min=10",
            "-p",
            "thread_pool_max=500",
            "-p",
            "feature=+http2",
        ]));
        Ok(Launch {
            program: "varnishd".to_owned(),
            args,
        })
    }
}
