//! Rule operations on the configuration file's text (ARC2's "rule updates"; docs/arc2.md,
//! "Management API"): list, add, replace or remove one `[[proxy_rules]]` entry. The rest of the
//! file is kept as written (comments, order, formatting); the caller validates the result like any
//! file before it is written back.
//!
//! An entry is named by its `domain` as written (case-insensitive). A new entry comes as TOML
//! (the keys of one `[[proxy_rules]]` entry; sub-tables as `[[path_rules]]`, `[routing_rules]`)
//! or as a JSON object with the same keys.

use toml_edit::{Array, ArrayOfTables, DocumentMut, Item, Table, Value};

/// Why an operation could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// The configuration file itself does not parse.
    File(String),
    /// The new entry does not parse, or is not a table with a `domain`.
    Entry(String),
    /// No entry has this domain.
    NotFound(String),
    /// An entry with this domain exists already (replace it instead).
    Exists(String),
}

impl std::fmt::Display for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EditError::File(e) => write!(f, "the configuration file does not parse: {e}"),
            EditError::Entry(e) => write!(f, "the rule is not valid: {e}"),
            EditError::NotFound(d) => write!(f, "no proxy_rules entry has domain {d:?}"),
            EditError::Exists(d) => write!(
                f,
                "a proxy_rules entry with domain {d:?} exists already; replace it with PUT /_rampart/rules/{d}"
            ),
        }
    }
}

/// Every `proxy_rules` entry as a JSON array (each entry an object with the file's keys).
pub fn list_rules(src: &str) -> Result<String, EditError> {
    let doc = parse_file(src)?;
    let rules: Vec<serde_json::Value> = match doc.get("proxy_rules") {
        Some(Item::ArrayOfTables(a)) => a.iter().map(table_to_json).collect(),
        _ => Vec::new(),
    };
    Ok(serde_json::Value::Array(rules).to_string())
}

/// Appends `entry` as a new `[[proxy_rules]]` entry.
pub fn add_rule(src: &str, entry: &str, json: bool) -> Result<String, EditError> {
    let mut doc = parse_file(src)?;
    let table = parse_entry(entry, json)?;
    let domain = domain_of(&table).ok_or_else(no_domain)?;
    let rules = rules_mut(&mut doc)?;
    if find(rules, &domain).is_some() {
        return Err(EditError::Exists(domain));
    }
    rules.push(table);
    Ok(doc.to_string())
}

/// Replaces the entry whose domain is `domain` with `entry`, in the same place.
pub fn replace_rule(src: &str, domain: &str, entry: &str, json: bool) -> Result<String, EditError> {
    let mut doc = parse_file(src)?;
    let mut table = parse_entry(entry, json)?;
    let new_domain = domain_of(&table).ok_or_else(no_domain)?;
    let rules = rules_mut(&mut doc)?;
    let i = find(rules, domain).ok_or_else(|| EditError::NotFound(domain.to_owned()))?;
    if !new_domain.eq_ignore_ascii_case(domain) && find(rules, &new_domain).is_some() {
        return Err(EditError::Exists(new_domain));
    }
    if let Some(old) = rules.get(i) {
        if let Some(pos) = old.position() {
            table.set_position(Some(pos));
        }
        table.decor_mut().clone_from(old.decor());
    }
    if let Some(slot) = rules.get_mut(i) {
        *slot = table;
    }
    Ok(doc.to_string())
}

/// Removes the entry whose domain is `domain`.
pub fn remove_rule(src: &str, domain: &str) -> Result<String, EditError> {
    let mut doc = parse_file(src)?;
    let rules = rules_mut(&mut doc)?;
    let i = find(rules, domain).ok_or_else(|| EditError::NotFound(domain.to_owned()))?;
    rules.remove(i);
    Ok(doc.to_string())
}

fn parse_file(src: &str) -> Result<DocumentMut, EditError> {
    src.parse::<DocumentMut>()
        .map_err(|e| EditError::File(e.to_string()))
}

fn no_domain() -> EditError {
    EditError::Entry("it has no `domain` string".to_owned())
}

fn rules_mut(doc: &mut DocumentMut) -> Result<&mut ArrayOfTables, EditError> {
    if doc.get("proxy_rules").is_none() {
        doc.insert("proxy_rules", Item::ArrayOfTables(ArrayOfTables::new()));
    }
    match doc.get_mut("proxy_rules") {
        Some(Item::ArrayOfTables(a)) => Ok(a),
        _ => Err(EditError::File(
            "`proxy_rules` is not written as [[proxy_rules]] tables".to_owned(),
        )),
    }
}

fn domain_of(t: &Table) -> Option<String> {
    t.get("domain")?.as_str().map(str::to_owned)
}

fn find(rules: &ArrayOfTables, domain: &str) -> Option<usize> {
    rules
        .iter()
        .position(|t| domain_of(t).is_some_and(|d| d.eq_ignore_ascii_case(domain)))
}

/// The new entry as a table that belongs to no document (no positions), so it is written
/// where it is put.
fn parse_entry(entry: &str, json: bool) -> Result<Table, EditError> {
    if json {
        let v: serde_json::Value =
            serde_json::from_str(entry).map_err(|e| EditError::Entry(e.to_string()))?;
        match json_to_item(&v) {
            Some(Item::Table(t)) => Ok(t),
            _ => Err(EditError::Entry("a rule is a JSON object".to_owned())),
        }
    } else {
        let doc = entry
            .parse::<DocumentMut>()
            .map_err(|e| EditError::Entry(e.to_string()))?;
        Ok(fresh_table(doc.as_table()))
    }
}

fn fresh_table(t: &Table) -> Table {
    let mut out = Table::new();
    for (k, item) in t.iter() {
        let item = match item {
            Item::Table(sub) => Item::Table(fresh_table(sub)),
            Item::ArrayOfTables(a) => {
                let mut fresh = ArrayOfTables::new();
                for sub in a.iter() {
                    fresh.push(fresh_table(sub));
                }
                Item::ArrayOfTables(fresh)
            }
            other => {
                let mut v = other.clone();
                if let Some(v) = v.as_value_mut() {
                    v.decor_mut().clear();
                }
                v
            }
        };
        out.insert(k, item);
    }
    out
}

fn json_to_item(v: &serde_json::Value) -> Option<Item> {
    use serde_json::Value as J;
    Some(match v {
        J::Object(map) => {
            let mut t = Table::new();
            for (k, v) in map {
                if let Some(item) = json_to_item(v) {
                    t.insert(k, item);
                }
            }
            Item::Table(t)
        }
        J::Array(items) if !items.is_empty() && items.iter().all(J::is_object) => {
            let mut a = ArrayOfTables::new();
            for item in items {
                if let Some(Item::Table(t)) = json_to_item(item) {
                    a.push(t);
                }
            }
            Item::ArrayOfTables(a)
        }
        other => Item::Value(json_to_value(other)?),
    })
}

fn json_to_value(v: &serde_json::Value) -> Option<Value> {
    use serde_json::Value as J;
    Some(match v {
        J::Null => return None,
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64()?),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(items) => {
            let mut a = Array::new();
            for item in items {
                if let Some(v) = json_to_value(item) {
                    a.push(v);
                }
            }
            Value::Array(a)
        }
        J::Object(map) => {
            let mut t = toml_edit::InlineTable::new();
            for (k, v) in map {
                if let Some(v) = json_to_value(v) {
                    t.insert(k, v);
                }
            }
            Value::InlineTable(t)
        }
    })
}

fn table_to_json(t: &Table) -> serde_json::Value {
    serde_json::Value::Object(
        t.iter()
            .filter_map(|(k, item)| Some((k.to_owned(), item_to_json(item)?)))
            .collect(),
    )
}

fn item_to_json(item: &Item) -> Option<serde_json::Value> {
    match item {
        Item::None => None,
        Item::Value(v) => Some(value_to_json(v)),
        Item::Table(t) => Some(table_to_json(t)),
        Item::ArrayOfTables(a) => Some(serde_json::Value::Array(
            a.iter().map(table_to_json).collect(),
        )),
    }
}

fn value_to_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::String(s) => J::from(s.value().as_str()),
        Value::Integer(i) => J::from(*i.value()),
        Value::Float(f) => J::from(*f.value()),
        Value::Boolean(b) => J::from(*b.value()),
        Value::Datetime(d) => J::from(d.value().to_string()),
        Value::Array(a) => J::Array(a.iter().map(value_to_json).collect()),
        Value::InlineTable(t) => J::Object(
            t.iter()
                .map(|(k, v)| (k.to_owned(), value_to_json(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
# the site
listening_port_http = 8080

[[proxy_rules]]
domain = \"a.example\" # first
forward_ipv4 = \"127.0.0.1\"

[[proxy_rules.path_rules]]
path = \"/api\"
match_type = \"StartsWith\"

[[proxy_rules]]
domain = \"b.example\"
forward_ipv4 = \"127.0.0.2\"
";

    #[test]
    fn add_appends_and_keeps_the_rest_of_the_file() {
        let out = add_rule(
            FILE,
            "domain = \"c.example\"\nforward_ipv4 = \"127.0.0.3\"\n[[path_rules]]\npath = \"/x\"\n",
            false,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.starts_with("# the site\nlistening_port_http = 8080\n"),
            "{out}"
        );
        assert!(out.contains("domain = \"a.example\" # first"), "{out}");
        let c = out.find("domain = \"c.example\"").unwrap_or(0);
        let b = out.find("domain = \"b.example\"").unwrap_or(usize::MAX);
        assert!(c > b, "appended last:\n{out}");
        assert!(
            out.contains("[[proxy_rules.path_rules]]\npath = \"/x\""),
            "{out}"
        );
        // The result is the file with one more entry.
        let listed = list_rules(&out).unwrap_or_default();
        assert!(listed.contains("\"c.example\""), "{listed}");
        assert_eq!(
            add_rule(FILE, "domain = \"B.example\"", false),
            Err(EditError::Exists("B.example".into()))
        );
        assert!(matches!(
            add_rule(FILE, "forward_ipv4 = \"x\"", false),
            Err(EditError::Entry(_))
        ));
        assert!(matches!(
            add_rule(FILE, "domain = ", false),
            Err(EditError::Entry(_))
        ));
    }

    #[test]
    fn replace_keeps_the_place_and_remove_takes_the_sub_tables() {
        let out = replace_rule(
            FILE,
            "a.example",
            r#"{"domain":"a.example","forward_ipv4":"127.0.0.9","path_rules":[{"path":"/new","match_type":"Equals"}]}"#,
            true,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let a = out.find("127.0.0.9").unwrap_or(usize::MAX);
        let b = out.find("b.example").unwrap_or(0);
        assert!(a < b, "replaced in place:\n{out}");
        assert!(!out.contains("/api"), "{out}");
        assert!(out.contains("path = \"/new\""), "{out}");
        assert_eq!(
            replace_rule(FILE, "z.example", "domain = \"z.example\"", false),
            Err(EditError::NotFound("z.example".into()))
        );
        assert_eq!(
            replace_rule(FILE, "a.example", "domain = \"b.example\"", false),
            Err(EditError::Exists("b.example".into()))
        );

        let out = remove_rule(FILE, "A.EXAMPLE").unwrap_or_else(|e| panic!("{e}"));
        assert!(!out.contains("a.example") && !out.contains("/api"), "{out}");
        assert!(out.contains("b.example"), "{out}");
        assert_eq!(
            remove_rule(FILE, "nope"),
            Err(EditError::NotFound("nope".into()))
        );
    }

    #[test]
    fn list_gives_json_with_sub_tables() {
        let listed: serde_json::Value =
            serde_json::from_str(&list_rules(FILE).unwrap_or_default()).unwrap_or_default();
        assert_eq!(listed[0]["domain"], "a.example");
        assert_eq!(listed[0]["path_rules"][0]["path"], "/api");
        assert_eq!(listed[1]["forward_ipv4"], "127.0.0.2");
        assert_eq!(list_rules("listening_port_http = 1\n").as_deref(), Ok("[]"));
    }
}
