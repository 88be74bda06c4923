//! One YAML document read into a tree of nodes, each with its place in the file.
//!
//! The tree keeps what the config's checks need and serde's typed decoding loses:
//! where each key and value is (for errors that name the line), each mapping's keys
//! in order and with their duplicates (for the duplicate-key check), and each plain
//! scalar's text as written (`value: yes` is the string "yes", as upstream reads it,
//! not the boolean serde-saphyr resolves it to for an untyped value).

use super::Limits;
use super::error::{ConfigError, ConfigErrorKind};
use core::fmt;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// A node and where it is.
pub(crate) type Node = Spanned<Value>;

/// A YAML node, as serde-saphyr resolves it without a target type (YAML 1.1
/// booleans, integers in any base, floats, null).
#[derive(Debug)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float,
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// The node's kind, for "expected ..., found ..." messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float => "a floating-point number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }

    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        // Out of every field's range either way; saturate to keep it an integer.
        Ok(Value::Int(i128::try_from(v).unwrap_or(i128::MAX)))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Float)
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Value::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }
}

/// YAML nesting per descriptor level: the `descriptors` list and the descriptor's
/// mapping.
const YAML_LEVELS_PER_DESCRIPTOR: usize = 2;
/// YAML nesting besides the descriptors: the root mapping, `rate_limit`, `replaces`
/// and its entries, and a few levels of `metadata`.
const YAML_LEVELS_BESIDES: usize = 12;

/// Reads `source` (one document) into a tree, within `limits`.
pub(crate) fn parse(file: &str, source: &str, limits: &Limits) -> Result<Node, ConfigError> {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = limits.max_depth.saturating_mul(YAML_LEVELS_PER_DESCRIPTOR).saturating_add(YAML_LEVELS_BESIDES);
    // A descriptor is at most a dozen nodes (its keys and values, a rate_limit and
    // its keys and values, a few replaces): more nodes than that many descriptors
    // could need is refused as too many descriptors.
    budget.max_nodes = limits.max_descriptors.saturating_mul(32).max(1_024);
    budget.max_events = budget.max_nodes.saturating_mul(2);
    budget.max_total_scalar_bytes = limits.max_file_bytes.saturating_mul(4);
    budget.max_documents = 1;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // Every key of a mapping comes to the visitor, duplicates included: strict mode
    // refuses them, compatible mode keeps the last, as upstream does.
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
    // The error's own text and location, not a rendered snippet of the file.
    options.with_snippet = false;
    serde_saphyr::from_str_with_options::<Node>(source, options).map_err(|e| yaml_error(file, e, limits))
}

fn yaml_error(file: &str, error: serde_saphyr::Error, limits: &Limits) -> ConfigError {
    let location = error.location();
    let kind = classify(&error, limits).unwrap_or_else(|| ConfigErrorKind::Yaml(strip_location(&error.to_string())));
    let err = ConfigError::new(file, kind);
    match location {
        Some(at) => err.at(at.line(), at.column()),
        None => err,
    }
}

/// The bound a parser error is (under any alias that wraps it), if it is one.
fn classify(error: &serde_saphyr::Error, limits: &Limits) -> Option<ConfigErrorKind> {
    use serde_saphyr::Error as E;
    use serde_saphyr::budget::BudgetBreach;
    let too_many = ConfigErrorKind::TooManyDescriptors { max: limits.max_descriptors };
    Some(match error {
        E::Budget { breach: BudgetBreach::Depth { .. }, .. } => ConfigErrorKind::TooDeep { max: limits.max_depth },
        E::Budget { breach: BudgetBreach::Documents { .. }, .. } | E::MultipleDocuments { .. } => {
            ConfigErrorKind::MultipleDocuments
        }
        E::Budget { .. }
        | E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. } => too_many,
        E::AliasError { error, .. } => return classify(error, limits),
        _ => return None,
    })
}

/// The parser's message without its trailing " at line L, column C" (the error
/// carries the place itself).
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// The node's line and column (where it is used: an alias's own place).
pub(crate) fn place(node: &Node) -> (u64, u64) {
    (node.referenced.line(), node.referenced.column())
}

/// A scalar's text as written in the file (where it is defined: an alias's anchor),
/// quotes included; `None` when the parser gave no byte span.
pub(crate) fn raw_text<'s>(source: &'s str, node: &Node) -> Option<&'s str> {
    let span = node.defined.span();
    let start = usize::try_from(span.byte_offset()?).ok()?;
    let len = usize::try_from(span.byte_len()?).ok()?;
    source.get(start..start.checked_add(len)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(source: &str) -> Node {
        parse("t.yaml", source, &Limits::default()).unwrap()
    }

    #[test]
    fn plain_scalars_keep_their_text() {
        let source = "a: yes\nb: 0x10\nc: 50.0.0.5\nd: 1.5\ne: ~\nf: 'q'\n";
        let root = parse_ok(source);
        let Value::Map(entries) = &root.value else { panic!("{root:?}") };
        let texts: Vec<_> = entries.iter().map(|(_, v)| raw_text(source, v).unwrap()).collect();
        assert_eq!(texts, ["yes", "0x10", "50.0.0.5", "1.5", "~", "'q'"]);
        assert!(matches!(entries[0].1.value, Value::Bool(true)));
        assert!(matches!(entries[1].1.value, Value::Int(16)));
        assert!(matches!(&entries[2].1.value, Value::Str(s) if s == "50.0.0.5"));
        assert!(matches!(entries[3].1.value, Value::Float));
        assert!(matches!(entries[4].1.value, Value::Null));
        assert_eq!(place(&entries[2].1), (3, 4));
    }

    #[test]
    fn an_empty_file_is_null() {
        assert!(matches!(parse_ok("").value, Value::Null));
        assert!(matches!(parse_ok("# only a comment\n").value, Value::Null));
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err = parse("t.yaml", "domain: d\ndescriptors: [a\n", &Limits::default()).unwrap_err();
        assert!(matches!(err.kind(), ConfigErrorKind::Yaml(_)), "{err}");
        assert_eq!(err.line(), Some(2));
        assert!(!err.to_string().contains(" at line "), "{err}");
    }

    #[test]
    fn nesting_and_documents_are_bounded() {
        let limits = Limits::default().max_depth(2);
        let deep = "a:\n".to_owned() + &(1..40).map(|i| format!("{}- b:\n", "  ".repeat(i))).collect::<String>();
        let err = parse("t.yaml", &deep, &limits).unwrap_err();
        assert!(matches!(err.kind(), ConfigErrorKind::TooDeep { max: 2 }), "{err}");
        let err = parse("t.yaml", "a: 1\n---\nb: 2\n", &Limits::default()).unwrap_err();
        assert!(matches!(err.kind(), ConfigErrorKind::MultipleDocuments), "{err}");
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut source = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            source += &format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n");
        }
        let limits = Limits::default().max_descriptors(1_000);
        let err = parse("t.yaml", &source, &limits).unwrap_err();
        assert!(matches!(err.kind(), ConfigErrorKind::TooManyDescriptors { .. }), "{err}");
    }
}
