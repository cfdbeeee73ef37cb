//! Automatic certificates (RFC 8555) with instant-acme: one account per CA directory, one order
//! per domain, HTTP-01 (answered by the HTTP listener from the store) or TLS-ALPN-01 (answered
//! by the HTTPS listener's resolver), renewal at two thirds of the lifetime, and retries with
//! jittered exponential backoff. Nothing here blocks startup: a domain without a certificate
//! simply fails its handshakes until one arrives.
//!
//! With Redis (`redis_certificates`), the instances share one account and one certificate per
//! domain (`rampart_redis::certs::Vault`, encrypted): the instance that takes a domain's lock
//! orders, publishing its challenge answers in Redis so that whichever instance the CA reaches
//! answers; the others wait and take the certificate from Redis, and every instance checks
//! Redis for a newer certificate at least every [`VAULT_POLL`], so a renewal happens once and
//! reaches them all. Each instance also keeps a copy on disk for restarts without Redis.
//!
//! Each domain's loop (adopt, wait, lock, order) is `renew::Keeper`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rampart_config::{AcmeChallenge, AcmeConfig};
use rampart_redis::certs::Vault;
use rampart_redis::Shared;
use rcgen::{CertificateParams, CustomExtension, KeyPair};

use crate::cert_store::CertStore;
use crate::der::Validity;
use crate::pem::{self, Loaded};
use crate::TlsError;

/// First retry after a failed order; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);
/// After the CA says `rateLimited`, wait at least this long (doubling while it lasts).
const RATE_LIMITED_BACKOFF: Duration = Duration::from_secs(3600);
/// Limits on one exchange with the CA: a CA (or a middlebox) that accepts a connection and
/// then stays silent must not stop renewals for good.
const ACCOUNT_TIMEOUT: Duration = Duration::from_secs(120);
pub(crate) const ORDER_TIMEOUT: Duration = Duration::from_secs(600);
/// With Redis: how often an instance looks for a certificate another one obtained.
pub const VAULT_POLL: Duration = Duration::from_secs(30);
/// With Redis: the wait before looking again while another instance holds the order's lock.
pub(crate) const OTHER_ORDERING: Duration = Duration::from_secs(2);

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

pub(crate) fn cert_paths(dir: &Path, domain: &str) -> (PathBuf, PathBuf) {
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
pub(crate) struct AccountCell {
    pub(crate) cfg: AcmeConfig,
    pub(crate) dir: PathBuf,
    pub(crate) vault: Option<Arc<Vault>>,
    /// The account (fetched or created on first need) and how many times it has been
    /// replaced.
    current: tokio::sync::Mutex<(Option<Account>, u64)>,
}

impl AccountCell {
    /// No account yet: the first order fetches or creates it.
    pub(crate) fn new(cfg: AcmeConfig, dir: PathBuf, vault: Option<Arc<Vault>>) -> Self {
        AccountCell {
            cfg,
            dir,
            vault,
            current: tokio::sync::Mutex::new((None, 0)),
        }
    }

    /// The account, fetched or created when first needed (an order is the first need: a CA
    /// that is away delays orders, never the certificates already obtained).
    pub(crate) async fn get(&self) -> Result<(Account, u64), TlsError> {
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
    pub(crate) async fn replace(&self, generation: u64) -> bool {
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
pub(crate) async fn obtain(
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
