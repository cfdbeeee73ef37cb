//! Shared certificates: the ACME account, certificates and their keys kept in Redis,
//! encrypted at rest (AES-256-GCM under a key hashed from `redis_encryption_key`, the key name
//! bound in as associated data), a lock with expiry so one instance orders while the others
//! wait, and the challenge answers every instance can serve.
//!
//! Keys: `PREFIX acme:CA:NAME` (encrypted blobs), `PREFIX acme:CA:lock:NAME` (locks),
//! `PREFIX acme:http:TOKEN` and `PREFIX acme:alpn:DOMAIN` (challenge answers, public by
//! nature, kept for [`CHALLENGE_TTL`]).

use std::time::Duration;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};

use crate::{Shared, SharedError};

/// Longest wait for Redis in certificate work (none of it is on the request path).
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long a challenge answer stays in Redis.
pub const CHALLENGE_TTL: Duration = Duration::from_secs(600);
/// What encrypted blobs start with (and the format's version).
const MAGIC: &[u8] = b"rampart-aead-1:";

/// Releases a lock only if it is still the holder's (it may have expired and been taken).
const UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// One CA's account and certificates in Redis.
pub struct Vault {
    shared: Shared,
    key: LessSafeKey,
    /// `PREFIX acme:CA:`
    scope: String,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault").field("scope", &self.scope).finish()
    }
}

/// A lock held until [`Lock::release`] or its expiry.
#[derive(Debug)]
pub struct Lock {
    key: String,
    token: String,
}

impl Vault {
    /// The vault of the CA named `ca` (a file-name-safe form of its directory URL); `None`
    /// when `redis_certificates` is off or there is no encryption key.
    pub fn new(shared: &Shared, ca: &str) -> Option<Vault> {
        let cfg = shared.config();
        if !cfg.certificates {
            return None;
        }
        let secret = cfg.encryption_key.as_ref()?;
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &secret.0);
        let key = UnboundKey::new(&AES_256_GCM, digest.as_ref()).ok()?;
        Some(Vault {
            shared: shared.clone(),
            key: LessSafeKey::new(key),
            scope: shared.key(&format!("acme:{ca}:")),
        })
    }

    fn name(&self, name: &str) -> String {
        format!("{}{name}", self.scope)
    }

    /// The decrypted value of `name`, if Redis holds one. A value that does not decrypt (another
    /// key, or not rampart's) is an error.
    pub async fn get(&self, name: &str) -> Result<Option<Vec<u8>>, SharedError> {
        let key = self.name(name);
        let blob: Option<Vec<u8>> = self
            .shared
            .call_with(TIMEOUT, "certificate store", {
                let key = key.clone();
                move |mut c| async move { redis::cmd("GET").arg(key).query_async(&mut c).await }
            })
            .await?;
        blob.map(|b| self.open(&key, b)).transpose()
    }

    /// Stores `value` under `name`, encrypted.
    pub async fn put(&self, name: &str, value: &[u8]) -> Result<(), SharedError> {
        let key = self.name(name);
        let blob = self.seal(&key, value)?;
        self.shared
            .call_with(TIMEOUT, "certificate store", |mut c| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(blob)
                    .query_async(&mut c)
                    .await
            })
            .await
    }

    fn seal(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, SharedError> {
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).map_err(|_| SharedError::Unexpected("no randomness"))?;
        let mut data = value.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(key.as_bytes()),
                &mut data,
            )
            .map_err(|_| SharedError::Unexpected("encryption failed"))?;
        Ok([MAGIC, &nonce[..], &data].concat())
    }

    fn open(&self, key: &str, blob: Vec<u8>) -> Result<Vec<u8>, SharedError> {
        let undecryptable = SharedError::Unexpected(
            "a value in Redis does not decrypt: is redis_encryption_key the same on every instance?",
        );
        let rest = blob.strip_prefix(MAGIC).ok_or(SharedError::Unexpected(
            "a value in Redis was not written by rampart",
        ))?;
        if rest.len() < NONCE_LEN {
            return Err(undecryptable);
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce)
            .map_err(|_| SharedError::Unexpected("bad nonce"))?;
        let mut data = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(key.as_bytes()), &mut data)
            .map_err(|_| undecryptable)?;
        Ok(plain.to_vec())
    }

    /// Takes the lock `name` for `ttl` unless another instance holds it (`None` then).
    pub async fn lock(&self, name: &str, ttl: Duration) -> Result<Option<Lock>, SharedError> {
        let key = self.name(&format!("lock:{name}"));
        let token = format!("{}/{:x}", self.shared.instance(), random());
        let (k, t) = (key.clone(), token.clone());
        let taken: Option<String> = self
            .shared
            .call_with(TIMEOUT, "certificate lock", move |mut c| async move {
                redis::cmd("SET")
                    .arg(k)
                    .arg(t)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl.as_millis() as u64)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(taken.map(|_| Lock { key, token }))
    }

    /// Gives a lock back (no-op if it expired meanwhile and another instance took it).
    pub async fn release(&self, lock: Lock) {
        let script = redis::Script::new(UNLOCK);
        let result = self
            .shared
            .call_with(TIMEOUT, "certificate lock", |mut c| async move {
                script
                    .key(&lock.key)
                    .arg(&lock.token)
                    .invoke_async::<i64>(&mut c)
                    .await
            })
            .await;
        if let Err(e) = result {
            tracing::debug!(error = %e, "lock not released; it expires on its own");
        }
    }
}

impl Shared {
    /// Publishes an HTTP-01 answer so that any instance can serve it.
    pub async fn set_http_challenge(
        &self,
        token: &str,
        key_authorization: &str,
    ) -> Result<(), SharedError> {
        self.set_challenge(
            format!("acme:http:{token}"),
            key_authorization.as_bytes().to_vec(),
        )
        .await
    }

    /// The HTTP-01 answer for `token` another instance published.
    pub async fn http_challenge(&self, token: &str) -> Result<Option<String>, SharedError> {
        let v = self.challenge(format!("acme:http:{token}")).await?;
        Ok(v.and_then(|b| String::from_utf8(b).ok()))
    }

    /// Publishes a TLS-ALPN-01 answer (the key authorization's digest) for `domain`.
    pub async fn set_alpn_challenge(&self, domain: &str, digest: &[u8]) -> Result<(), SharedError> {
        self.set_challenge(format!("acme:alpn:{domain}"), digest.to_vec())
            .await
    }

    /// The TLS-ALPN-01 digest for `domain` another instance published.
    pub async fn alpn_challenge(&self, domain: &str) -> Result<Option<Vec<u8>>, SharedError> {
        self.challenge(format!("acme:alpn:{domain}")).await
    }

    async fn set_challenge(&self, name: String, value: Vec<u8>) -> Result<(), SharedError> {
        let key = self.key(&name);
        self.call_with(TIMEOUT, "ACME challenge", |mut c| async move {
            redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("PX")
                .arg(CHALLENGE_TTL.as_millis() as u64)
                .query_async(&mut c)
                .await
        })
        .await
    }

    async fn challenge(&self, name: String) -> Result<Option<Vec<u8>>, SharedError> {
        let key = self.key(&name);
        self.call_with(
            Duration::from_millis(500),
            "ACME challenge",
            |mut c| async move { redis::cmd("GET").arg(key).query_async(&mut c).await },
        )
        .await
    }
}

fn random() -> u64 {
    let mut b = [0u8; 8];
    let _ = aws_lc_rs::rand::fill(&mut b);
    u64::from_le_bytes(b)
}
