//! Automatic certificates against a real ACME server: Pebble (Let's Encrypt's test CA) with
//! pebble-challtestsrv answering its DNS queries with 127.0.0.1. `.ci/run` installs both with
//! `go install`; set `PEBBLE_BIN` / `CHALLTESTSRV_BIN` to use other builds.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use support::redis::Redis;
use support::tls::{self, TestCa};
use support::*;

fn go_bin(env: &str, name: &str) -> PathBuf {
    support::go_bin(
        env,
        name,
        &format!("go install github.com/letsencrypt/pebble/v2/cmd/{name}@v2.10.1"),
    )
}

/// Where a Pebble listens and the certificate of its own HTTPS front: kept across a restart.
#[derive(Clone)]
struct Layout {
    http_port: u16,
    tls_port: u16,
    validity: u64,
    listen: u16,
    mgmt: u16,
    dns: u16,
    dns_mgmt: u16,
    /// The address Pebble's DNS gives every name (where it validates challenges).
    dns_ip: String,
    /// Trusts Pebble's own HTTPS (directory and management).
    ca: std::sync::Arc<TestCa>,
    ca_file: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// Pebble and its DNS server; both killed when dropped.
struct Pebble {
    children: Vec<Child>,
    directory: String,
    management: SocketAddr,
    layout: Layout,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Pebble {
    /// Starts Pebble validating challenges on `http_port` / `tls_port` (rampart's listeners),
    /// issuing certificates valid for `validity` seconds.
    fn start(http_port: u16, tls_port: u16, validity: u64) -> Pebble {
        Pebble::start_resolving(http_port, tls_port, validity, "127.0.0.1")
    }

    /// As [`Pebble::start`], validating challenges at `ip`.
    fn start_resolving(http_port: u16, tls_port: u16, validity: u64, ip: &str) -> Pebble {
        let ca = TestCa::new("pebble front CA");
        let (cert, key) = ca.leaf(&["localhost", "127.0.0.1"]).write("pebble");
        let ca_file = ca.write("pebble-front-ca");
        Pebble::run(Layout {
            http_port,
            tls_port,
            validity,
            listen: free_port(),
            mgmt: free_port(),
            dns: free_port(),
            dns_mgmt: free_port(),
            dns_ip: ip.to_owned(),
            ca: std::sync::Arc::new(ca),
            ca_file,
            cert,
            key,
        })
    }

    /// Stops this Pebble and starts a new one on the same addresses: the same directory URL,
    /// but a CA that knows no account or order of the old one (Pebble keeps them in memory).
    fn restart(mut self) -> Pebble {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.children.clear();
        Pebble::run(self.layout.clone())
    }

    fn run(l: Layout) -> Pebble {
        let (listen, mgmt, dns, dns_mgmt) = (l.listen, l.mgmt, l.dns, l.dns_mgmt);
        let (cert, key, http_port, tls_port, validity) =
            (&l.cert, &l.key, l.http_port, l.tls_port, l.validity);
        let config = scratch("pebble.json");
        std::fs::write(
            &config,
            format!(
                r#"{{"pebble": {{
  "listenAddress": "127.0.0.1:{listen}", "managementListenAddress": "127.0.0.1:{mgmt}",
  "certificate": {cert:?}, "privateKey": {key:?},
  "httpPort": {http_port}, "tlsPort": {tls_port},
  "ocspResponderURL": "", "externalAccountBindingRequired": false,
  "retryAfter": {{"authz": 1, "order": 1}},
  "profiles": {{"default": {{"description": "test", "validityPeriod": {validity}}}}}
}}}}"#
            ),
        )
        .unwrap();
        let log = |name: &str| std::fs::File::create(scratch(name)).unwrap();
        let dns_server = Command::new(go_bin("CHALLTESTSRV_BIN", "pebble-challtestsrv"))
            .args(["-defaultIPv4", &l.dns_ip, "-defaultIPv6", ""])
            .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
            .args(["-management", &format!("127.0.0.1:{dns_mgmt}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .stdout(log("challtestsrv.log"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pebble = Command::new(go_bin("PEBBLE_BIN", "pebble"))
            .args(["-config", config.to_str().unwrap()])
            .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
            // No artificial delays, no nonce rejections, a fresh validation for every order.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(log("pebble.log"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let p = Pebble {
            children: vec![dns_server, pebble],
            directory: format!("https://localhost:{listen}/dir"),
            management: SocketAddr::from(([127, 0, 0, 1], mgmt)),
            layout: l,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        // Every port the tests use: the directory, the management interface (the issuing
        // root) and the DNS server's management.
        while [listen, mgmt, dns_mgmt]
            .iter()
            .any(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_err())
        {
            assert!(Instant::now() < deadline, "Pebble did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        p
    }

    /// The root Pebble signs certificates with (from its management interface).
    async fn issuing_root(&self) -> String {
        let config = tls::browser(self.layout.ca.roots());
        let got = tls::get(self.management, "localhost", "/roots/0", &config).await;
        assert_eq!(got.status, 200);
        got.text()
    }
}

/// A rampart config using `pebble` for `domain`, with fixed ports and `challenges`.
fn acme_config(
    pebble: &Pebble,
    ports: (u16, u16),
    state: &Path,
    domain: &str,
    origin: &OriginHandle,
    challenges: &str,
) -> String {
    format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = {}\nlistening_port_https = {}\n\
         workers = 1\nlogging_level = \"info\"\nadd_logging = false\n\
         lets_encrypt_contact_email = \"ops@rampart.test\"\nacme_directory_url = \"{}\"\n\
         acme_ca_file = {:?}\nacme_challenges = [{challenges}]\nstate_dir = {:?}\n\
         [[proxy_rules]]\ndomain = \"{domain}\"\nmax_age_seconds = 0\nforward_ipv4 = \"127.0.0.1\"\n\
         forward_port_http = {}\nrule_type = \"Whitelist\"\nenable_logging = false\nignore_query_string = false\n\
         enable_sql_injection_protection = false\nenable_compression = false\nenable_minification = false\n\
         enable_webp_transformation = false\n",
        ports.0,
        ports.1,
        pebble.directory,
        pebble.layout.ca_file.display().to_string(),
        state.display().to_string(),
        origin.port()
    )
}

/// An instance on `ip` that shares its certificates through `redis`, ordering `domain` with
/// `challenge`; with `ca_file`, it trusts that CA file instead of Pebble's (so it cannot order).
#[allow(clippy::too_many_arguments)]
fn shared_conf(
    pebble: &Pebble,
    ports: (u16, u16),
    redis: &Redis,
    origin: &OriginHandle,
    domain: &str,
    challenge: &str,
    ip: &str,
    ca_file: Option<&Path>,
) -> String {
    let state = scratch(&format!("acme-shared-{domain}-{ip}"));
    let mut c = acme_config(pebble, ports, &state, domain, origin, challenge)
        .replace(
            "listening_address = \"127.0.0.1\"",
            &format!("listening_address = \"{ip}\""),
        )
        .replace(
            "[[proxy_rules]]",
            &format!(
                "redis_url = \"{}\"\nredis_encryption_key = \"0123456789abcdef0123456789abcdef\"\n[[proxy_rules]]",
                redis.url()
            ),
        );
    if let Some(f) = ca_file {
        c = c.replace(
            &format!("{:?}", pebble.layout.ca_file.display().to_string()),
            &format!("{:?}", f.display().to_string()),
        );
    }
    c
}

/// Waits until `domain` is served with a certificate that verifies against `root` and is not
/// `previous`; returns it.
async fn wait_for_cert(
    https: SocketAddr,
    domain: &str,
    root: &str,
    previous: Option<&CertificateDer<'static>>,
    within: Duration,
    proxy: &Proxy,
) -> CertificateDer<'static> {
    let config = tls::browser(tls::roots_from_pem(root));
    let deadline = Instant::now() + within;
    loop {
        if let Ok(s) = tls::connect(https, domain, &config).await {
            let leaf = tls::peer_leaf(&s);
            if Some(&leaf) != previous {
                return leaf;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no (new) certificate for {domain} within {within:?}\n{}",
            proxy.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn mode(p: &Path) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions()) & 0o777
}

/// The one CA folder under `state/acme/`.
fn account_dir(state: &Path) -> PathBuf {
    std::fs::read_dir(state.join("acme"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
}

/// An origin answering `body`, Pebble issuing 30-second certificates (renewal due after about
/// 20 s), and rampart ordering one for `domain` with `challenges`. Bind `_origin` and `pebble`
/// when destructuring it: fields left to `..` are dropped at once.
struct Issued {
    _origin: OriginHandle,
    pebble: Pebble,
    /// Pebble's issuing root, PEM.
    root: String,
    state: PathBuf,
    conf: String,
    proxy: Proxy,
    https: SocketAddr,
    /// The first certificate served for the domain.
    first: CertificateDer<'static>,
}

async fn issued(domain: &str, body: &str, challenges: &str) -> Issued {
    let origin = Origin::new().route("*", Reply::text(body)).start().await;
    let ports = (free_port(), free_port());
    let pebble = Pebble::start(ports.0, ports.1, 30);
    let root = pebble.issuing_root().await;
    let state = scratch(&format!("acme-{domain}"));
    let conf = acme_config(&pebble, ports, &state, domain, &origin, challenges);
    let proxy = Proxy::start(&conf);
    let https = proxy.https.unwrap();
    let first = wait_for_cert(https, domain, &root, None, Duration::from_secs(60), &proxy).await;
    Issued {
        _origin: origin,
        pebble,
        root,
        state,
        conf,
        proxy,
        https,
        first,
    }
}

#[tokio::test]
async fn http01_issues_renews_and_survives_a_restart_without_the_ca() {
    let Issued {
        _origin,
        pebble,
        root,
        state,
        conf,
        proxy,
        https,
        first,
        ..
    } = issued("h.test", "secure\n", "\"http-01\"").await;
    assert!(
        proxy
            .output()
            .contains("answered an ACME http-01 challenge"),
        "{}",
        proxy.output()
    );
    let config = tls::browser(tls::roots_from_pem(&root));
    let got = tls::get(https, "h.test", "/", &config).await;
    assert_eq!(got.text(), "secure\n");

    // Stored for restarts, private.
    let dir = account_dir(&state);
    assert_eq!(mode(&dir.join("account.json")), 0o600);
    assert_eq!(mode(&dir.join("certificates/h.test.key")), 0o600);

    // Renewed at about two thirds of its 30 s lifetime, without a restart.
    let renewed = wait_for_cert(
        https,
        "h.test",
        &root,
        Some(&first),
        Duration::from_secs(40),
        &proxy,
    )
    .await;
    assert_ne!(renewed, first);

    // A restart with the CA gone: the stored certificate is served at once.
    drop(proxy);
    drop(pebble);
    let proxy = Proxy::start(&conf);
    let config = tls::browser(tls::roots_from_pem(&root));
    let s = tls::connect(proxy.https.unwrap(), "h.test", &config).await;
    // (It may have expired meanwhile only if the test ran for 30 s since the renewal.)
    let leaf = tls::peer_leaf(&s.expect("the stored certificate is served"));
    assert_ne!(leaf, first);
}

#[tokio::test]
async fn tls_alpn01_issues_and_renews_a_certificate() {
    let Issued {
        _origin,
        pebble: _pebble,
        root,
        proxy,
        https,
        first,
        ..
    } = issued("t.test", "alpn\n", "\"tls-alpn-01\"").await;
    assert!(!proxy
        .output()
        .contains("answered an ACME http-01 challenge"));
    assert!(proxy.output().contains("TlsAlpn01"), "{}", proxy.output());
    let config = tls::browser(tls::roots_from_pem(&root));
    assert_eq!(
        tls::get(https, "t.test", "/", &config).await.text(),
        "alpn\n"
    );
    // Renewed through tls-alpn-01 too, at about two thirds of the 30 s lifetime.
    wait_for_cert(
        https,
        "t.test",
        &root,
        Some(&first),
        Duration::from_secs(40),
        &proxy,
    )
    .await;
    let obtained = proxy
        .output()
        .matches("certificate obtained from the ACME CA")
        .count();
    assert!(obtained >= 2, "{}", proxy.output());
}

#[tokio::test]
async fn a_ca_that_forgot_the_account_gets_a_new_one() {
    let Issued {
        _origin,
        pebble,
        root,
        state,
        proxy,
        https,
        first,
        ..
    } = issued("f.test", "again\n", "\"http-01\"").await;
    // The same directory URL, but a CA without the stored account (like a staging reset).
    let pebble = pebble.restart();
    let new_root = pebble.issuing_root().await;
    assert_ne!(new_root, root, "a restarted Pebble issues from a new root");
    // The renewal (due after about 20 s) is refused with accountDoesNotExist; rampart
    // registers a new account and orders again at once.
    let renewed = wait_for_cert(
        https,
        "f.test",
        &new_root,
        Some(&first),
        Duration::from_secs(50),
        &proxy,
    )
    .await;
    assert_ne!(renewed, first);
    assert!(
        proxy
            .output()
            .contains("the CA did not know the stored ACME account; registered a new one"),
        "{}",
        proxy.output()
    );
    let dir = account_dir(&state);
    assert_eq!(mode(&dir.join("account.json")), 0o600);
    assert!(dir.join("account.json.unknown-to-ca").exists());
}

#[tokio::test]
async fn an_unreachable_ca_never_blocks_startup() {
    let origin = Origin::new()
        .route("*", Reply::text("plain\n"))
        .start()
        .await;
    let state = scratch("acme-down");
    let dead = free_port();
    let conf = format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nlistening_port_https = 0\nworkers = 1\n\
         logging_level = \"info\"\nlets_encrypt_contact_email = \"ops@rampart.test\"\n\
         acme_directory_url = \"https://127.0.0.1:{dead}/dir\"\nstate_dir = {:?}\n\
         [[proxy_rules]]\ndomain = \"d.test\"\nmax_age_seconds = 0\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n",
        state.display().to_string(),
        origin.port()
    );
    let started = Instant::now();
    let proxy = Proxy::start(&conf);
    assert!(started.elapsed() < Duration::from_secs(10));
    // Plain HTTP works; HTTPS for the name fails until a certificate exists; the log says why.
    assert_eq!(get(&proxy, "d.test", "/").await.text(), "plain\n");
    let any = tls::browser(TestCa::new("x").roots());
    assert!(tls::connect(proxy.https.unwrap(), "d.test", &any)
        .await
        .is_err());
    assert!(
        proxy.wait_for_output("ACME account unavailable", Duration::from_secs(10)),
        "{}",
        proxy.output()
    );
}

/// Three instances sharing Redis: one account and one order for all; the CA validates at an
/// instance that cannot reach the CA itself (it trusts another root), so what it answers and
/// serves came through Redis. Restarted with empty state directories and no CA, all three
/// still serve the certificate, from Redis, where it is stored encrypted.
#[tokio::test]
async fn three_instances_share_one_order_through_redis() {
    let origin = Origin::new()
        .route("*", Reply::text("shared\n"))
        .start()
        .await;
    let ports = (free_port(), free_port());
    let pebble = Pebble::start_resolving(ports.0, ports.1, 3600, "127.0.0.3");
    let root = pebble.issuing_root().await;
    let redis = Redis::start();
    let wrong_ca = TestCa::new("not pebble").write("not-pebble-ca");
    let conf = |ip: &str, ca_file: Option<&Path>| {
        shared_conf(
            &pebble,
            ports,
            &redis,
            &origin,
            "s.test",
            "\"http-01\"",
            ip,
            ca_file,
        )
    };
    let confs = [
        conf("127.0.0.3", Some(&wrong_ca)),
        conf("127.0.0.1", None),
        conf("127.0.0.2", None),
    ];
    let proxies: Vec<Proxy> = confs.iter().map(|c| Proxy::start(c)).collect();
    let mut leaves = Vec::new();
    for p in &proxies {
        let https = p.https.unwrap();
        leaves.push(wait_for_cert(https, "s.test", &root, None, Duration::from_secs(60), p).await);
    }
    assert!(
        leaves.iter().all(|l| *l == leaves[0]),
        "one certificate for all"
    );
    let outputs: Vec<String> = proxies.iter().map(Proxy::output).collect();
    let orders = outputs
        .iter()
        .map(|o| o.matches("certificate obtained from the ACME CA").count())
        .sum::<usize>();
    assert_eq!(orders, 1, "{outputs:#?}");
    assert!(
        outputs[0].contains("answered an ACME http-01 challenge (from Redis)"),
        "{}",
        outputs[0]
    );
    assert!(
        outputs[0].contains("ACME account unavailable"),
        "{}",
        outputs[0]
    );
    let config = tls::browser(tls::roots_from_pem(&root));
    let got = tls::get(proxies[0].https.unwrap(), "s.test", "/", &config).await;
    assert_eq!(got.text(), "shared\n");
    // Encrypted at rest: no PEM in Redis.
    let keys = redis.cli(&["KEYS", "rampart:acme:*"]);
    assert!(
        keys.contains(":cert:s.test") && keys.contains(":account"),
        "{keys}"
    );
    for key in keys.lines().filter(|k| !k.is_empty()) {
        let value = redis.cli(&["GET", key]);
        assert!(
            !value.contains("BEGIN") && !value.contains("kid"),
            "{key}: {value}"
        );
    }
    // Restart all three without the CA and with empty state directories.
    let confs = [
        conf("127.0.0.3", Some(&wrong_ca)),
        conf("127.0.0.1", None),
        conf("127.0.0.2", None),
    ];
    drop(proxies);
    drop(pebble);
    for c in &confs {
        let p = Proxy::start(c);
        let leaf = wait_for_cert(
            p.https.unwrap(),
            "s.test",
            &root,
            None,
            Duration::from_secs(10),
            &p,
        )
        .await;
        assert_eq!(leaf, leaves[0]);
    }
}

/// TLS-ALPN-01 across instances: the CA's validation handshake reaches an instance that did
/// not order (and cannot reach the CA); it takes the answer the ordering instance published in
/// Redis, and both serve the one certificate.
#[tokio::test]
async fn a_tls_alpn_challenge_is_answered_by_any_instance() {
    let origin = Origin::new()
        .route("*", Reply::text("alpn\n"))
        .start()
        .await;
    let ports = (free_port(), free_port());
    let pebble = Pebble::start_resolving(ports.0, ports.1, 3600, "127.0.0.3");
    let root = pebble.issuing_root().await;
    let redis = Redis::start();
    let wrong_ca = TestCa::new("not pebble").write("not-pebble-ca-alpn");
    let conf = |ip: &str, ca_file: Option<&Path>| {
        shared_conf(
            &pebble,
            ports,
            &redis,
            &origin,
            "t.test",
            "\"tls-alpn-01\"",
            ip,
            ca_file,
        )
    };
    // 127.0.0.3, where the CA connects, cannot order (it does not trust the CA).
    let proxies = [
        Proxy::start(&conf("127.0.0.3", Some(&wrong_ca))),
        Proxy::start(&conf("127.0.0.1", None)),
    ];
    let mut leaves = Vec::new();
    for p in &proxies {
        let https = p.https.unwrap();
        leaves.push(wait_for_cert(https, "t.test", &root, None, Duration::from_secs(60), p).await);
    }
    assert_eq!(leaves[0], leaves[1], "one certificate for both");
    let outputs: Vec<String> = proxies.iter().map(Proxy::output).collect();
    assert!(
        outputs[0].contains("answering another instance's TLS-ALPN-01 challenge"),
        "{}",
        outputs[0]
    );
    assert!(
        outputs[1].contains("certificate obtained from the ACME CA"),
        "{}",
        outputs[1]
    );
    let config = tls::browser(tls::roots_from_pem(&root));
    let got = tls::get(proxies[0].https.unwrap(), "t.test", "/", &config).await;
    assert_eq!(got.text(), "alpn\n");
}
