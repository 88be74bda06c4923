//! [`Reloadable`]: the generation in force (config and decider), swapped for a new
//! one when the config files change, without a restart; and [`RuleStores`], the
//! per-rule stores a new generation takes over from the old.

use crate::config::{Config, ConfigError, LoadOptions};
use crate::rule::{RateLimit, Rule};
use crate::service::{ConfigSource, Generation};
use crate::stats::{CONFIG_LOAD_ERROR, CONFIG_LOAD_SUCCESS};
use crate::{Decide, RuleLimit};
use arc_swap::ArcSwapOption;
use core::fmt;
use core::time::Duration;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Builds the decider of a new config, given the decider of the generation it
/// replaces (to take over the stores of rules that count alike: see
/// [`RuleStores`]).
pub type BuildDecider<D> = dyn Fn(&Arc<Config>, Option<&D>) -> Result<D, String> + Send + Sync;

/// The generation in force, loaded from a config file or directory, and reloaded
/// from it on demand ([`reload`](Self::reload): on `SIGHUP` in the binary) or when
/// it changes ([`watch`](Self::watch)).
///
/// - **Atomic.** A request reads the generation once; a reload builds the new one
///   whole, then swaps one pointer: each request sees the old or the new, never a
///   mix.
/// - **In flight.** A request that started on the old generation finishes on it
///   (it holds it); the old one is dropped when the last such request is done.
/// - **Refused whole.** A config with an error is refused with its
///   [`ConfigError`] (file, line and field), counted in
///   `ratelimit_service_config_load_error`, and the generation in force goes on
///   serving. A config accepted is counted in
///   `ratelimit_service_config_load_success`.
/// - **Counters kept.** The decider is built by a function given the old
///   generation's decider, so that it can keep the stores of rules that count
///   alike ([`RuleStores`]).
///
/// ```
/// use std::sync::Arc;
/// use weir_rls::{Check, Decide, DecideError, LoadOptions, Reloadable, RlsService};
/// # use weir_rl_core::{Decision, Snapshot};
/// # #[derive(Debug)]
/// # struct AdmitAll;
/// # impl Decide for AdmitAll {
/// #     async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, DecideError> {
/// #         Ok(checks.iter().map(|_| Decision::allowed(Snapshot::new(1, 1, 0))).collect())
/// #     }
/// # }
///
/// let dir = std::env::temp_dir().join(format!("weir-rls-reload-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// std::fs::write(dir.join("d.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")?;
/// let live = Arc::new(Reloadable::load(&dir, LoadOptions::default(), |_, _| Ok(AdmitAll))?);
/// let service = RlsService::with_source(Arc::clone(&live));
///
/// // A bad edit is refused, naming the file and line; the old config serves on.
/// std::fs::write(dir.join("d.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n")?;
/// let error = live.reload().unwrap_err();
/// assert!(error.to_string().contains("d.yaml:4:"), "{error}");
/// assert!(live.config().is_some_and(|c| c.has_domain("d")));
/// # std::fs::remove_dir_all(&dir)?;
/// # let _ = service;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Reloadable<D> {
    current: ArcSwapOption<Generation<D>>,
    path: PathBuf,
    options: LoadOptions,
    build: Box<BuildDecider<D>>,
    /// Held while a reload builds and swaps, so that each reload's decider is built
    /// from the one it replaces.
    reloading: Mutex<()>,
    load_success: metrics::Counter,
    load_error: metrics::Counter,
}

impl<D> fmt::Debug for Reloadable<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloadable").field("path", &self.path).field("options", &self.options).finish_non_exhaustive()
    }
}

/// Why a config was not put in force.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReloadError {
    /// The config files have an error.
    Config(ConfigError),
    /// The decider could not be built for the config (a store could not be made).
    Build(String),
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => e.fmt(f),
            Self::Build(message) => write!(f, "the counters could not be set up: {message}"),
        }
    }
}

impl std::error::Error for ReloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            Self::Build(_) => None,
        }
    }
}

impl From<ConfigError> for ReloadError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl<D: Decide> Reloadable<D> {
    /// Loads `path` (a file, or a directory: see [`Config::load`]) and builds its
    /// decider; an error if either fails (counted as a failed load).
    pub fn load(
        path: impl Into<PathBuf>,
        options: LoadOptions,
        build: impl Fn(&Arc<Config>, Option<&D>) -> Result<D, String> + Send + Sync + 'static,
    ) -> Result<Self, ReloadError> {
        let this = Self {
            current: ArcSwapOption::empty(),
            path: path.into(),
            options,
            build: Box::new(build),
            reloading: Mutex::new(()),
            load_success: metrics::counter!(CONFIG_LOAD_SUCCESS),
            load_error: metrics::counter!(CONFIG_LOAD_ERROR),
        };
        this.reload()?;
        Ok(this)
    }

    /// Loads the config again and puts it in force; on error, counts it and keeps
    /// the generation in force.
    pub fn reload(&self) -> Result<Arc<Config>, ReloadError> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(PoisonError::into_inner);
        let result = self.build_next();
        match &result {
            Ok(generation) => {
                self.load_success.increment(1);
                self.current.store(Some(Arc::clone(generation)));
            }
            Err(_) => self.load_error.increment(1),
        }
        result.map(|generation| Arc::clone(generation.config()))
    }

    fn build_next(&self) -> Result<Arc<Generation<D>>, ReloadError> {
        let config = Arc::new(Config::load(&self.path, &self.options)?);
        let previous = self.current.load_full();
        let decider =
            (self.build)(&config, previous.as_deref().map(Generation::decider)).map_err(ReloadError::Build)?;
        Ok(Arc::new(Generation::new(config, decider)))
    }

    /// The config in force.
    pub fn config(&self) -> Option<Arc<Config>> {
        self.current.load_full().map(|generation| Arc::clone(generation.config()))
    }

    /// The config file or directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl<D: Decide> ConfigSource for Arc<Reloadable<D>> {
    type Decider = D;

    fn current(&self) -> Option<Arc<Generation<D>>> {
        self.current.load_full()
    }
}

impl<D: Decide + 'static> Reloadable<D> {
    /// Reloads whenever the config path changes: a file written, created, removed or
    /// renamed in the directory (recursively), the file itself replaced, or the
    /// path, a symbolic link, pointed elsewhere (a Kubernetes ConfigMap's update);
    /// once the changes have been quiet for `debounce` (a burst of writes is one
    /// reload). Each outcome is passed to `on_reload` (to log it). Stops when the
    /// returned [`Watch`] is dropped. Must be called within a tokio runtime.
    pub fn watch(
        self: &Arc<Self>,
        debounce: Duration,
        on_reload: impl Fn(Result<Arc<Config>, ReloadError>) + Send + Sync + 'static,
    ) -> Result<Watch, notify::Error> {
        use notify::Watcher as _;
        let changed = Arc::new(tokio::sync::Notify::new());
        let path = std::path::absolute(&self.path).unwrap_or_else(|_| self.path.clone());
        let signal = Arc::clone(&changed);
        let watched = path.clone();
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            // Only changes at or under the config path: the parent directory is
            // watched for the path's own replacement, not for its other files.
            if let Ok(event) = event
                && !matches!(event.kind, notify::EventKind::Access(_))
                && event.paths.iter().any(|p| p.starts_with(&watched))
            {
                signal.notify_one();
            }
        })?;
        watch_paths(&mut watcher, &path)?;
        let watcher = Arc::new(Mutex::new(watcher));
        let this = Arc::clone(self);
        let rewatch = Arc::clone(&watcher);
        let task = tokio::spawn(async move {
            loop {
                changed.notified().await;
                // Quiet for `debounce`: each change meanwhile starts the wait again.
                while tokio::time::timeout(debounce, changed.notified()).await.is_ok() {}
                let reloader = Arc::clone(&this);
                let outcome = match tokio::task::spawn_blocking(move || reloader.reload()).await {
                    Ok(outcome) => outcome,
                    Err(e) => Err(ReloadError::Build(format!("the reload stopped: {e}"))),
                };
                // A directory swapped for another (a symbolic link pointed
                // elsewhere) is watched anew.
                let mut watcher = rewatch.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = watcher.unwatch(&path);
                let _ = watch_target(&mut *watcher, &path);
                drop(watcher);
                on_reload(outcome);
            }
        });
        Ok(Watch { _watcher: watcher, task })
    }
}

/// Watches `path`'s target (recursively, if a directory) and its parent directory
/// (where a file is replaced by a rename, and a symbolic link re-pointed).
fn watch_paths(watcher: &mut impl notify::Watcher, path: &Path) -> Result<(), notify::Error> {
    watch_target(watcher, path)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        watcher.watch(parent, notify::RecursiveMode::NonRecursive)?;
    }
    Ok(())
}

fn watch_target(watcher: &mut impl notify::Watcher, path: &Path) -> Result<(), notify::Error> {
    let mode = if path.is_dir() { notify::RecursiveMode::Recursive } else { notify::RecursiveMode::NonRecursive };
    watcher.watch(path, mode)
}

/// Watching a config for changes ([`Reloadable::watch`]); dropping it stops.
pub struct Watch {
    _watcher: Arc<Mutex<notify::RecommendedWatcher>>,
    task: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What makes two rules count alike ([`Rule::counts_like`]): their domain, their
/// place in the tree and their limit (window, algorithm, burst).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CountsAlike {
    domain: Box<str>,
    key_path: Box<str>,
    limit: RateLimit,
}

impl CountsAlike {
    fn of(rule: &Rule, limit: RateLimit) -> Self {
        Self { domain: rule.domain().into(), key_path: rule.key_path().into(), limit }
    }
}

/// One store per rule with a limit, kept by what makes two rules count alike
/// ([`Rule::counts_like`]), so that the next config's rules that count as before
/// take over their stores, and their clients keep what they spent.
///
/// ```
/// use weir_rls::{Config, LoadOptions, RuleStores};
///
/// let v1 = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
/// let v2 = v1.replacen("requests_per_unit: 5", "requests_per_unit: 6", 1); // a changes, b does not
/// let options = LoadOptions::default();
/// let (c1, c2) = (Config::from_yaml("d.yaml", v1, &options)?, Config::from_yaml("d.yaml", &v2, &options)?);
/// let mut made = 0;
/// let mut make = |_: &weir_rls::Rule, _: &weir_rls::RateLimit| -> Result<u32, String> { made += 1; Ok(made) };
/// let s1 = RuleStores::build(&c1, None, &mut make)?;
/// let s2 = RuleStores::build(&c2, Some(&s1), &mut make)?;
/// let store = |s: &RuleStores<u32>, rule: &weir_rls::Rule| **s.get(rule).unwrap();
/// assert_eq!((store(&s1, &c1.rules()[0]), store(&s1, &c1.rules()[1])), (1, 2));
/// assert_eq!((store(&s2, &c2.rules()[0]), store(&s2, &c2.rules()[1])), (3, 2)); // b's store taken over
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RuleStores<S> {
    /// By [`RuleId`](crate::RuleId) index; `None` for unlimited rules and limits of 0.
    by_rule: Box<[Option<Arc<S>>]>,
    by_identity: HashMap<CountsAlike, Arc<S>>,
}

impl<S> RuleStores<S> {
    /// The stores of `config`'s rules: taken over from `previous` for rules that
    /// count as a rule there did, else made by `make` (given the rule and its
    /// limit). Rules without a counter (unlimited, a limit of 0) have none.
    pub fn build<E>(
        config: &Config,
        previous: Option<&RuleStores<S>>,
        mut make: impl FnMut(&Rule, &RateLimit) -> Result<S, E>,
    ) -> Result<Self, E> {
        let mut by_rule = Vec::with_capacity(config.rules().len());
        let mut by_identity = HashMap::new();
        for rule in config.rules() {
            let RuleLimit::Limited(limit) = *rule.limit() else {
                by_rule.push(None);
                continue;
            };
            if limit.quota().is_none() {
                by_rule.push(None);
                continue;
            }
            let identity = CountsAlike::of(rule, limit);
            let store = match previous.and_then(|p| p.by_identity.get(&identity)) {
                Some(store) => Arc::clone(store),
                None => Arc::new(make(rule, &limit)?),
            };
            by_identity.insert(identity, Arc::clone(&store));
            by_rule.push(Some(store));
        }
        Ok(Self { by_rule: by_rule.into_boxed_slice(), by_identity })
    }

    /// The store of `rule` (a rule of the config these stores were built for).
    pub fn get(&self, rule: &Rule) -> Option<&Arc<S>> {
        self.by_rule.get(rule.id().index()).and_then(Option::as_ref)
    }

    /// The number of stores.
    pub fn len(&self) -> usize {
        self.by_identity.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_identity.is_empty()
    }
}
