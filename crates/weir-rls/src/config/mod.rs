//! envoyproxy/ratelimit's YAML config files, read unchanged, checked as upstream
//! checks them, and compiled into the tree requests are matched against.
//!
//! # What is read
//!
//! [`Config::load`] takes a file or a directory. From a directory it reads every
//! regular file (symbolic links followed, so a Kubernetes ConfigMap mount works)
//! in it and in its subdirectories, whatever the extension, as upstream does, but
//! skips every file and directory whose name starts with `.` (editors' swap files,
//! and the `..data` directories of ConfigMap mounts, which would otherwise be read
//! twice). Files are read in the order of their paths, so an error that involves
//! two files (the same domain in both) always names the same two.
//!
//! Each file is one YAML document with one `domain`. A domain in two files is an
//! error, unless [`LoadOptions::merge_domains`] is set (upstream's
//! `MERGE_DOMAIN_CONFIG`): then the later file's top-level descriptors are added to
//! the domain.
//!
//! # Bounds
//!
//! [`Limits`] bounds what a load may cost: the bytes of a file, the number of files,
//! the nesting of descriptors and the number of descriptors across all files (and
//! the YAML nodes, aliases and text a document may expand to). Each bound crossed is
//! its own [`ConfigErrorKind`].

mod build;
mod error;
mod yaml;

pub use error::{ConfigError, ConfigErrorKind, ConfigWarning};

use crate::matching::DomainTree;
use crate::rule::{Algorithm, Rule, RuleId};
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Bounds on what loading a config may cost.
///
/// ```
/// use weir_rls::{Config, ConfigErrorKind, Limits, LoadOptions};
///
/// let options = LoadOptions::default().limits(Limits::default().max_descriptors(1));
/// let yaml = "domain: d\ndescriptors:\n  - key: a\n  - key: b\n";
/// let err = Config::from_yaml("d.yaml", yaml, &options).unwrap_err();
/// assert!(matches!(err.kind(), ConfigErrorKind::TooManyDescriptors { max: 1 }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// The most bytes a file may have. Default: 8 MiB.
    pub max_file_bytes: usize,
    /// The most files a directory (and its subdirectories) may hold. Default: 1 000.
    pub max_files: usize,
    /// The deepest descriptors may nest (a top-level descriptor is at depth 1).
    /// Default: 16.
    pub max_depth: usize,
    /// The most descriptors across all files. Default: 100 000.
    pub max_descriptors: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_file_bytes: 8 << 20, max_files: 1_000, max_depth: 16, max_descriptors: 100_000 }
    }
}

impl Limits {
    /// With this [`max_file_bytes`](Self::max_file_bytes).
    pub fn max_file_bytes(mut self, bytes: usize) -> Self {
        self.max_file_bytes = bytes;
        self
    }

    /// With this [`max_files`](Self::max_files).
    pub fn max_files(mut self, files: usize) -> Self {
        self.max_files = files;
        self
    }

    /// With this [`max_depth`](Self::max_depth).
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth;
        self
    }

    /// With this [`max_descriptors`](Self::max_descriptors).
    pub fn max_descriptors(mut self, descriptors: usize) -> Self {
        self.max_descriptors = descriptors;
        self
    }
}

/// How strictly a config file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compatibility {
    /// Refuse what envoyproxy/ratelimit silently accepts but cannot have been meant
    /// (the default): a key twice in one mapping (upstream keeps the last), a key at
    /// a level where it means nothing (`shadow_mode` inside `rate_limit`, which
    /// upstream ignores), and an invalid `unit` on an `unlimited` rule.
    #[default]
    Strict,
    /// Accept every file upstream accepts, as upstream reads it: the last of a
    /// duplicated key wins, misplaced keys and an unlimited rule's unit are ignored
    /// (each with a [`ConfigWarning`]).
    Upstream,
}

/// How a config is loaded.
///
/// ```
/// use weir_rls::{Algorithm, Compatibility, LoadOptions};
///
/// let options = LoadOptions::default()
///     .default_algorithm(Algorithm::Gcra)
///     .merge_domains(true)
///     .compatibility(Compatibility::Upstream);
/// assert_eq!(options.default_algorithm, Algorithm::Gcra);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LoadOptions {
    /// The bounds.
    pub limits: Limits,
    /// The algorithm of every rule without an `algorithm:` of its own, and of
    /// requests' `limit` overrides. Default: fixed windows, as upstream.
    pub default_algorithm: Algorithm,
    /// Whether files with the same domain are merged (upstream's
    /// `MERGE_DOMAIN_CONFIG`), rather than refused.
    pub merge_domains: bool,
    /// How strictly files are read.
    pub compatibility: Compatibility,
}

impl LoadOptions {
    /// With these bounds.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// With this service-wide default algorithm.
    pub fn default_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.default_algorithm = algorithm;
        self
    }

    /// Merging domains across files, or not.
    pub fn merge_domains(mut self, merge: bool) -> Self {
        self.merge_domains = merge;
        self
    }

    /// Reading files this strictly.
    pub fn compatibility(mut self, compatibility: Compatibility) -> Self {
        self.compatibility = compatibility;
        self
    }
}

/// A loaded config: every domain's descriptor tree, compiled for matching, and its
/// rules.
///
/// ```
/// use weir_rls::{Config, LoadOptions, RuleLimit, Unit};
///
/// let yaml = "
/// domain: messaging
/// descriptors:
///   - key: to_number
///     rate_limit:
///       unit: day
///       requests_per_unit: 100
/// ";
/// let config = Config::from_yaml("messaging.yaml", yaml, &LoadOptions::default())?;
/// let rule = &config.rules()[0];
/// assert_eq!(rule.full_key(), "messaging.to_number");
/// let RuleLimit::Limited(limit) = rule.limit() else { unreachable!() };
/// assert_eq!((limit.requests_per_unit(), limit.unit()), (100, Some(Unit::Day)));
/// # Ok::<(), weir_rls::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct Config {
    pub(crate) domains: crate::matching::NameMap<DomainTree>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) warnings: Vec<ConfigWarning>,
    pub(crate) files: Vec<String>,
    pub(crate) default_algorithm: Algorithm,
}

impl Config {
    /// Loads `path`: a file, or every file of a directory (see the module docs for
    /// which).
    pub fn load(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => Self::load_dir(path, options),
            Ok(_) => Self::load_file(path, options),
            Err(e) => Err(ConfigError::new(&path.display().to_string(), ConfigErrorKind::Io(e))),
        }
    }

    /// Loads one file.
    pub fn load_file(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = read_bounded(path, &name, options.limits.max_file_bytes)?;
        Self::from_sources([(name.as_str(), text.as_str())], options)
    }

    /// Loads every file of a directory and its subdirectories, in path order,
    /// skipping names that start with `.`.
    pub fn load_dir(dir: impl AsRef<Path>, options: &LoadOptions) -> Result<Config, ConfigError> {
        let files = dir_files(dir.as_ref(), &options.limits)?;
        let mut builder = build::Builder::new(options);
        for path in files {
            let name = path.display().to_string();
            let text = read_bounded(&path, &name, options.limits.max_file_bytes)?;
            builder.add_file(&name, &text)?;
        }
        Ok(builder.finish())
    }

    /// Reads one file's text; `name` is what errors call it.
    pub fn from_yaml(name: &str, yaml: &str, options: &LoadOptions) -> Result<Config, ConfigError> {
        Self::from_sources([(name, yaml)], options)
    }

    /// Reads several files' texts, each `(name, yaml)`, in order.
    ///
    /// ```
    /// use weir_rls::{Config, ConfigErrorKind, LoadOptions};
    ///
    /// let a = "domain: d\ndescriptors:\n  - key: a\n";
    /// let b = "domain: d\ndescriptors:\n  - key: b\n";
    /// let err = Config::from_sources([("a.yaml", a), ("b.yaml", b)], &LoadOptions::default()).unwrap_err();
    /// assert_eq!(err.to_string(), "b.yaml:1:9: domain: duplicate domain 'd' in config file (first in a.yaml)");
    ///
    /// let merged = Config::from_sources([("a.yaml", a), ("b.yaml", b)], &LoadOptions::default().merge_domains(true))?;
    /// assert_eq!(merged.domains().collect::<Vec<_>>(), ["d"]);
    /// # Ok::<(), weir_rls::ConfigError>(())
    /// ```
    pub fn from_sources<'a>(
        sources: impl IntoIterator<Item = (&'a str, &'a str)>,
        options: &LoadOptions,
    ) -> Result<Config, ConfigError> {
        let mut builder = build::Builder::new(options);
        for (name, yaml) in sources {
            if yaml.len() > options.limits.max_file_bytes {
                return Err(ConfigError::new(
                    name,
                    ConfigErrorKind::FileTooLarge {
                        bytes: yaml.len() as u64,
                        max: options.limits.max_file_bytes as u64,
                    },
                ));
            }
            builder.add_file(name, yaml)?;
        }
        Ok(builder.finish())
    }

    /// Every rule, in the order of the files and, within a file, of the descriptors.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rule `id`.
    pub fn rule(&self, id: RuleId) -> Option<&Rule> {
        self.rules.get(id.index())
    }

    /// The domains, in no particular order.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(|d| &**d)
    }

    /// Whether the config has `domain`.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// What the config was accepted with but does nothing (for logging).
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// The files read, in the order read.
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// The algorithm of rules without their own, and of `limit` overrides.
    pub fn default_algorithm(&self) -> Algorithm {
        self.default_algorithm
    }
}

/// Directories nested deeper than this under the config directory are not read
/// (this also ends a symbolic link loop).
const MAX_DIR_DEPTH: usize = 16;

/// The files [`Config::load`] reads from `path`, in the order it reads them: `path`
/// itself if it is a file; else the files of the directory and its subdirectories,
/// by path, skipping names that start with `.` (for checking each file on its own).
pub fn config_files(path: &Path, limits: &Limits) -> Result<Vec<PathBuf>, ConfigError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => dir_files(path, limits),
        Ok(_) => Ok(vec![path.to_owned()]),
        Err(e) => Err(ConfigError::new(&path.display().to_string(), ConfigErrorKind::Io(e))),
    }
}

/// The files a directory load reads, in path order.
fn dir_files(dir: &Path, limits: &Limits) -> Result<Vec<PathBuf>, ConfigError> {
    let mut files = Vec::new();
    walk(dir, 0, limits, &mut files)?;
    Ok(files)
}

fn walk(dir: &Path, depth: usize, limits: &Limits, files: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
    let io = |e| ConfigError::new(&dir.display().to_string(), ConfigErrorKind::Io(e));
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        entries.push(entry.path());
    }
    entries.sort();
    for path in entries {
        // Follows symbolic links; a dangling one is an error, as a missing file is.
        let meta = std::fs::metadata(&path)
            .map_err(|e| ConfigError::new(&path.display().to_string(), ConfigErrorKind::Io(e)))?;
        if meta.is_dir() {
            if depth < MAX_DIR_DEPTH {
                walk(&path, depth + 1, limits, files)?;
            }
        } else if meta.is_file() {
            if files.len() == limits.max_files {
                return Err(ConfigError::new(
                    &path.display().to_string(),
                    ConfigErrorKind::TooManyFiles { max: limits.max_files },
                ));
            }
            files.push(path);
        }
    }
    Ok(())
}

/// A file's text, refused past `max` bytes without reading more than `max + 1`.
fn read_bounded(path: &Path, name: &str, max: usize) -> Result<String, ConfigError> {
    let io = |e| ConfigError::new(name, ConfigErrorKind::Io(e));
    let file = std::fs::File::open(path).map_err(io)?;
    let too_large = |bytes: u64| ConfigError::new(name, ConfigErrorKind::FileTooLarge { bytes, max: max as u64 });
    if let Ok(meta) = file.metadata()
        && meta.len() > max as u64
    {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() > max {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|_| ConfigError::new(name, ConfigErrorKind::NotUtf8))
}
