//! The capabilities' schemas a registration sent (names, descriptions, input and
//! output JSON Schemas), kept for the console's registration page and
//! `GET /api/v1/registrations/{arn}`, within two bounds: per registration
//! ([`MAX_KEPT_SCHEMA_BYTES`]) and in all ([`MAX_SCHEMA_POOL_BYTES`], with identical
//! sets shared, so 10,000 instances of one connector type keep one copy).

use std::collections::HashSet;
use std::sync::Arc;

use serde::Serialize;

use crate::proto::RegisterConnectorRequest;

/// Most bytes of capability schemas kept per registration (names, descriptions and
/// schema texts together): enough for a tool connector's dozens of tools. Past it
/// only the ids are listed.
pub(crate) const MAX_KEPT_SCHEMA_BYTES: usize = 64 * 1024;

/// Most bytes of distinct schema sets the gateway keeps in all. Registrations that
/// send the same schemas (every instance of one connector type does) share one copy,
/// so this bounds the variety, not the number of registrations; past it new sets are
/// not kept (their ids still are).
pub(crate) const MAX_SCHEMA_POOL_BYTES: usize = 16 * 1024 * 1024;

/// One capability as its connector described it at register time, for the console's
/// registration page and `GET /api/v1/registrations/{arn}`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Hash)]
pub(crate) struct CapabilitySchema {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) description: String,
    /// JSON Schema text of the input, as sent; empty when none.
    pub(crate) input_schema: String,
    /// JSON Schema text of the output, as sent; empty when none.
    pub(crate) output_schema: String,
    /// The category it declares (free text, e.g. `ticketing`); empty when none.
    pub(crate) category: String,
    /// The icon it declares, as sent (a name, an emoji or a URL: shown as text, never
    /// fetched); empty when none.
    pub(crate) icon: String,
}

/// The capability schemas a register request carried and their size, or `None` when
/// there are none or they exceed [`MAX_KEPT_SCHEMA_BYTES`].
pub(crate) fn schemas_of(req: &RegisterConnectorRequest) -> Option<(Vec<CapabilitySchema>, usize)> {
    let types = &req.capabilities.as_ref()?.task_types;
    let bytes: usize = types
        .iter()
        .map(|t| {
            t.task_type_id.len()
                + t.name.len()
                + t.description.len()
                + t.input_schema_json.len()
                + t.output_schema_json.len()
                + t.category.len()
                + t.icon.len()
        })
        .sum();
    if types.is_empty() || bytes > MAX_KEPT_SCHEMA_BYTES {
        return None;
    }
    let list = types
        .iter()
        .map(|t| CapabilitySchema {
            id: t.task_type_id.clone(),
            name: t.name.clone(),
            description: t.description.clone(),
            input_schema: t.input_schema_json.clone(),
            output_schema: t.output_schema_json.clone(),
            category: t.category.clone(),
            icon: t.icon.clone(),
        })
        .collect();
    Some((list, bytes))
}

/// Distinct schema sets, shared by every registration that sent the same one.
#[derive(Debug, Default)]
pub(crate) struct SchemaPool {
    sets: HashSet<Arc<[CapabilitySchema]>>,
    bytes: usize,
}

impl SchemaPool {
    /// The shared copy of `list` (`bytes` long): the pool's when it has one, else a
    /// new one when the pool has room (after dropping sets no registration holds).
    pub(crate) fn share(
        &mut self,
        list: Vec<CapabilitySchema>,
        bytes: usize,
    ) -> Option<Arc<[CapabilitySchema]>> {
        if let Some(set) = self.sets.get(list.as_slice()) {
            return Some(set.clone());
        }
        if self.bytes + bytes > MAX_SCHEMA_POOL_BYTES {
            // Only the pool holds these: no registration uses them any more.
            self.sets.retain(|s| Arc::strong_count(s) > 1);
            self.bytes = self.sets.iter().map(|s| set_bytes(s)).sum();
            if self.bytes + bytes > MAX_SCHEMA_POOL_BYTES {
                return None;
            }
        }
        let set: Arc<[CapabilitySchema]> = list.into();
        self.sets.insert(set.clone());
        self.bytes += bytes;
        Some(set)
    }
}

fn set_bytes(set: &[CapabilitySchema]) -> usize {
    set.iter()
        .map(|c| {
            c.id.len()
                + c.name.len()
                + c.description.len()
                + c.input_schema.len()
                + c.output_schema.len()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(tag: &str, bytes: usize) -> (Vec<CapabilitySchema>, usize) {
        let c = CapabilitySchema {
            id: tag.to_owned(),
            name: String::new(),
            description: "x".repeat(bytes - tag.len()),
            input_schema: String::new(),
            output_schema: String::new(),
            category: String::new(),
            icon: String::new(),
        };
        (vec![c], bytes)
    }

    #[test]
    fn identical_sets_share_one_copy() {
        let mut pool = SchemaPool::default();
        let (a, n) = set("a", 100);
        let first = pool.share(a.clone(), n).unwrap();
        let second = pool.share(a, n).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(pool.bytes, 100, "counted once");
    }

    #[test]
    fn a_full_pool_drops_unused_sets_before_refusing_a_new_one() {
        let mut pool = SchemaPool::default();
        let half = MAX_SCHEMA_POOL_BYTES / 2;
        let (a, n) = set("a", half);
        let held = pool.share(a, n).unwrap();
        let (b, n) = set("b", half);
        drop(pool.share(b, n).unwrap()); // nobody holds b any more
        let (c, n) = set("c", half);
        let held_c = pool.share(c, n);
        assert!(held_c.is_some(), "b's room was reclaimed");
        let (d, n) = set("d", half);
        assert!(
            pool.share(d, n).is_none(),
            "a and c are held: no room for d"
        );
        drop((held, held_c));
    }
}
