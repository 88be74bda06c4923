//! From a file's YAML tree to rules and a compiled domain tree, with upstream's
//! checks (`loadDescriptors` and `validateYamlKeys` in envoyproxy/ratelimit's
//! `src/config/config_impl.go`, restated, not copied) and weir's.

use super::error::{ConfigError, ConfigErrorKind, ConfigWarning};
use super::yaml::{self, Node, Value};
use super::{Compatibility, Config, LoadOptions};
use crate::matching::{DomainTree, Level, NodeValue, Pattern, TreeNode};
use crate::rule::{Algorithm, RateLimit, Rule, RuleId, RuleLimit, Unit, parse_window};
use std::collections::{HashMap, HashSet};

/// Every key upstream accepts, at any level (its one flat allow-list).
const UPSTREAM_KEYS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// weir's keys, all a rate_limit's.
const WEIR_KEYS: [&str; 3] = ["algorithm", "burst", "window"];

/// Where each key belongs, for the strict mode's "misplaced key" error.
fn belongs(key: &str) -> &'static str {
    match key {
        "domain" => "at the top of the file",
        "key" | "value" | "descriptors" | "rate_limit" | "shadow_mode" | "quota_mode" | "detailed_metric"
        | "value_to_metric" | "share_threshold" | "metadata" => "in a descriptor",
        "unit" | "requests_per_unit" | "unlimited" | "replaces" => "in a rate_limit",
        // `name` is a rate_limit's and a replaces entry's.
        _ => "in a rate_limit or a replaces entry",
    }
}

pub(crate) struct Builder<'o> {
    options: &'o LoadOptions,
    domains: crate::matching::NameMap<DomainTree>,
    /// The file each domain was first read from.
    domain_files: HashMap<Box<str>, String>,
    rules: Vec<Rule>,
    warnings: Vec<ConfigWarning>,
    files: Vec<String>,
    descriptors: usize,
}

impl<'o> Builder<'o> {
    pub(crate) fn new(options: &'o LoadOptions) -> Self {
        Self {
            options,
            domains: crate::matching::NameMap::default(),
            domain_files: HashMap::new(),
            rules: Vec::new(),
            warnings: Vec::new(),
            files: Vec::new(),
            descriptors: 0,
        }
    }

    pub(crate) fn finish(self) -> Config {
        Config {
            domains: self.domains,
            rules: self.rules,
            warnings: self.warnings,
            files: self.files,
            default_algorithm: self.options.default_algorithm,
        }
    }

    /// Reads one file into the config. On error the builder is left as it is and
    /// must be dropped: a config with an error is never used.
    pub(crate) fn add_file(&mut self, file: &str, source: &str) -> Result<(), ConfigError> {
        let root = yaml::parse(file, source, &self.options.limits)?;
        let mut cx = FileCx { file, source, strict: self.options.compatibility == Compatibility::Strict, b: self };
        cx.root(&root)?;
        self.files.push(file.to_owned());
        Ok(())
    }
}

/// One file being read.
struct FileCx<'b, 'o, 's> {
    file: &'s str,
    source: &'s str,
    strict: bool,
    b: &'b mut Builder<'o>,
}

/// A rate_limit, read.
struct ParsedLimit {
    limit: RuleLimit,
    name: Option<Box<str>>,
    replaces: Box<[Box<str>]>,
}

impl FileCx<'_, '_, '_> {
    fn error(&self, node: &Node, field: &str, kind: ConfigErrorKind) -> ConfigError {
        let (line, column) = yaml::place(node);
        ConfigError::new(self.file, kind).at(line, column).in_field(field)
    }

    fn warn(&mut self, node: &Node, field: &str, message: &'static str) {
        let (line, column) = yaml::place(node);
        self.b.warnings.push(ConfigWarning {
            file: self.file.to_owned(),
            line,
            column,
            field: field.to_owned(),
            message,
        });
    }

    /// A mapping's entries as `(key, value)`, keys checked to be strings, and, in
    /// strict mode, to be unique.
    fn entries<'n>(&self, node: &'n Node, field: &str) -> Result<Vec<(&'n str, &'n Node, &'n Node)>, ConfigError> {
        let Value::Map(entries) = &node.value else {
            return Err(self.error(
                node,
                field,
                ConfigErrorKind::WrongType { expected: "a mapping", found: node.value.kind() },
            ));
        };
        let mut out: Vec<(&str, &Node, &Node)> = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let Value::Str(name) = &key.value else {
                let text = yaml::raw_text(self.source, key).unwrap_or("?").to_owned();
                return Err(self.error(key, field, ConfigErrorKind::KeyNotString { key: text }));
            };
            if self.strict
                && let Some((_, first, _)) = out.iter().find(|(seen, _, _)| *seen == name)
            {
                let kind = ConfigErrorKind::DuplicateKey { key: name.clone(), first_line: yaml::place(first).0 };
                return Err(self.error(key, &join(field, name), kind));
            }
            out.push((name, key, value));
        }
        Ok(out)
    }

    /// A key that is not one of this level's: misplaced (an upstream key of another
    /// level) or unknown.
    fn other_key(&mut self, key: &str, key_node: &Node, value: &Node, field: &str) -> Result<(), ConfigError> {
        let field = join(field, key);
        if WEIR_KEYS.contains(&key) {
            let kind = ConfigErrorKind::MisplacedKey { key: key.to_owned(), belongs: "in a rate_limit" };
            return Err(self.error(key_node, &field, kind));
        }
        if !UPSTREAM_KEYS.contains(&key) {
            return Err(self.error(key_node, &field, ConfigErrorKind::UnknownKey { key: key.to_owned() }));
        }
        if self.strict {
            let kind = ConfigErrorKind::MisplacedKey { key: key.to_owned(), belongs: belongs(key) };
            return Err(self.error(key_node, &field, kind));
        }
        // Upstream checks the keys of everything, wherever it is, then ignores it.
        if key != "metadata" {
            self.check_keys(value, &field)?;
        }
        self.warn(key_node, &field, "ignored at this level (as envoyproxy/ratelimit ignores it)");
        Ok(())
    }

    /// Upstream's check of an ignored value: string keys from the allow-list,
    /// lists of mappings, no floats.
    fn check_keys(&self, node: &Node, field: &str) -> Result<(), ConfigError> {
        match &node.value {
            Value::Map(entries) => {
                for (key, value) in entries {
                    let Value::Str(name) = &key.value else {
                        let text = yaml::raw_text(self.source, key).unwrap_or("?").to_owned();
                        return Err(self.error(key, field, ConfigErrorKind::KeyNotString { key: text }));
                    };
                    let inner = join(field, name);
                    if !UPSTREAM_KEYS.contains(&name.as_str()) {
                        return Err(self.error(key, &inner, ConfigErrorKind::UnknownKey { key: name.clone() }));
                    }
                    if name != "metadata" {
                        self.check_keys(value, &inner)?;
                    }
                }
                Ok(())
            }
            Value::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    let inner = format!("{field}[{i}]");
                    if !matches!(item.value, Value::Map(_)) {
                        return Err(self.error(item, &inner, ConfigErrorKind::ListOfNonMaps));
                    }
                    self.check_keys(item, &inner)?;
                }
                Ok(())
            }
            Value::Float => Err(self.float(node, field)),
            _ => Ok(()),
        }
    }

    fn float(&self, node: &Node, field: &str) -> ConfigError {
        let text = yaml::raw_text(self.source, node).unwrap_or("?").to_owned();
        self.error(node, field, ConfigErrorKind::Float { text })
    }

    /// A string field: a string, or a plain scalar's text (`value: 123` is "123",
    /// `value: yes` is "yes"); null is "".
    fn string(&self, node: &Node, field: &str) -> Result<String, ConfigError> {
        match &node.value {
            Value::Str(s) => Ok(s.clone()),
            Value::Null => Ok(String::new()),
            Value::Bool(_) | Value::Int(_) => match yaml::raw_text(self.source, node) {
                Some(text) => Ok(text.to_owned()),
                None => Err(self.error(
                    node,
                    field,
                    ConfigErrorKind::WrongType { expected: "a string", found: node.value.kind() },
                )),
            },
            Value::Float => Err(self.float(node, field)),
            Value::Seq(_) | Value::Map(_) => Err(self.error(
                node,
                field,
                ConfigErrorKind::WrongType { expected: "a string", found: node.value.kind() },
            )),
        }
    }

    /// A boolean field (YAML 1.1 spellings: `true`, `yes`, `on`...); null is false.
    fn boolean(&self, node: &Node, field: &str) -> Result<bool, ConfigError> {
        match &node.value {
            Value::Bool(b) => Ok(*b),
            Value::Null => Ok(false),
            Value::Float => Err(self.float(node, field)),
            _ => Err(self.error(
                node,
                field,
                ConfigErrorKind::WrongType { expected: "true or false", found: node.value.kind() },
            )),
        }
    }

    /// An unsigned 32-bit field; null is 0.
    fn u32(&self, node: &Node, field: &str) -> Result<u32, ConfigError> {
        match &node.value {
            Value::Int(i) => u32::try_from(*i).map_err(|_| {
                let text = yaml::raw_text(self.source, node).map_or_else(|| i.to_string(), str::to_owned);
                self.error(node, field, ConfigErrorKind::OutOfRange { text, max: u64::from(u32::MAX) })
            }),
            Value::Null => Ok(0),
            Value::Float => Err(self.float(node, field)),
            _ => Err(self.error(
                node,
                field,
                ConfigErrorKind::WrongType { expected: "an integer", found: node.value.kind() },
            )),
        }
    }

    /// A list of mappings (null is an empty list).
    fn list<'n>(&self, node: &'n Node, field: &str) -> Result<&'n [Node], ConfigError> {
        match &node.value {
            Value::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    if !matches!(item.value, Value::Map(_)) {
                        return Err(self.error(item, &format!("{field}[{i}]"), ConfigErrorKind::ListOfNonMaps));
                    }
                }
                Ok(items)
            }
            Value::Null => Ok(&[]),
            Value::Float => Err(self.float(node, field)),
            _ => Err(self.error(
                node,
                field,
                ConfigErrorKind::WrongType { expected: "a list", found: node.value.kind() },
            )),
        }
    }

    fn root(&mut self, root: &Node) -> Result<(), ConfigError> {
        if matches!(root.value, Value::Null) {
            return Err(self.error(root, "domain", ConfigErrorKind::EmptyDomain));
        }
        let mut domain: Option<(String, &Node)> = None;
        let mut descriptors: Option<(&Node, &Node)> = None;
        for (key, key_node, value) in self.entries(root, "")? {
            match key {
                "domain" => domain = Some((self.string(value, "domain")?, value)),
                "descriptors" => descriptors = Some((key_node, value)),
                _ => self.other_key(key, key_node, value, "")?,
            }
        }
        let (domain, domain_node) = match domain {
            Some((name, node)) if !name.is_empty() => (name, node),
            Some((_, node)) => return Err(self.error(node, "domain", ConfigErrorKind::EmptyDomain)),
            None => return Err(self.error(root, "domain", ConfigErrorKind::EmptyDomain)),
        };
        let merging = match self.b.domain_files.get(domain.as_str()) {
            Some(first) if !self.b.options.merge_domains => {
                let kind = ConfigErrorKind::DuplicateDomain { domain, first_file: first.clone() };
                return Err(self.error(domain_node, "domain", kind));
            }
            Some(_) => true,
            None => false,
        };
        let mut tree = match self.b.domains.remove(domain.as_str()) {
            Some(tree) => tree,
            None => DomainTree::new(&domain),
        };
        let result = match descriptors {
            Some((_, list)) => {
                let items = self.list(list, "descriptors")?;
                let mut level = std::mem::take(&mut tree.root);
                let mut composites = std::mem::take(&mut tree.root_composites);
                let path =
                    Path { domain: &domain, composite: domain.clone(), key_path: String::new(), dynamic_metric: false };
                let result = self.descriptors(&mut tree, &mut level, &mut composites, items, "descriptors", 1, &path);
                tree.root = level;
                tree.root_composites = composites;
                result
            }
            None => Ok(()),
        };
        result?;
        if !merging {
            self.b.domain_files.insert(domain.clone().into_boxed_str(), self.file.to_owned());
        }
        self.b.domains.insert(domain.into_boxed_str(), tree);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn descriptors(
        &mut self,
        tree: &mut DomainTree,
        level: &mut Level,
        composites: &mut HashSet<Box<str>>,
        items: &[Node],
        field: &str,
        depth: usize,
        parent: &Path<'_>,
    ) -> Result<(), ConfigError> {
        for (i, item) in items.iter().enumerate() {
            let field = format!("{field}[{i}]");
            self.descriptor(tree, level, composites, item, &field, depth, parent)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn descriptor(
        &mut self,
        tree: &mut DomainTree,
        level: &mut Level,
        composites: &mut HashSet<Box<str>>,
        node: &Node,
        field: &str,
        depth: usize,
        parent: &Path<'_>,
    ) -> Result<(), ConfigError> {
        let limits = self.b.options.limits;
        if depth > limits.max_depth {
            return Err(self.error(node, field, ConfigErrorKind::TooDeep { max: limits.max_depth }));
        }
        if self.b.descriptors == limits.max_descriptors {
            return Err(self.error(node, field, ConfigErrorKind::TooManyDescriptors { max: limits.max_descriptors }));
        }
        self.b.descriptors += 1;

        let mut key = String::new();
        let mut value = String::new();
        let mut rate_limit: Option<(&Node, &Node)> = None;
        let mut children: Option<&Node> = None;
        let (mut shadow_mode, mut quota_mode, mut detailed_metric) = (false, false, false);
        let (mut value_to_metric, mut share_threshold) = (false, false);
        for (name, key_node, v) in self.entries(node, field)? {
            let f = join(field, name);
            match name {
                "key" => key = self.string(v, &f)?,
                "value" => value = self.string(v, &f)?,
                "rate_limit" => rate_limit = Some((key_node, v)),
                "descriptors" => children = Some(v),
                "shadow_mode" => shadow_mode = self.boolean(v, &f)?,
                "quota_mode" => {
                    quota_mode = self.boolean(v, &f)?;
                    if quota_mode {
                        self.warn(key_node, &f, "not implemented yet: an over-limit answer counts as in any rule");
                    }
                }
                "detailed_metric" => detailed_metric = self.boolean(v, &f)?,
                "value_to_metric" => value_to_metric = self.boolean(v, &f)?,
                "share_threshold" => share_threshold = self.boolean(v, &f)?,
                "metadata" => self.warn(key_node, &f, "ignored: weir-rls sends no dynamic metadata"),
                _ => self.other_key(name, key_node, v, field)?,
            }
        }
        if key.is_empty() {
            return Err(self.error(node, &join(field, "key"), ConfigErrorKind::EmptyKey));
        }
        let composite = if value.is_empty() { key.clone() } else { format!("{key}_{value}") };
        if !composites.insert(composite.clone().into_boxed_str()) {
            let kind =
                ConfigErrorKind::DuplicateDescriptor { composite_key: format!("{}.{composite}", parent.composite) };
            return Err(self.error(node, field, kind));
        }
        let node_value = if value.is_empty() {
            NodeValue::Any
        } else if value.contains('*') {
            NodeValue::Wildcard(Pattern::new(&value))
        } else {
            NodeValue::Exact(value.clone().into_boxed_str())
        };
        if share_threshold && !matches!(node_value, NodeValue::Wildcard(_)) {
            let kind = ConfigErrorKind::ShareThresholdWithoutWildcard { key: composite };
            return Err(self.error(node, &join(field, "share_threshold"), kind));
        }
        let key_path =
            if parent.key_path.is_empty() { composite.clone() } else { format!("{}.{composite}", parent.key_path) };
        let path = Path {
            domain: parent.domain,
            composite: format!("{}.{composite}", parent.composite),
            dynamic_metric: parent.dynamic_metric || (value_to_metric && !matches!(node_value, NodeValue::Exact(_))),
            key_path,
        };

        let rule = match rate_limit {
            Some((_, v)) if matches!(v.value, Value::Null) => None,
            Some((_, v)) => {
                let f = join(field, "rate_limit");
                let parsed = self.rate_limit(v, &f)?;
                let id = RuleId(u32::try_from(self.b.rules.len()).unwrap_or(u32::MAX));
                let (line, _) = yaml::place(node);
                self.b.rules.push(Rule {
                    id,
                    domain: parent.domain.into(),
                    full_key: format!("{}.{}", parent.domain, path.key_path).into_boxed_str(),
                    key_path: path.key_path.clone().into_boxed_str(),
                    name: parsed.name,
                    limit: parsed.limit,
                    replaces: parsed.replaces,
                    shadow_mode,
                    detailed_metric,
                    quota_mode,
                    file: self.file.into(),
                    line,
                });
                Some(id)
            }
            None => None,
        };

        let index = tree.push(TreeNode {
            value: node_value,
            rule,
            children: Level::default(),
            value_to_metric,
            share_threshold,
            dynamic_metric: path.dynamic_metric || detailed_metric,
        });
        if let Some(list) = children {
            let f = join(field, "descriptors");
            let items = self.list(list, &f)?;
            let mut child_level = Level::default();
            let mut child_composites = HashSet::new();
            self.descriptors(tree, &mut child_level, &mut child_composites, items, &f, depth + 1, &path)?;
            tree.set_children(index, child_level);
        }
        level.insert(&key, index, tree.value_of(index));
        Ok(())
    }

    fn rate_limit(&mut self, node: &Node, field: &str) -> Result<ParsedLimit, ConfigError> {
        let mut unit: Option<(String, &Node)> = None;
        let mut requests_per_unit: u32 = 0;
        let mut unlimited = false;
        let mut name = String::new();
        let mut replaces: Vec<(Box<str>, &Node)> = Vec::new();
        let mut algorithm: Option<(Algorithm, &Node)> = None;
        let mut burst: Option<(u32, &Node)> = None;
        let mut window: Option<(std::time::Duration, &Node)> = None;
        for (key, key_node, v) in self.entries(node, field)? {
            let f = join(field, key);
            match key {
                "unit" => unit = Some((self.string(v, &f)?, v)),
                "requests_per_unit" => requests_per_unit = self.u32(v, &f)?,
                "unlimited" => unlimited = self.boolean(v, &f)?,
                "name" => name = self.string(v, &f)?,
                "replaces" => replaces = self.replaces(v, &f)?,
                "algorithm" => {
                    let text = self.string(v, &f)?;
                    let parsed = Algorithm::parse(&text)
                        .ok_or_else(|| self.error(v, &f, ConfigErrorKind::InvalidAlgorithm { name: text }))?;
                    algorithm = Some((parsed, key_node));
                }
                "burst" => burst = Some((self.u32(v, &f)?, key_node)),
                "window" => {
                    let text = self.string(v, &f)?;
                    let parsed = parse_window(&text)
                        .ok_or_else(|| self.error(v, &f, ConfigErrorKind::InvalidWindow { window: text }))?;
                    window = Some((parsed, key_node));
                }
                _ => self.other_key(key, key_node, v, field)?,
            }
        }

        let unit_name = unit.as_ref().map_or("", |(text, _)| text.as_str());
        let valid_unit = Unit::parse(unit_name);
        let limit = if unlimited {
            if let Some((_, unit_node)) = &unit {
                if valid_unit.is_some() {
                    return Err(self.error(unit_node, &join(field, "unit"), ConfigErrorKind::UnitWithUnlimited));
                }
                if !unit_name.is_empty() {
                    if self.strict {
                        let kind = ConfigErrorKind::InvalidUnitWithUnlimited { unit: unit_name.to_owned() };
                        return Err(self.error(unit_node, &join(field, "unit"), kind));
                    }
                    self.warn(
                        unit_node,
                        &join(field, "unit"),
                        "ignored on an unlimited rule (as envoyproxy/ratelimit ignores it)",
                    );
                }
            }
            for (key, at) in [
                ("algorithm", algorithm.map(|(_, n)| n)),
                ("burst", burst.map(|(_, n)| n)),
                ("window", window.map(|(_, n)| n)),
            ] {
                if let Some(at) = at {
                    return Err(self.error(at, &join(field, key), ConfigErrorKind::UnlimitedWith { key }));
                }
            }
            RuleLimit::Unlimited
        } else {
            let length = match (window, &unit) {
                (Some((_, window_node)), Some(_)) => {
                    return Err(self.error(window_node, &join(field, "window"), ConfigErrorKind::UnitAndWindow));
                }
                (Some((length, _)), None) => length,
                (None, _) => match valid_unit {
                    Some(unit) => unit.duration(),
                    None => {
                        let at = unit.as_ref().map_or(node, |(_, n)| *n);
                        let kind = ConfigErrorKind::InvalidUnit { unit: unit_name.to_owned() };
                        return Err(self.error(at, &join(field, "unit"), kind));
                    }
                },
            };
            let algorithm = algorithm.map_or(self.b.options.default_algorithm, |(a, _)| a);
            if let Some((_, burst_node)) = burst {
                if algorithm != Algorithm::Gcra {
                    return Err(self.error(
                        burst_node,
                        &join(field, "burst"),
                        ConfigErrorKind::BurstWithoutGcra { algorithm },
                    ));
                }
                if requests_per_unit == 0 {
                    return Err(self.error(burst_node, &join(field, "burst"), ConfigErrorKind::BurstOnZeroLimit));
                }
            }
            let limit = RateLimit::new(requests_per_unit, length, algorithm, burst.map(|(b, _)| b)).map_err(|e| {
                let at = burst.map_or(node, |(_, n)| n);
                self.error(at, field, ConfigErrorKind::Quota(e))
            })?;
            RuleLimit::Limited(limit)
        };

        for (i, (replaced, at)) in replaces.iter().enumerate() {
            let f = format!("{field}.replaces[{i}].name");
            if replaced.is_empty() {
                return Err(self.error(at, &f, ConfigErrorKind::EmptyReplaces));
            }
            if **replaced == *name {
                return Err(self.error(at, &f, ConfigErrorKind::ReplacesItself { name: name.clone() }));
            }
        }
        let replaces = replaces.into_iter().map(|(name, _)| name).collect();
        Ok(ParsedLimit { limit, name: (!name.is_empty()).then(|| name.into_boxed_str()), replaces })
    }

    fn replaces<'n>(&mut self, node: &'n Node, field: &str) -> Result<Vec<(Box<str>, &'n Node)>, ConfigError> {
        let mut names = Vec::new();
        for (i, item) in self.list(node, field)?.iter().enumerate() {
            let f = format!("{field}[{i}]");
            let mut name = String::new();
            for (key, key_node, v) in self.entries(item, &f)? {
                match key {
                    "name" => name = self.string(v, &join(&f, "name"))?,
                    _ => self.other_key(key, key_node, v, &f)?,
                }
            }
            names.push((name.into_boxed_str(), item));
        }
        Ok(names)
    }
}

/// Where a descriptor is: its domain, upstream's composite key from the domain down
/// (for the duplicate error), its key path, and whether a `value_to_metric` above
/// (or on it) makes its metric name depend on the request.
struct Path<'d> {
    domain: &'d str,
    composite: String,
    key_path: String,
    dynamic_metric: bool,
}

fn join(field: &str, key: &str) -> String {
    if field.is_empty() { key.to_owned() } else { format!("{field}.{key}") }
}
