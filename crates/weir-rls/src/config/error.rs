//! Why a config could not be loaded ([`ConfigError`]), and what was accepted with a
//! remark ([`ConfigWarning`]).

use core::fmt;

/// A config that could not be loaded: the file, the place in it (line and column,
/// when the problem has one), the field (`descriptors[1].rate_limit.unit`) and what
/// is wrong ([`ConfigErrorKind`]).
///
/// Its `Display` is `file:line:column: field: problem`:
///
/// ```
/// use weir_rls::{Config, ConfigErrorKind, LoadOptions};
///
/// let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n";
/// let err = Config::from_yaml("d.yaml", yaml, &LoadOptions::default()).unwrap_err();
/// assert_eq!(err.file(), "d.yaml");
/// assert_eq!(err.line(), Some(5));
/// assert_eq!(err.field(), "descriptors[0].rate_limit.unit");
/// assert!(matches!(err.kind(), ConfigErrorKind::InvalidUnit { .. }));
/// assert_eq!(
///     err.to_string(),
///     "d.yaml:5:13: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight' \
///      (second, minute, hour, day, week, month or year)"
/// );
/// ```
#[derive(Debug)]
pub struct ConfigError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    file: String,
    line: Option<u64>,
    column: Option<u64>,
    field: String,
    kind: ConfigErrorKind,
}

impl ConfigError {
    pub(crate) fn new(file: &str, kind: ConfigErrorKind) -> Self {
        Self(Box::new(Inner { file: file.to_owned(), line: None, column: None, field: String::new(), kind }))
    }

    pub(crate) fn at(mut self, line: u64, column: u64) -> Self {
        if line > 0 {
            self.0.line = Some(line);
            self.0.column = Some(column);
        }
        self
    }

    pub(crate) fn in_field(mut self, field: impl Into<String>) -> Self {
        self.0.field = field.into();
        self
    }

    /// The file (or source name) the problem is in.
    pub fn file(&self) -> &str {
        &self.0.file
    }

    /// The line (from 1), when the problem is at a place in the file.
    pub fn line(&self) -> Option<u64> {
        self.0.line
    }

    /// The column (from 1), when the problem is at a place in the file.
    pub fn column(&self) -> Option<u64> {
        self.0.column
    }

    /// The field, as a path from the file's root (`descriptors[0].rate_limit.unit`);
    /// empty when the problem is the whole file.
    pub fn field(&self) -> &str {
        &self.0.field
    }

    /// What is wrong.
    pub fn kind(&self) -> &ConfigErrorKind {
        &self.0.kind
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.0;
        f.write_str(&e.file)?;
        if let (Some(line), Some(column)) = (e.line, e.column) {
            write!(f, ":{line}:{column}")?;
        }
        if !e.field.is_empty() {
            write!(f, ": {}", e.field)?;
        }
        write!(f, ": {}", e.kind)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0.kind {
            ConfigErrorKind::Io(e) => Some(e),
            ConfigErrorKind::Quota(e) => Some(e),
            _ => None,
        }
    }
}

/// What is wrong with a config file. The first group are upstream's own load errors
/// (the same cases envoyproxy/ratelimit refuses), then weir's bounds, weir's
/// additions, and the cases where weir is stricter than upstream (see the crate
/// docs, "Where weir differs").
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file could not be read.
    Io(std::io::Error),
    /// The file is not UTF-8.
    NotUtf8,
    /// The file is not YAML (the parser's message; line and column on the error).
    Yaml(String),
    /// More than one YAML document in one file (`---` between them): a file holds
    /// one domain.
    MultipleDocuments,
    /// `domain` is missing or empty (this includes an empty file).
    EmptyDomain,
    /// A second file has a domain an earlier file has (and domains are not merged).
    DuplicateDomain {
        /// The domain.
        domain: String,
        /// The file that has it first.
        first_file: String,
    },
    /// A mapping key that is not a string (`1: x`, `yes: x`).
    KeyNotString {
        /// The key as written.
        key: String,
    },
    /// A key that no config file has anywhere.
    UnknownKey {
        /// The key.
        key: String,
    },
    /// A list of something other than mappings (`descriptors: [a]`).
    ListOfNonMaps,
    /// A value of the wrong type (`requests_per_unit: "5"`, `descriptors: x`).
    WrongType {
        /// What the field takes.
        expected: &'static str,
        /// What it has.
        found: &'static str,
    },
    /// A floating-point number, which upstream refuses anywhere (`value: 1.5`):
    /// quote it to make it a string.
    Float {
        /// The number as written.
        text: String,
    },
    /// An integer out of the field's range (`requests_per_unit: -1`).
    OutOfRange {
        /// The number as written.
        text: String,
        /// The largest accepted.
        max: u64,
    },
    /// A descriptor without `key`, or with an empty one.
    EmptyKey,
    /// Two descriptors at one level with the same `key` and `value` (upstream's
    /// composite key `key_value`, which also makes key `a_b` collide with key `a`
    /// and value `b`).
    DuplicateDescriptor {
        /// The composite key from the domain down (`domain.key_value`).
        composite_key: String,
    },
    /// `unit` is not one of second, minute, hour, day, week, month or year.
    InvalidUnit {
        /// The unit as written.
        unit: String,
    },
    /// `unlimited: true` with a unit.
    UnitWithUnlimited,
    /// A `replaces` entry without a name.
    EmptyReplaces,
    /// A rule that replaces its own name.
    ReplacesItself {
        /// The name.
        name: String,
    },
    /// `share_threshold: true` on a descriptor whose value has no `*`.
    ShareThresholdWithoutWildcard {
        /// The composite key (`key_value`).
        key: String,
    },
    /// The file is larger than [`Limits::max_file_bytes`](crate::Limits::max_file_bytes).
    FileTooLarge {
        /// Its size.
        bytes: u64,
        /// The bound.
        max: u64,
    },
    /// More files than [`Limits::max_files`](crate::Limits::max_files) in the directory.
    TooManyFiles {
        /// The bound.
        max: usize,
    },
    /// Descriptors nested deeper than [`Limits::max_depth`](crate::Limits::max_depth)
    /// (or YAML nested deeper than any config needs).
    TooDeep {
        /// The bound, in descriptor levels.
        max: usize,
    },
    /// More descriptors, across all files, than
    /// [`Limits::max_descriptors`](crate::Limits::max_descriptors) (or a document
    /// with more YAML nodes, aliases or text than that many could need).
    TooManyDescriptors {
        /// The bound.
        max: usize,
    },
    /// weir's `algorithm:` names no algorithm.
    InvalidAlgorithm {
        /// The name as written.
        name: String,
    },
    /// weir's `window:` is not a whole number of seconds written as `30s`, `5m`,
    /// `1h30m`, `1d` or `1w` (and not 0).
    InvalidWindow {
        /// The window as written.
        window: String,
    },
    /// Both `unit` and `window`: one says how long the window is.
    UnitAndWindow,
    /// `burst` on an algorithm other than `gcra` (a window's burst is its limit).
    BurstWithoutGcra {
        /// The rule's algorithm.
        algorithm: crate::Algorithm,
    },
    /// `burst` on a limit of 0 requests.
    BurstOnZeroLimit,
    /// weir's `algorithm`, `burst` or `window` on an `unlimited: true` rule.
    UnlimitedWith {
        /// The key.
        key: &'static str,
    },
    /// The limit cannot be enforced (a burst of 0, or one that takes longer than
    /// about 9 years to refill).
    Quota(weir_rl_core::QuotaError),
    /// (Strict mode) A key twice in one mapping; upstream keeps the last.
    DuplicateKey {
        /// The key.
        key: String,
        /// The line of its first occurrence.
        first_line: u64,
    },
    /// (Strict mode) A key upstream knows, at a level where it means nothing
    /// (`shadow_mode` inside `rate_limit`); upstream ignores it there.
    MisplacedKey {
        /// The key.
        key: String,
        /// Where it belongs.
        belongs: &'static str,
    },
    /// (Strict mode) A `unit` that is not valid on an `unlimited: true` rule; upstream
    /// ignores it.
    InvalidUnitWithUnlimited {
        /// The unit as written.
        unit: String,
    },
}

impl fmt::Display for ConfigErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "cannot read: {e}"),
            Self::NotUtf8 => f.write_str("the file is not UTF-8"),
            Self::Yaml(message) => write!(f, "not valid YAML: {message}"),
            Self::MultipleDocuments => f.write_str("more than one YAML document; a config file holds one domain"),
            Self::EmptyDomain => f.write_str("config file cannot have empty domain"),
            Self::DuplicateDomain { domain, first_file } => {
                write!(f, "duplicate domain '{domain}' in config file (first in {first_file})")
            }
            Self::KeyNotString { key } => write!(f, "key is not of type string: {key}"),
            Self::UnknownKey { key } => write!(f, "unknown key '{key}'"),
            Self::ListOfNonMaps => f.write_str("list of type other than map"),
            Self::WrongType { expected, found } => write!(f, "expected {expected}, found {found}"),
            Self::Float { text } => {
                write!(f, "floating-point number {text} is not accepted; quote it to make it a string")
            }
            Self::OutOfRange { text, max } => write!(f, "{text} is out of range (0 to {max})"),
            Self::EmptyKey => f.write_str("descriptor has empty key"),
            Self::DuplicateDescriptor { composite_key } => {
                write!(f, "duplicate descriptor composite key '{composite_key}'")
            }
            Self::InvalidUnit { unit } => {
                write!(f, "invalid rate limit unit '{unit}' (second, minute, hour, day, week, month or year)")
            }
            Self::UnitWithUnlimited => f.write_str("should not specify rate limit unit when unlimited"),
            Self::EmptyReplaces => f.write_str("should not have an empty replaces entry"),
            Self::ReplacesItself { name } => {
                write!(f, "replaces should not contain name of same descriptor ('{name}')")
            }
            Self::ShareThresholdWithoutWildcard { key } => write!(
                f,
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{key}'"
            ),
            Self::FileTooLarge { bytes, max } => write!(f, "the file has {bytes} bytes, more than the {max} accepted"),
            Self::TooManyFiles { max } => write!(f, "more than {max} config files"),
            Self::TooDeep { max } => write!(f, "descriptors nested deeper than {max} levels"),
            Self::TooManyDescriptors { max } => write!(f, "more than {max} descriptors"),
            Self::InvalidAlgorithm { name } => {
                write!(f, "invalid algorithm '{name}' (fixed_window, sliding_window, sliding_log or gcra)")
            }
            Self::InvalidWindow { window } => {
                write!(f, "invalid window '{window}' (a whole number of seconds such as 30s, 5m, 1h30m, 1d or 1w)")
            }
            Self::UnitAndWindow => f.write_str("both unit and window; give one"),
            Self::BurstWithoutGcra { algorithm } => {
                write!(f, "burst applies to the gcra algorithm only (this rule is {algorithm})")
            }
            Self::BurstOnZeroLimit => f.write_str("burst on a limit of 0 requests"),
            Self::UnlimitedWith { key } => write!(f, "{key} on an unlimited rule"),
            Self::Quota(e) => write!(f, "the limit cannot be enforced: {e}"),
            Self::DuplicateKey { key, first_line } => {
                write!(f, "duplicate key '{key}' (first on line {first_line})")
            }
            Self::MisplacedKey { key, belongs } => write!(f, "'{key}' belongs {belongs}"),
            Self::InvalidUnitWithUnlimited { unit } => {
                write!(f, "invalid rate limit unit '{unit}' on an unlimited rule (remove it)")
            }
        }
    }
}

/// Something a config was loaded with that does nothing, or not what its author may
/// expect: for logging.
///
/// ```
/// use weir_rls::{Config, LoadOptions};
///
/// let yaml = "domain: d\ndescriptors:\n  - key: k\n    metadata: {team: a}\n";
/// let config = Config::from_yaml("d.yaml", yaml, &LoadOptions::default())?;
/// let warning = &config.warnings()[0];
/// assert_eq!(warning.to_string(), "d.yaml:4:5: descriptors[0].metadata: ignored: weir-rls sends no dynamic metadata");
/// # Ok::<(), weir_rls::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    pub(crate) file: String,
    pub(crate) line: u64,
    pub(crate) column: u64,
    pub(crate) field: String,
    pub(crate) message: &'static str,
}

impl ConfigWarning {
    /// The file.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The line (from 1).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The field, as a path from the file's root.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is remarked.
    pub fn message(&self) -> &str {
        self.message
    }
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}: {}", self.file, self.line, self.column, self.field, self.message)
    }
}
