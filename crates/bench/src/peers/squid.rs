//! Squid as a peer: an accelerator with a memory-only cache, its config and the user it drops
//! to.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;

use super::config::{fill, prepare_dir, system_user, write_config};
use super::{Launch, Peer, Setup};

/// Squid 5 as an accelerator (reverse proxy) with a memory-only cache (`cache_mem 256 MB`, no
/// `cache_dir`), HTTP/1.1 only. `vhost` + `defaultsite` accept any Host; every request goes to
/// the origin peer (`never_direct`), so Squid never resolves or contacts the Host itself. DNS,
/// ICMP pinger, cache digests and the netdb file are off or pointed at 127.0.0.1. Squid honours
/// `no-store`. A hit carries `X-Cache: HIT from localhost` (a miss `MISS`).
///
/// With one worker it runs as `squid -N -f DIR/squid.conf` (one process, no daemon). With N > 1
/// it runs as `squid --foreground -f DIR/squid.conf` with `workers N` (a master and N kids plus
/// a coordinator in the launched process's group); SMP Squid then also uses shared memory
/// segments in /dev/shm (`squid-*.shm`) and IPC sockets in /run/squid — compiled-in places,
/// removed (the sockets: left) when it exits. Started as root it drops to `proxy` (Debian's squid
/// user), so `DIR/squid-logs` (cache.log) is given to that user; if it cannot write there Squid
/// logs to stderr instead. After SIGTERM Squid takes about 2 s to exit (`shutdown_lifetime 1
/// seconds`). No environment variables are needed.
#[derive(Debug, Clone, Copy)]
pub struct Squid;

const SQUID_CONF: &str = "# Squid accelerator, memory-only cache (rampart-bench).
http_port 127.0.0.1:@PORT@ accel defaultsite=localhost vhost
cache_peer @HOST@ parent @OPORT@ 0 no-query no-digest originserver name=origin
cache_peer_access origin allow all
never_direct allow all
http_access allow all
workers @WORKERS@
cache_mem 256 MB
maximum_object_size_in_memory 1 MB
@USER@visible_hostname localhost
pid_filename @DIR@/squid.pid
cache_log @DIR@/squid-logs/cache.log
access_log none
cache_store_log none
netdb_filename none
coredump_dir @DIR@/squid-logs
shutdown_lifetime 1 seconds
pinger_enable off
digest_generation off
dns_nameservers 127.0.0.1
udp_incoming_address 127.0.0.1
";

impl Peer for Squid {
    fn name(&self) -> &'static str {
        "squid"
    }
    fn label(&self) -> String {
        "Squid accelerator".to_owned()
    }
    fn binary(&self) -> &'static str {
        "squid"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install squid"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        false
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, dir_text) = prepare_dir(setup.dir)?;
        let logs = dir.join("squid-logs");
        fs::create_dir_all(&logs)?;
        fs::set_permissions(&logs, fs::Permissions::from_mode(0o755))?;
        let user = system_user(&["proxy", "squid", "nobody"]);
        let user_line = match &user {
            Some(u) => {
                // Only root can hand the directory over; otherwise Squid runs as the caller,
                // who owns it already.
                let _ = std::os::unix::fs::chown(&logs, Some(u.uid), Some(u.gid));
                format!("cache_effective_user {}\n", u.name)
            }
            None => String::new(),
        };
        let workers = setup.workers.max(1);
        let conf = fill(
            SQUID_CONF,
            &[
                ("@USER@", user_line),
                ("@WORKERS@", workers.to_string()),
                ("@DIR@", dir_text),
                ("@PORT@", setup.port.to_string()),
                ("@HOST@", setup.origin.ip().to_string()),
                ("@OPORT@", setup.origin.port().to_string()),
            ],
        );
        let config = write_config(&dir, "squid.conf", &conf)?;
        let mode = if workers == 1 { "-N" } else { "--foreground" };
        Ok(Launch {
            program: "squid".to_owned(),
            args: vec![mode.to_owned(), "-f".to_owned(), config],
        })
    }
}
