//! Caddy as a peer: a `reverse_proxy` Caddyfile and the env file that keeps its state in the
//! peer's directory.

use std::io;

use super::config::{fill, prepare_dir, write_config};
use super::{Launch, Peer, Setup};

/// Caddy 2.6 `reverse_proxy` (no cache), HTTP/1.1 and h2c with prior knowledge on both ports,
/// bound to 127.0.0.1 only (`bind`; a site address alone would listen on every interface) and
/// answering any Host.
///
/// Runs as `caddy run --config DIR/Caddyfile --adapter caddyfile --envfile DIR/caddy.env`.
/// Caddy autosaves its config under `$XDG_CONFIG_HOME/caddy` on every start (the Caddyfile of 2.6
/// cannot turn that off) and keeps its storage under `$XDG_DATA_HOME/caddy` (set to DIR/caddy-data
/// by `storage` too); `caddy.env` points HOME, XDG_CONFIG_HOME and XDG_DATA_HOME into DIR. Two
/// things need the real environment of the process, set before it starts: HOME=DIR (or
/// STEPPATH=DIR/.step), because a library creates an empty `$HOME/.step` at program start, before
/// the env file is read; and GOMAXPROCS=N, Caddy's only worker limit (the Go runtime reads it at
/// start; without it Go uses the CPUs of the `taskset` affinity mask, which also works). Caddy has
/// no cache, so it sends every request to the origin.
#[derive(Debug, Clone, Copy)]
pub struct Caddy;

const CADDYFILE: &str = "# Caddy reverse_proxy, no cache (rampart-bench).
{
	admin off
	auto_https off
	storage file_system {
		root @DIR@/caddy-data
	}
	servers {
		protocols h1 h2c
	}
}

http://:@PORT@, http://:@H2PORT@ {
	bind 127.0.0.1
	reverse_proxy @ORIGIN@
}
";

const CADDY_ENV: &str = "HOME=@DIR@
XDG_CONFIG_HOME=@DIR@/caddy-config
XDG_DATA_HOME=@DIR@/caddy-data
";

impl Peer for Caddy {
    fn name(&self) -> &'static str {
        "caddy"
    }
    fn label(&self) -> String {
        "Caddy reverse_proxy (no cache)".to_owned()
    }
    fn binary(&self) -> &'static str {
        "caddy"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install caddy"
    }
    fn caches(&self) -> bool {
        false
    }
    fn h2c(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, dir_text) = prepare_dir(setup.dir)?;
        let caddyfile = fill(
            CADDYFILE,
            &[
                ("@DIR@", dir_text.clone()),
                ("@PORT@", setup.port.to_string()),
                ("@H2PORT@", setup.h2_port.to_string()),
                ("@ORIGIN@", setup.origin.to_string()),
            ],
        );
        let config = write_config(&dir, "Caddyfile", &caddyfile)?;
        let env = write_config(&dir, "caddy.env", &fill(CADDY_ENV, &[("@DIR@", dir_text)]))?;
        Ok(Launch {
            program: "caddy".to_owned(),
            args: vec![
                "run".to_owned(),
                "--config".to_owned(),
                config,
                "--adapter".to_owned(),
                "caddyfile".to_owned(),
                "--envfile".to_owned(),
                env,
            ],
        })
    }
}
