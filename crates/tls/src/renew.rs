//! Keeping one domain's ACME certificate current: [`run`] starts one [`Keeper`] per
//! domain, and each goes round its stages until the process stops:
//!
//! 1. **adopt**: with Redis, a newer certificate another instance (or this one, earlier)
//!    obtained goes into service ([`Keeper::adopt_shared`]);
//! 2. **wait** until the certificate in service is due for renewal, or the back-off after a
//!    failure has passed, looking at Redis again meanwhile ([`Keeper::wait`]);
//! 3. **lock**: with Redis, only the holder of the domain's order lock orders; the others wait
//!    for its certificate ([`Keeper::lock`]);
//! 4. **order** from the CA, keep the result on disk and in Redis, or back off: the next
//!    challenge type, a longer wait, a new account once when the CA forgot this one
//!    ([`Keeper::order`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rampart_config::{AcmeConfig, DomainPattern};
use rampart_redis::certs::{Lock, Vault};
use rampart_redis::Shared;

use crate::acme::{
    backoff, ca_dir, cert_paths, days_left, obtain, renew_time, AccountCell, ORDER_TIMEOUT,
    OTHER_ORDERING, VAULT_POLL,
};
use crate::cert_store::CertStore;
use crate::der::Validity;
use crate::pem::{self, Loaded};
use crate::TlsError;

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
    let cell = Arc::new(AccountCell::new(cfg, dir, vault));
    let mut tasks = tokio::task::JoinSet::new();
    for (pattern, domain, validity) in domains {
        let keeper = Keeper {
            cell: cell.clone(),
            pattern,
            domain,
            validity,
            store: store.clone(),
            shared: shared.clone(),
            failures: 0,
            choice: 0,
            retried_new_account: false,
            next_order: None,
        };
        tasks.spawn(keeper.run());
    }
    while tasks.join_next().await.is_some() {}
}

/// One domain's certificate, and what its orders have met so far.
pub(crate) struct Keeper {
    pub(crate) cell: Arc<AccountCell>,
    pub(crate) pattern: DomainPattern,
    pub(crate) domain: String,
    /// The certificate in service (`None`: nothing yet).
    pub(crate) validity: Option<Validity>,
    pub(crate) store: Arc<CertStore>,
    pub(crate) shared: Option<Shared>,
    pub(crate) failures: u32,
    /// The challenge type in use: the first in `acme_challenges`, the next one after each
    /// failure; one that worked stays in use for later renewals.
    pub(crate) choice: usize,
    pub(crate) retried_new_account: bool,
    /// After a failure: no order before then (looking at Redis goes on meanwhile).
    pub(crate) next_order: Option<Instant>,
}

impl Keeper {
    pub(crate) async fn run(mut self) {
        loop {
            self.adopt_shared().await;
            if self.wait().await {
                continue;
            }
            let Some(lock) = self.lock().await else {
                continue;
            };
            self.order(lock).await;
        }
    }

    fn vault(&self) -> Option<&Vault> {
        self.cell.vault.as_deref()
    }

    /// Puts `loaded` in service when it outlives the certificate in service; whether it did.
    fn adopt(&mut self, loaded: Loaded) -> bool {
        let newer = match (&self.validity, &loaded.validity) {
            (None, _) => true,
            (Some(have), Some(got)) => got.not_after > have.not_after,
            (Some(_), None) => false,
        };
        if newer {
            self.store.set(&self.pattern, loaded.key);
            self.validity = loaded.validity;
        }
        newer
    }

    /// Stage 1: the certificate Redis holds, when it is newer than the one in service.
    async fn adopt_shared(&mut self) {
        let Some(v) = self.cell.vault.clone() else {
            return;
        };
        match from_vault(&v, &self.cell.dir, &self.domain).await {
            Ok(Some(loaded)) => {
                if self.adopt(loaded) {
                    self.failures = 0;
                    tracing::info!(
                        domain = self.domain,
                        valid_days = self.validity.map_or(0, |v| days_left(v.not_after)),
                        "certificate taken from Redis (obtained by this or another instance)"
                    );
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(domain = self.domain, error = %e, "cannot read the shared certificate from Redis")
            }
        }
    }

    /// Stage 2: sleeps until the certificate is due or the back-off has passed, at most until
    /// Redis should be looked at again (soon while nothing is served); true when it slept.
    async fn wait(&self) -> bool {
        let poll = match (self.vault(), &self.validity) {
            (None, _) => Duration::MAX,
            (Some(_), None) => OTHER_ORDERING,
            (Some(_), Some(_)) => VAULT_POLL,
        };
        if let Some(v) = &self.validity {
            if let Ok(wait) = renew_time(v).duration_since(SystemTime::now()) {
                tracing::debug!(domain = self.domain, ?wait, "next ACME renewal");
                tokio::time::sleep(wait.min(poll)).await;
                return true;
            }
        }
        if let Some(wait) = self
            .next_order
            .and_then(|t| t.checked_duration_since(Instant::now()))
        {
            tokio::time::sleep(wait.min(poll)).await;
            return true;
        }
        false
    }

    /// Stage 3: the right to order: `Some(None)` without Redis, `Some(lock)` with it; `None`
    /// when another instance orders, Redis failed, or a fresh certificate arrived meanwhile.
    async fn lock(&mut self) -> Option<Option<Lock>> {
        let Some(v) = self.cell.vault.clone() else {
            return Some(None);
        };
        let ttl = ORDER_TIMEOUT + Duration::from_secs(60);
        let lock = match v.lock(&format!("order:{}", self.domain), ttl).await {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                tracing::debug!(
                    domain = self.domain,
                    "another instance is ordering; waiting for its certificate"
                );
                tokio::time::sleep(OTHER_ORDERING).await;
                return None;
            }
            Err(e) => {
                self.failures += 1;
                let wait = backoff(self.failures, false);
                tracing::warn!(domain = self.domain, error = %e, retry_in = ?wait, "cannot take the order lock in Redis; the certificate in service stays");
                self.next_order = Some(Instant::now() + wait);
                return None;
            }
        };
        // Another instance may have finished just before the lock was free.
        if let Ok(Some(loaded)) = from_vault(&v, &self.cell.dir, &self.domain).await {
            let fresh = loaded
                .validity
                .is_some_and(|l| renew_time(&l) > SystemTime::now());
            if fresh && self.adopt(loaded) {
                v.release(lock).await;
                return None;
            }
        }
        Some(Some(lock))
    }

    /// Stage 4: one order, holding `lock` (released whatever happens).
    async fn order(&mut self, lock: Option<Lock>) {
        let challenges = &self.cell.cfg.challenges;
        let kind = challenges[self.choice % challenges.len().max(1)];
        let mut generation = 0;
        let result = match self.cell.get().await {
            Ok((account, g)) => {
                generation = g;
                let attempt = obtain(
                    &account,
                    &self.domain,
                    kind,
                    &self.store,
                    self.shared.as_ref(),
                );
                tokio::time::timeout(ORDER_TIMEOUT, attempt)
                    .await
                    .unwrap_or(Err(TlsError::AcmeTimeout(
                        "the CA did not finish the order in time",
                    )))
            }
            Err(e) => Err(e),
        };
        let kept = match &result {
            Ok((chain, key)) => Some(self.keep(chain, key).await),
            Err(_) => None,
        };
        if let (Some(v), Some(lock)) = (self.vault(), lock) {
            v.release(lock).await;
        }
        match (result, kept) {
            (_, Some(Err(e))) => {
                self.failures += 1;
                tracing::error!(domain = self.domain, error = %e, "the CA's certificate cannot be used");
                self.next_order = Some(Instant::now() + backoff(self.failures, false));
            }
            (Ok(_), _) => {
                self.failures = 0;
                self.next_order = None;
                self.retried_new_account = false;
                tracing::info!(
                    domain = self.domain,
                    challenge = ?kind,
                    valid_days = self.validity.map_or(0, |v| days_left(v.not_after)),
                    "certificate obtained from the ACME CA"
                );
                if self.validity.is_none() {
                    // Cannot tell its lifetime: check again in a day.
                    tokio::time::sleep(Duration::from_secs(86_400)).await;
                }
            }
            (Err(e), _) => {
                if e.acme_problem() == Some("accountDoesNotExist")
                    && self.cell.replace(generation).await
                    && !self.retried_new_account
                {
                    // Not this domain's failure: order again at once with the new account
                    // (once: a CA that keeps saying so gets the usual backoff).
                    self.retried_new_account = true;
                    tracing::info!(
                        domain = self.domain,
                        "ordering again with the new ACME account"
                    );
                    return;
                }
                self.failures += 1;
                self.choice += 1;
                let wait = backoff(self.failures, e.acme_problem() == Some("rateLimited"));
                let serving = self.store.has(&self.pattern);
                tracing::warn!(domain = self.domain, challenge = ?kind, error = %e, retry_in = ?wait, serving_previous = serving, "ACME order failed");
                // A stored certificate that is still valid stays in service meanwhile.
                self.next_order = Some(Instant::now() + wait);
            }
        }
    }

    /// A certificate the CA issued: in service, on disk, and in Redis for the others.
    async fn keep(&mut self, chain: &str, key: &str) -> Result<(), TlsError> {
        let loaded = pem::parse_pair(chain.as_bytes(), key.as_bytes())?;
        let (c, k) = cert_paths(&self.cell.dir, &self.domain);
        if let Err(e) = pem::write_private(&k, key.as_bytes())
            .and_then(|()| pem::write_private(&c, chain.as_bytes()))
        {
            tracing::error!(domain = self.domain, error = %e, "cannot store the certificate; it is served but will be ordered again after a restart");
        }
        if let Some(v) = self.vault() {
            let blob = [chain.as_bytes(), b"\0", key.as_bytes()].concat();
            if let Err(e) = v.put(&format!("cert:{}", self.domain), &blob).await {
                tracing::error!(domain = self.domain, error = %e, "cannot share the certificate through Redis; the other instances will order their own when theirs is due");
            }
        }
        self.store.set(&self.pattern, loaded.key);
        self.validity = loaded.validity;
        Ok(())
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
