//! results.json read as plain JSON (docs/metrics.md, "results.json"), so that the report follows the
//! file rather than one build's types: unknown keys are shown, missing ones shown as absent.

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// A parsed results.json.
#[derive(Debug, Clone)]
pub(crate) struct Results {
    pub root: Value,
    /// `configs` in the file's order: the first is the baseline of every comparison.
    pub configs: Vec<(String, Value)>,
}

impl Results {
    pub(crate) fn parse(text: &str) -> Result<Results, serde_json::Error> {
        let root: Value = serde_json::from_str(text)?;
        // serde_json's Value sorts object keys, which would make `A` the baseline ahead of `sv1`;
        // the file's order is read separately.
        let configs = match serde_json::from_str::<InFileOrder>(text) {
            Ok(order) => order.configs.0,
            Err(_) => match root.get("configs") {
                Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                _ => Vec::new(),
            },
        };
        Ok(Results { root, configs })
    }

    pub(crate) fn config_names(&self) -> Vec<String> {
        self.configs.iter().map(|(n, _)| n.clone()).collect()
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.root.get(key).filter(|v| !v.is_null())
    }
}

/// The value at `path` below `v`, `None` when any step is missing or null.
pub(crate) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for key in path {
        cur = cur.get(key)?;
    }
    (!cur.is_null()).then_some(cur)
}

/// The number at `path` (JSON numbers, and booleans as 0/1 are not numbers here).
pub(crate) fn number_at(v: &Value, path: &[&str]) -> Option<f64> {
    at(v, path)
        .and_then(Value::as_f64)
        .filter(|x| x.is_finite())
}

#[derive(Deserialize)]
struct InFileOrder {
    #[serde(default)]
    configs: Ordered,
}

#[derive(Default)]
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of configurations")
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::default())
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Ordered, M::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    // A repeated key keeps its first position and its last value, as a map would.
                    match out.iter_mut().find(|(name, _)| *name == k) {
                        Some((_, old)) => *old = v,
                        None => out.push((k, v)),
                    }
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_keep_the_files_order() {
        let r =
            Results::parse(r#"{"configs": {"sv1": {"a": 1}, "C": {}, "A": {"a": 2}}}"#).unwrap();
        assert_eq!(r.config_names(), ["sv1", "C", "A"]);
        assert_eq!(number_at(&r.configs[2].1, &["a"]), Some(2.0));
    }

    #[test]
    fn missing_or_odd_configs_are_empty() {
        assert!(Results::parse("{}").unwrap().configs.is_empty());
        assert!(Results::parse(r#"{"configs": null}"#)
            .unwrap()
            .configs
            .is_empty());
        assert!(Results::parse(r#"{"configs": [1]}"#)
            .unwrap()
            .configs
            .is_empty());
        assert!(Results::parse("not json").is_err());
    }

    #[test]
    fn paths_stop_at_nulls() {
        let v: Value = serde_json::from_str(r#"{"a": {"b": null, "c": 1.5, "d": "x"}}"#).unwrap();
        assert_eq!(number_at(&v, &["a", "c"]), Some(1.5));
        assert_eq!(at(&v, &["a", "b"]), None);
        assert_eq!(number_at(&v, &["a", "d"]), None);
        assert_eq!(number_at(&v, &["z", "c"]), None);
    }
}
