//! Automatic certificates (RFC 8555) with instant-acme: one account per CA directory, one order
//! per domain, HTTP-01 (answered by the HTTP listener from the store) or TLS-ALPN-01 (answered
//! by the HTTPS listener's resolver), renewal at two thirds of the lifetime, and retries with
//! jittered exponential backoff. Nothing here blocks startup: a domain without a certificate
//! simply fails its handshakes until one arrives.
//!
//! With Redis (`redis_certificates`), the instances share one account and one certificate per
//! domain (`rampart_shared::certs::Vault`, encrypted): the instance that takes a domain's lock
//! orders, publishing its challenge answers in Redis so that whichever instance the CA reaches
//! answers; the others wait and take the certificate from Redis, and every instance checks
//! Redis for a newer certificate at least every [`VAULT_POLL`], so a renewal happens once and
//! reaches them all. Each instance also keeps a copy on disk for restarts without Redis.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rampart_config::{AcmeChallenge, AcmeConfig, DomainPattern};
use rampart_shared::certs::Vault;
use rampart_shared::Shared;
use rcgen::{CertificateParams, CustomExtension, KeyPair};

use crate::der::Validity;
use crate::pem::{self, Loaded};
use crate::store::CertStore;
use crate::TlsError;

/// First retry after a failed order; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);
/// After the CA says `rateLimited`, wait at least this long (doubling while it lasts).
const RATE_LIMITED_BACKOFF: Duration = Duration::from_secs(3600);
/// Limits on one exchange with the CA: a CA (or a middlebox) that accepts a connection and
/// then stays silent must not stop renewals for good.
const ACCOUNT_TIMEOUT: Duration = Duration::from_secs(120);
const ORDER_TIMEOUT: Duration = Duration::from_secs(600);
/// With Redis: how often an instance looks for a certificate another one obtained.
pub const VAULT_POLL: Duration = Duration::from_secs(30);
/// With Redis: the wait before looking again while another instance holds the order's lock.
const OTHER_ORDERING: Duration = Duration::from_secs(2);

/// Where one CA's account and certificates live: `state_dir/acme/<directory host and path>`.
pub fn ca_dir(state_dir: &Path, directory_url: &str) -> PathBuf {
    let tail = directory_url
        .split_once("://")
        .map_or(directory_url, |(_, t)| t);
    let name: String = tail
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    state_dir.join("acme").join(name)
}

fn cert_paths(dir: &Path, domain: &str) -> (PathBuf, PathBuf) {
    let certs = dir.join("certificates");
    (
        certs.join(format!("{domain}.crt")),
        certs.join(format!("{domain}.key")),
    )
}

/// A certificate obtained earlier for `domain`, if it is on disk and readable.
pub fn stored(state_dir: &Path, cfg: &AcmeConfig, domain: &str) -> Option<Loaded> {
    let (c, k) = cert_paths(&ca_dir(state_dir, &cfg.directory_url), domain);
    if !c.exists() {
        return None;
    }
    match pem::load_pair(&c, &k) {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(domain, error = %e, "stored ACME certificate unusable; ordering a new one");
            None
        }
    }
}

/// A number in `0..n` that differs between calls (for jitter; not for secrets).
fn jitter(n: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    if n == 0 {
        return 0;
    }
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish() % n
}

/// The wait after the `failures`-th consecutive failure: exponential from 1 minute (from 1 hour
/// when the CA said `rateLimited`) up to a day, ±20 % jitter.
pub fn backoff(failures: u32, rate_limited: bool) -> Duration {
    let first = if rate_limited {
        RATE_LIMITED_BACKOFF
    } else {
        FIRST_BACKOFF
    };
    let base = first
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    let spread = base.as_millis() as u64 * 2 / 5;
    base - base / 5 + Duration::from_millis(jitter(spread.max(1)))
}

/// When to start renewing a certificate: at two thirds of its lifetime, a little earlier by a
/// random amount (up to 1/30 of it) so many domains do not renew at once.
pub fn renew_time(v: &Validity) -> SystemTime {
    let life = v.not_after.duration_since(v.not_before).unwrap_or_default();
    let early = Duration::from_millis(jitter(life.as_millis() as u64 / 30));
    v.renew_at() - early.min(life / 30)
}

/// The account every domain's orders use, replaced when the CA no longer knows it.
struct AccountCell {
    cfg: AcmeConfig,
    dir: PathBuf,
    vault: Option<Arc<Vault>>,
    /// The account (fetched or created on first need) and how many times it has been
    /// replaced.
    current: tokio::sync::Mutex<(Option<Account>, u64)>,
}

impl AccountCell {
    /// The account, fetched or created when first needed (an order is the first need: a CA
    /// that is away delays orders, never the certificates already obtained).
    async fn get(&self) -> Result<(Account, u64), TlsError> {
        let mut current = self.current.lock().await;
        if let Some(a) = &current.0 {
            return Ok((a.clone(), current.1));
        }
        let attempt = tokio::time::timeout(
            ACCOUNT_TIMEOUT,
            account(&self.cfg, &self.dir, self.vault.as_deref()),
        )
        .await;
        let a = attempt
            .unwrap_or_else(|_| Err(TlsError::AcmeTimeout("the CA did not answer in time")))
            .inspect_err(|e| {
                tracing::warn!(directory = %self.cfg.directory_url, error = %e, "ACME account unavailable; orders wait for it (certificates already obtained stay in service)");
            })?;
        current.0 = Some(a.clone());
        Ok((a, current.1))
    }

    /// The CA answered `accountDoesNotExist` for the account of `generation` (a staging CA
    /// reset, a deactivated account): registers a new one, once for all the domains that saw it.
    /// Returns whether the account in use is now another one than `generation`'s.
    async fn replace(&self, generation: u64) -> bool {
        let mut current = self.current.lock().await;
        if current.1 != generation {
            return true;
        }
        let path = self.dir.join("account.json");
        let old = self.dir.join("account.json.unknown-to-ca");
        if let Err(e) = std::fs::rename(&path, &old) {
            tracing::warn!(path = %path.display(), error = %e, "cannot set the unknown ACME account aside");
        }
        let vault = self.vault.as_deref();
        if let Some(v) = vault {
            // Another instance may have replaced it already: take that one. Else forget it.
            let shared_one = v.get("account").await.ok().flatten();
            let ours = std::fs::read(&old).ok();
            if shared_one.is_some() && shared_one != ours {
                if let Ok(a) = account(&self.cfg, &self.dir, vault).await {
                    *current = (Some(a), generation + 1);
                    return true;
                }
            }
            if let Err(e) = v.put("account", b"").await {
                tracing::warn!(error = %e, "cannot forget the unknown ACME account in Redis");
            }
        }
        match tokio::time::timeout(ACCOUNT_TIMEOUT, account(&self.cfg, &self.dir, vault)).await {
            Ok(Ok(a)) => {
                tracing::warn!(directory = %self.cfg.directory_url, "the CA did not know the stored ACME account; registered a new one");
                *current = (Some(a), generation + 1);
                return true;
            }
            Ok(Err(e)) => {
                tracing::warn!(directory = %self.cfg.directory_url, error = %e, "cannot register a new ACME account")
            }
            Err(_) => {
                tracing::warn!(directory = %self.cfg.directory_url, "cannot register a new ACME account: the CA did not answer in time")
            }
        }
        false
    }
}

/// Runs the ACME client for `domains` forever: gets the account (creating it on first use),
/// then keeps each domain's certificate current.
pub async fn run(
    cfg: AcmeConfig,
    state_dir: PathBuf,
    domains: Vec<(DomainPattern, String, Option<Validity>)>,
    store: Arc<CertStore>,
    shared: Option<Shared>,
) {
    let dir = ca_dir(&state_dir, &cfg.directory_url);
    let ca_name = dir
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let vault = shared
        .as_ref()
        .and_then(|s| Vault::new(s, &ca_name))
        .map(Arc::new);
    let shared = shared.filter(|_| vault.is_some());
    let cell = Arc::new(AccountCell {
        cfg,
        dir,
        vault,
        current: tokio::sync::Mutex::new((None, 0)),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for (pattern, domain, validity) in domains {
        let (cell, store, shared) = (cell.clone(), store.clone(), shared.clone());
        tasks.spawn(keep_current(cell, pattern, domain, validity, store, shared));
    }
    while tasks.join_next().await.is_some() {}
}

/// The account: from Redis when shared (the first instance creates it under a lock, the
/// others wait for it), else from `dir` (created on first use).
async fn account(cfg: &AcmeConfig, dir: &Path, vault: Option<&Vault>) -> Result<Account, TlsError> {
    let Some(v) = vault else {
        return local_account(cfg, dir).await;
    };
    let builder = || match &cfg.ca_file {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    };
    loop {
        if let Some(json) = v.get("account").await?.filter(|j| !j.is_empty()) {
            let creds: AccountCredentials =
                serde_json::from_slice(&json).map_err(|e| TlsError::AccountFile {
                    path: PathBuf::from("redis"),
                    reason: e.to_string(),
                })?;
            return Ok(builder()?.from_credentials(creds).await?);
        }
        let Some(lock) = v
            .lock("account", ACCOUNT_TIMEOUT + Duration::from_secs(30))
            .await?
        else {
            tokio::time::sleep(OTHER_ORDERING).await;
            continue;
        };
        if v.get("account").await?.is_some_and(|j| !j.is_empty()) {
            v.release(lock).await;
            continue;
        }
        // Not the disk copy: it may be another CA generation's (see AccountCell::replace).
        let path = dir.join("account.json");
        let _ = std::fs::rename(&path, dir.join("account.json.before-redis"));
        let created = local_account(cfg, dir).await;
        if created.is_ok() {
            match std::fs::read(&path) {
                Ok(json) => v.put("account", &json).await?,
                Err(e) => tracing::warn!(error = %e, "cannot read back the new ACME account"),
            }
        }
        v.release(lock).await;
        return created;
    }
}

async fn local_account(cfg: &AcmeConfig, dir: &Path) -> Result<Account, TlsError> {
    let path = dir.join("account.json");
    let builder = || match &cfg.ca_file {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    };
    if let Ok(text) = std::fs::read(&path) {
        let creds: AccountCredentials =
            serde_json::from_slice(&text).map_err(|e| TlsError::AccountFile {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        return Ok(builder()?.from_credentials(creds).await?);
    }
    let contact = cfg.contact.as_ref().map(|c| format!("mailto:{c}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, creds) = builder()?
        .create(
            &NewAccount {
                contact: &contacts,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            cfg.directory_url.clone(),
            None,
        )
        .await?;
    let file_error = |e: &dyn std::fmt::Display| TlsError::AccountFile {
        path: path.clone(),
        reason: e.to_string(),
    };
    let json = serde_json::to_vec(&creds).map_err(|e| file_error(&e))?;
    pem::write_private(&path, &json).map_err(|e| file_error(&e))?;
    tracing::info!(directory = %cfg.directory_url, id = account.id(), "ACME account created");
    Ok(account)
}

/// Keeps one domain's certificate current: order when missing or due, retry with backoff.
/// With Redis, adopt a newer certificate another instance obtained, and order only while
/// holding the domain's lock.
async fn keep_current(
    cell: Arc<AccountCell>,
    pattern: DomainPattern,
    domain: String,
    mut validity: Option<Validity>,
    store: Arc<CertStore>,
    shared: Option<Shared>,
) {
    let mut failures = 0u32;
    // The challenge type in use: the first in `acme_challenges`, the next one after each
    // failure; one that worked stays in use for later renewals.
    let mut choice = 0usize;
    let mut retried_new_account = false;
    // After a failure: no order before then (checking Redis goes on meanwhile).
    let mut next_order: Option<std::time::Instant> = None;
    let vault = cell.vault.clone();
    let adopt = |validity: &mut Option<Validity>, loaded: Loaded| {
        let newer = match (&validity, &loaded.validity) {
            (None, _) => true,
            (Some(have), Some(got)) => got.not_after > have.not_after,
            (Some(_), None) => false,
        };
        if newer {
            store.set(&pattern, loaded.key.clone());
            *validity = loaded.validity;
        }
        newer
    };
    loop {
        if let Some(v) = &vault {
            match from_vault(v, &cell.dir, &domain).await {
                Ok(Some(loaded)) => {
                    if adopt(&mut validity, loaded) {
                        failures = 0;
                        tracing::info!(
                            domain,
                            valid_days = validity.map_or(0, |v| days_left(v.not_after)),
                            "certificate taken from Redis (obtained by this or another instance)"
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(domain, error = %e, "cannot read the shared certificate from Redis")
                }
            }
        }
        // With Redis, how soon to look there again: soon while nothing is served.
        let poll = match (&vault, &validity) {
            (None, _) => Duration::MAX,
            (Some(_), None) => OTHER_ORDERING,
            (Some(_), Some(_)) => VAULT_POLL,
        };
        if let Some(v) = &validity {
            let due = renew_time(v);
            if let Ok(wait) = due.duration_since(SystemTime::now()) {
                tracing::debug!(domain, ?wait, "next ACME renewal");
                tokio::time::sleep(wait.min(poll)).await;
                continue;
            }
        }
        if let Some(wait) =
            next_order.and_then(|t| t.checked_duration_since(std::time::Instant::now()))
        {
            tokio::time::sleep(wait.min(poll)).await;
            continue;
        }
        // Due or missing. With Redis, only the holder of the domain's lock orders.
        let lock = match &vault {
            None => None,
            Some(v) => match v
                .lock(
                    &format!("order:{domain}"),
                    ORDER_TIMEOUT + Duration::from_secs(60),
                )
                .await
            {
                Ok(Some(lock)) => Some(lock),
                Ok(None) => {
                    tracing::debug!(
                        domain,
                        "another instance is ordering; waiting for its certificate"
                    );
                    tokio::time::sleep(OTHER_ORDERING).await;
                    continue;
                }
                Err(e) => {
                    failures += 1;
                    let wait = backoff(failures, false);
                    tracing::warn!(domain, error = %e, retry_in = ?wait, "cannot take the order lock in Redis; the certificate in service stays");
                    next_order = Some(std::time::Instant::now() + wait);
                    continue;
                }
            },
        };
        // Another instance may have finished just before the lock was free.
        if let (Some(v), Some(_)) = (&vault, &lock) {
            if let Ok(Some(loaded)) = from_vault(v, &cell.dir, &domain).await {
                let fresh = loaded
                    .validity
                    .is_some_and(|l| renew_time(&l) > SystemTime::now());
                if fresh && adopt(&mut validity, loaded) {
                    if let Some(lock) = lock {
                        v.release(lock).await;
                    }
                    continue;
                }
            }
        }
        let challenges = &cell.cfg.challenges;
        let kind = challenges[choice % challenges.len().max(1)];
        let mut generation = 0;
        let result = match cell.get().await {
            Ok((account, g)) => {
                generation = g;
                let attempt = tokio::time::timeout(
                    ORDER_TIMEOUT,
                    obtain(&account, &domain, kind, &store, shared.as_ref()),
                )
                .await;
                attempt.unwrap_or_else(|_| {
                    Err(TlsError::AcmeTimeout(
                        "the CA did not finish the order in time",
                    ))
                })
            }
            Err(e) => Err(e),
        };
        let release = |lock| async {
            if let (Some(v), Some(lock)) = (&vault, lock) {
                v.release(lock).await;
            }
        };
        match result {
            Ok((chain, key)) => {
                let loaded = match pem::parse_pair(chain.as_bytes(), key.as_bytes()) {
                    Ok(l) => l,
                    Err(e) => {
                        release(lock).await;
                        failures += 1;
                        tracing::error!(domain, error = %e, "the CA's certificate cannot be used");
                        next_order = Some(std::time::Instant::now() + backoff(failures, false));
                        continue;
                    }
                };
                let (c, k) = cert_paths(&cell.dir, &domain);
                if let Err(e) = pem::write_private(&k, key.as_bytes())
                    .and_then(|()| pem::write_private(&c, chain.as_bytes()))
                {
                    tracing::error!(domain, error = %e, "cannot store the certificate; it is served but will be ordered again after a restart");
                }
                if let Some(v) = &vault {
                    let blob = [chain.as_bytes(), b"\0", key.as_bytes()].concat();
                    if let Err(e) = v.put(&format!("cert:{domain}"), &blob).await {
                        tracing::error!(domain, error = %e, "cannot share the certificate through Redis; the other instances will order their own when theirs is due");
                    }
                }
                release(lock).await;
                store.set(&pattern, loaded.key.clone());
                validity = loaded.validity;
                failures = 0;
                next_order = None;
                retried_new_account = false;
                tracing::info!(
                    domain,
                    challenge = ?kind,
                    valid_days = validity.map_or(0, |v| days_left(v.not_after)),
                    "certificate obtained from the ACME CA"
                );
                if validity.is_none() {
                    // Cannot tell its lifetime: check again in a day.
                    tokio::time::sleep(Duration::from_secs(86_400)).await;
                }
            }
            Err(e) => {
                release(lock).await;
                if e.acme_problem() == Some("accountDoesNotExist")
                    && cell.replace(generation).await
                    && !retried_new_account
                {
                    // Not this domain's failure: order again at once with the new account
                    // (once: a CA that keeps saying so gets the usual backoff).
                    retried_new_account = true;
                    tracing::info!(domain, "ordering again with the new ACME account");
                    continue;
                }
                failures += 1;
                choice += 1;
                let wait = backoff(failures, e.acme_problem() == Some("rateLimited"));
                let serving = store.has(&pattern);
                tracing::warn!(domain, challenge = ?kind, error = %e, retry_in = ?wait, serving_previous = serving, "ACME order failed");
                // A stored certificate that is still valid stays in service meanwhile.
                next_order = Some(std::time::Instant::now() + wait);
            }
        }
    }
}

/// The certificate Redis holds for `domain` (chain and key, NUL between), also written to
/// `dir` so a restart without Redis serves it.
async fn from_vault(v: &Vault, dir: &Path, domain: &str) -> Result<Option<Loaded>, TlsError> {
    let Some(blob) = v.get(&format!("cert:{domain}")).await? else {
        return Ok(None);
    };
    let Some(nul) = blob.iter().position(|&b| b == 0) else {
        return Err(TlsError::AcmeOrder(
            "the certificate in Redis is malformed".into(),
        ));
    };
    let (chain, key) = (&blob[..nul], &blob[nul + 1..]);
    let loaded = pem::parse_pair(chain, key)?;
    let (c, k) = cert_paths(dir, domain);
    if std::fs::read(&c).ok().as_deref() != Some(chain) {
        if let Err(e) = pem::write_private(&k, key).and_then(|()| pem::write_private(&c, chain)) {
            tracing::warn!(domain, error = %e, "cannot keep a copy of the shared certificate on disk");
        }
    }
    Ok(Some(loaded))
}

/// Whole days from now until `t` (0 if past).
pub fn days_left(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::now())
        .unwrap_or_default()
        .as_secs()
        / 86_400
}

/// The self-signed certificate that answers a TLS-ALPN-01 challenge (RFC 8737 §3).
pub fn alpn_challenge_cert(domain: &str, digest: &[u8]) -> Result<Loaded, TlsError> {
    let mut params = CertificateParams::new(vec![domain.to_owned()])?;
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    // Not through `parse_pair`: webpki refuses to parse a certificate with the critical
    // acmeIdentifier extension, so the key-matches-certificate check cannot run (the key was
    // generated for this certificate a line above).
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signing = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(key_der)?;
    Ok(Loaded {
        key: Arc::new(rustls::sign::CertifiedKey::new(
            vec![cert.der().clone()],
            signing,
        )),
        validity: None,
    })
}

/// Challenge answers put in the store for one order; removed when dropped.
struct Answers<'a> {
    store: &'a CertStore,
    tokens: Vec<String>,
    names: Vec<String>,
}

impl Drop for Answers<'_> {
    fn drop(&mut self) {
        for t in &self.tokens {
            self.store.clear_http_challenge(t);
        }
        for n in &self.names {
            self.store.clear_alpn_challenge(n);
        }
    }
}

/// One order: authorize `domain` with `kind`, finalize, download. Returns (chain PEM, key PEM).
async fn obtain(
    account: &Account,
    domain: &str,
    kind: AcmeChallenge,
    store: &CertStore,
    shared: Option<&Shared>,
) -> Result<(String, String), TlsError> {
    let ids = [Identifier::Dns(domain.to_owned())];
    let mut order = account
        .new_order(&NewOrder::new(&ids))
        .await
        .map_err(TlsError::acme("new order"))?;
    let mut answers = Answers {
        store,
        tokens: Vec::new(),
        names: Vec::new(),
    };
    {
        let mut auths = order.authorizations();
        while let Some(auth) = auths.next().await {
            let mut auth = auth.map_err(TlsError::acme("authorization"))?;
            match auth.status {
                AuthorizationStatus::Valid => continue,
                AuthorizationStatus::Pending => {}
                other => return Err(TlsError::AcmeOrder(format!("authorization is {other:?}"))),
            }
            let wanted = match kind {
                AcmeChallenge::Http01 => ChallengeType::Http01,
                AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
            };
            let mut challenge = auth.challenge(wanted.clone()).ok_or_else(|| {
                TlsError::AcmeOrder(format!("the CA offers no {wanted:?} challenge"))
            })?;
            let key_auth = challenge.key_authorization();
            match kind {
                AcmeChallenge::Http01 => {
                    store.set_http_challenge(&challenge.token, key_auth.as_str());
                    answers.tokens.push(challenge.token.clone());
                    if let Some(s) = shared {
                        // Whichever instance the CA reaches answers.
                        s.set_http_challenge(&challenge.token, key_auth.as_str())
                            .await?;
                    }
                }
                AcmeChallenge::TlsAlpn01 => {
                    let digest = key_auth.digest();
                    let cert = alpn_challenge_cert(domain, digest.as_ref())?;
                    store.set_alpn_challenge(domain, cert.key);
                    answers.names.push(domain.to_owned());
                    if let Some(s) = shared {
                        s.set_alpn_challenge(domain, digest.as_ref()).await?;
                    }
                }
            }
            challenge
                .set_ready()
                .await
                .map_err(TlsError::acme("challenge"))?;
        }
    }
    let retry = RetryPolicy::new()
        .initial_delay(Duration::from_millis(500))
        .timeout(Duration::from_secs(120));
    let status = order
        .poll_ready(&retry)
        .await
        .map_err(TlsError::acme("validation"))?;
    if status != OrderStatus::Ready {
        return Err(TlsError::AcmeOrder(format!(
            "order is {status:?} after validation"
        )));
    }
    drop(answers);
    let key_pem = order.finalize().await.map_err(TlsError::acme("finalize"))?;
    let chain = order
        .poll_certificate(&retry)
        .await
        .map_err(TlsError::acme("certificate"))?;
    Ok((chain, key_pem))
}
