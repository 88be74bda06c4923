//! [`Reloadable`]: the configuration in force, swapped for a new one without a
//! restart.

use crate::config::{Config, ConfigError, QuotaConfig, StoreFactory};
use crate::key::Key;
use crate::limits::Limits;
use arc_swap::ArcSwap;
use core::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use weir_rl_core::KeyedLimiter;

type SharedStore = Arc<dyn KeyedLimiter<Key> + Send + Sync>;

/// The stores a configuration built, by what they were built from.
type Stores = Vec<(QuotaConfig, SharedStore)>;

/// The [`Limits`] in force, and a handle that swaps in new ones: from a
/// configuration file, a [`Config`], or limits built by hand.
///
/// - **Atomic.** A request reads the limits in force once
///   ([`with`](Self::with), as an adapter does); a swap is one pointer store, so
///   each request sees the old limits or the new, never a mix.
/// - **In flight.** A request that started on the old limits finishes on them (a
///   pending decision keeps them alive); the old limits are dropped when the last
///   such request is done.
/// - **Counters kept.** A reload from a configuration reuses the store of every
///   quota whose configuration did not change (the same policy, limit and quota
///   names, algorithm, limit, window, burst and `max_keys`): its clients keep
///   what they spent. A quota that changed starts empty, as do throttles and tier
///   caches (its tiers' stores are kept as the quotas are).
/// - **Refused whole.** An invalid configuration is refused with its
///   [`ConfigError`] (naming the file, line and field), and the limits in force
///   go on serving.
///
/// Cheap to clone (an `Arc`): give a clone to the adapter and keep one to reload.
///
/// ```
/// use weir_http::{Config, Reloadable};
///
/// let v1 = "[[policy]]\nname = \"api\"\ndefault = true\n[[policy.limit]]\nkey = \"ip\"\n\
///           quotas = [{ algorithm = \"gcra\", limit = 100, window = \"1m\" }]\n";
/// let limits = Reloadable::from_config(Config::from_toml(v1)?)?;
/// // A new limit: in force for the next request.
/// limits.reload(Config::from_toml(&v1.replace("100", "50"))?)?;
/// // An invalid file is refused, naming it; the limits in force go on serving.
/// let path = std::env::temp_dir().join("weir-http-reload-doc.toml");
/// std::fs::write(&path, v1.replace("\"1m\"", "\"5 minutes\""))?;
/// let error = limits.reload_file(&path, |config| config).unwrap_err();
/// assert_eq!((error.file.as_deref(), error.line), (Some(path.as_path()), Some(6)));
/// assert!(error.to_string().contains("weir-http-reload-doc.toml: line 6"), "{error}");
/// limits.with(|limits| assert_eq!(limits.policies().count(), 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Reloadable {
    current: Arc<ArcSwap<Limits>>,
    stores: Arc<Mutex<Stores>>,
}

impl Reloadable {
    /// `limits` in force. (A later [`reload`](Self::reload) from a configuration
    /// keeps no counter of these: they were not built from one.)
    pub fn new(limits: Limits) -> Self {
        Self { current: Arc::new(ArcSwap::from_pointee(limits)), stores: Arc::new(Mutex::new(Vec::new())) }
    }

    /// The limits `config` builds, in force.
    pub fn from_config(config: Config) -> Result<Self, ConfigError> {
        let reloadable = Self::new(Limits::builder().build().map_err(|e| ConfigError::new(e.to_string()))?);
        reloadable.reload(config)?;
        Ok(reloadable)
    }

    /// Runs `f` on the limits in force now: what a request is checked against. (A
    /// request that waits keeps them: see [`load`](Self::load).)
    #[inline]
    pub fn with<T>(&self, f: impl FnOnce(&Arc<Limits>) -> T) -> T {
        f(&self.current.load())
    }

    /// The limits in force now, kept for as long as the caller holds them (a
    /// request that waits on a remote store finishes on the limits it started on).
    pub fn load(&self) -> Arc<Limits> {
        self.current.load_full()
    }

    /// Puts `limits` in force. (No counter is carried over: they were built
    /// elsewhere.)
    pub fn store(&self, limits: Limits) {
        self.current.store(Arc::new(limits));
    }

    /// Builds the limits of `config`, reusing the store of every quota whose
    /// configuration did not change, and puts them in force; or refuses `config`
    /// with its error, the limits in force unchanged.
    pub fn reload(&self, config: Config) -> Result<(), ConfigError> {
        let old: Stores = self.stores.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let built: Arc<Mutex<Stores>> = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&built);
        let config = config.wrap_factory(move |inner: Arc<StoreFactory>| -> Arc<StoreFactory> {
            Arc::new(move |quota: &QuotaConfig| {
                let store = match old.iter().find(|(q, _)| q == quota) {
                    Some((_, store)) => Arc::clone(store),
                    None => SharedStore::from(inner(quota)?),
                };
                record.lock().unwrap_or_else(PoisonError::into_inner).push((quota.clone(), Arc::clone(&store)));
                Ok(Box::new(store))
            })
        });
        let limits = config.limits()?;
        let built = core::mem::take(&mut *built.lock().unwrap_or_else(PoisonError::into_inner));
        *self.stores.lock().unwrap_or_else(PoisonError::into_inner) = built;
        self.current.store(Arc::new(limits));
        Ok(())
    }

    /// [`reload`](Self::reload) from the file at `path`, `prepare` giving what a
    /// file cannot say (the tier lookup, a clock): the configuration a server
    /// re-reads on `SIGHUP`, say. An error names the file.
    pub fn reload_file(
        &self,
        path: impl AsRef<Path>,
        prepare: impl FnOnce(Config) -> Config,
    ) -> Result<(), ConfigError> {
        let path = path.as_ref();
        self.reload(prepare(Config::from_file(path)?)).map_err(|e| e.in_file(path))
    }
}

impl fmt::Debug for Reloadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloadable").field("current", &*self.current.load()).finish_non_exhaustive()
    }
}
