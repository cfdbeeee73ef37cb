//! Apache httpd as a peer: a standalone config (mod_proxy, mod_cache on shared memory,
//! mod_http2) that uses nothing from the system's /etc/apache2.

use std::io;
use std::path::Path;

use super::config::{fill, prepare_dir, system_user, write_config};
use super::{Launch, Peer, Setup};

/// Apache httpd 2.4, event MPM, `mod_proxy_http` (pooled keep-alive connections to the origin)
/// and `mod_cache` with `mod_cache_socache` on a 256 MiB shared-memory `shmcb` store (objects up
/// to 1 MiB, `CacheQuickHandler on`, `CacheDefaultExpire 3600`). `mod_http2` serves h2c with
/// prior knowledge (`Protocols h2c http/1.1`, `H2Direct on`) on both ports. mod_cache honours
/// `no-store`. A hit carries `X-Cache: HIT from localhost` (`CacheHeader on`; a miss `MISS`).
///
/// Runs as `apache2 -f DIR/httpd.conf -DFOREGROUND` with a standalone config: modules are loaded
/// by absolute path, and ServerRoot, DefaultRuntimeDir, the pid file and the error log are DIR
/// (no access log; mutexes are the default pthread ones, no files), so Debian's /etc/apache2 and
/// its APACHE_* environment variables are not used. Workers: N child processes
/// (`StartServers`/`ServerLimit` N) of 64 threads each. Threads are not CPUs in Apache: a thread
/// serves one request at a time and waits for the origin, so one thread per CPU would serialise
/// a pass-through load; N processes match the N worker processes of NGINX. Started as root the
/// children run as `www-data` (or `apache`/`daemon`/`nobody`, whichever exists); they need no
/// access to DIR.
#[derive(Debug, Clone, Copy)]
pub struct Apache;

/// Threads per Apache child process.
const APACHE_THREADS: usize = 64;

const APACHE_CONF: &str = r#"# Apache mod_proxy + mod_cache (rampart-bench): a standalone config, nothing from /etc/apache2.
ServerRoot "@DIR@"
DefaultRuntimeDir "@DIR@"
PidFile "@DIR@/httpd.pid"
ErrorLog "@DIR@/error.log"
LogLevel error
ServerName localhost
@USER@
LoadModule mpm_event_module @MODULES@/mod_mpm_event.so
LoadModule authz_core_module @MODULES@/mod_authz_core.so
LoadModule proxy_module @MODULES@/mod_proxy.so
LoadModule proxy_http_module @MODULES@/mod_proxy_http.so
LoadModule cache_module @MODULES@/mod_cache.so
LoadModule cache_socache_module @MODULES@/mod_cache_socache.so
LoadModule socache_shmcb_module @MODULES@/mod_socache_shmcb.so
LoadModule http2_module @MODULES@/mod_http2.so

# @WORKERS@ child process(es) of @THREADS@ threads, all started at once and never stopped.
StartServers @WORKERS@
ServerLimit @WORKERS@
ThreadLimit @THREADS@
ThreadsPerChild @THREADS@
MaxRequestWorkers @MAXWORKERS@
MinSpareThreads 1
MaxSpareThreads @MAXSPARE@
MaxConnectionsPerChild 0

Listen 127.0.0.1:@PORT@
Listen 127.0.0.1:@H2PORT@
Protocols h2c http/1.1
H2Direct on
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 60

ProxyRequests Off
ProxyPass / http://@ORIGIN@/

CacheQuickHandler on
CacheEnable socache /
CacheSocache "shmcb:@DIR@/cache.shmcb(268435456)"
CacheSocacheMaxSize 1048576
CacheDefaultExpire 3600
CacheHeader on
"#;

/// Where distributions keep Apache's modules; the first that has mod_proxy.so is used.
const APACHE_MODULE_DIRS: [&str; 4] = [
    "/usr/lib/apache2/modules",
    "/usr/lib64/httpd/modules",
    "/usr/lib/httpd/modules",
    "/usr/libexec/apache2",
];

impl Peer for Apache {
    fn name(&self) -> &'static str {
        "apache"
    }
    fn label(&self) -> String {
        "Apache mod_proxy + mod_cache".to_owned()
    }
    fn binary(&self) -> &'static str {
        "apache2"
    }
    fn install_hint(&self) -> &'static str {
        "apt-get install apache2"
    }
    fn caches(&self) -> bool {
        true
    }
    fn h2c(&self) -> bool {
        true
    }
    fn prepare(&self, setup: &Setup<'_>) -> io::Result<Launch> {
        let (dir, dir_text) = prepare_dir(setup.dir)?;
        let modules = APACHE_MODULE_DIRS
            .iter()
            .find(|d| Path::new(d).join("mod_proxy.so").is_file())
            .unwrap_or(&APACHE_MODULE_DIRS[0]);
        let user = match system_user(&["www-data", "apache", "daemon", "nobody"]) {
            Some(u) => format!("User {}\nGroup #{}\n", u.name, u.gid),
            None => String::new(),
        };
        let workers = setup.workers.max(1);
        let conf = fill(
            APACHE_CONF,
            &[
                ("@USER@", user),
                ("@MODULES@", (*modules).to_owned()),
                ("@MAXWORKERS@", (workers * APACHE_THREADS).to_string()),
                ("@MAXSPARE@", ((workers + 1) * APACHE_THREADS).to_string()),
                ("@WORKERS@", workers.to_string()),
                ("@THREADS@", APACHE_THREADS.to_string()),
                ("@DIR@", dir_text),
                ("@PORT@", setup.port.to_string()),
                ("@H2PORT@", setup.h2_port.to_string()),
                ("@ORIGIN@", setup.origin.to_string()),
            ],
        );
        let config = write_config(&dir, "httpd.conf", &conf)?;
        Ok(Launch {
            program: "apache2".to_owned(),
            args: vec!["-f".to_owned(), config, "-DFOREGROUND".to_owned()],
        })
    }
}
