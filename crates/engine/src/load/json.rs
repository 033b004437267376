//! A JSON object read with every key kept, in file order, so duplicate keys can be refused
//! (serde's maps keep the last value silently; Python's json does the same, which makes
//! duplicates a parser differential).

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

/// Memory a parsed JSON member may take per byte of its text, charged before it is parsed.
pub(crate) const COST_PER_BYTE: u64 = 8;

/// Entries of a JSON object in the order written, duplicates included.
pub(crate) struct Entries<V>(pub Vec<(String, V)>);

impl<V> Entries<V> {
    /// The first key that appears twice.
    pub fn first_duplicate(&self) -> Option<&str> {
        let mut seen = HashSet::with_capacity(self.0.len());
        self.0
            .iter()
            .map(|(k, _)| k.as_str())
            .find(|k| !seen.insert(*k))
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for EntriesVisitor<V> {
            type Value = Entries<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
        }
        deserializer.deserialize_map(EntriesVisitor(PhantomData))
    }
}
