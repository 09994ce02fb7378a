//! The filtered listings' SQL, once for both backends: the event search
//! ([`EventQuery`]) and the dead-letter page ([`DeadLetterQuery`]).
//!
//! Each is built per query with only the filters the query sets, as plain conditions,
//! rather than one statement with `(? IS NULL OR source = ?)` terms: a planner that
//! plans before it sees the parameters (SQLite always, PostgreSQL's generic plans)
//! cannot match such a term to `events_by_source`, `events_by_kind`,
//! `events_by_delivery` or `dead_letters_by_binding`, and walks the table instead.
//!
//! The two backends differ in three spellings only, which a [`Dialect`] names: the
//! placeholder (`?N` or `$N`), the SQL of a dedupe key's tail (exactly as its index
//! has it, so the index serves the search), and the last attempt's error kind in the
//! `errors` JSON. Conditions are written with `?` for each parameter and numbered in
//! the dialect's spelling as they are added. Each backend binds the [`Arg`]s in its own
//! parameter type.

use super::backend::{delivery_tail, EventQuery};
use crate::outbox::model::DeadLetterQuery;

/// A listing's parameter, in the two types its columns take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Arg {
    /// A text column.
    Text(String),
    /// An integer column (times, ids, sequence numbers, the limit).
    Int(i64),
}

/// What differs between the backends' SQL for the listings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dialect {
    /// The placeholder's prefix: `?` (SQLite, `?1`) or `$` (PostgreSQL, `$1`).
    pub(crate) mark: char,
    /// [`delivery_tail`] of the `dedupe_key` column, as `events_by_delivery` indexes it.
    pub(crate) delivery_tail: &'static str,
    /// The last attempt's error kind in a dead letter's `errors` array.
    pub(crate) last_error_kind: &'static str,
}

/// A `SELECT` with its conditions, numbered as they come.
struct Listing {
    sql: String,
    args: Vec<Arg>,
    mark: char,
    /// Conditions added so far (one may take no parameter).
    conditions: usize,
}

impl Listing {
    fn new(select: &str, mark: char) -> Listing {
        Listing {
            sql: select.to_owned(),
            args: Vec::new(),
            mark,
            conditions: 0,
        }
    }

    /// Adds `cond` (each `?` in it takes the next of `values`).
    fn and(&mut self, cond: &str, values: Vec<Arg>) {
        self.sql.push_str(if self.conditions == 0 {
            " WHERE "
        } else {
            " AND "
        });
        self.conditions += 1;
        let mut parts = cond.split('?');
        self.sql.push_str(parts.next().unwrap_or_default());
        for (part, v) in parts.zip(values) {
            self.args.push(v);
            self.sql
                .push_str(&format!("{}{}{part}", self.mark, self.args.len()));
        }
    }

    /// Ends with `ORDER BY {order} LIMIT {limit}` (the limit a parameter too).
    fn finish(mut self, order: &str, limit: usize) -> (String, Vec<Arg>) {
        self.args.push(Arg::Int(limit as i64));
        let n = self.args.len();
        self.sql
            .push_str(&format!(" ORDER BY {order} LIMIT {}{n}", self.mark));
        (self.sql, self.args)
    }
}

/// The event search's SQL after `select` (which may already name an index), newest
/// first, and its parameters.
pub(crate) fn events(q: &EventQuery, select: &str, d: &Dialect) -> (String, Vec<Arg>) {
    let mut l = Listing::new(select, d.mark);
    let text = |s: &String| vec![Arg::Text(s.clone())];
    if let Some(s) = &q.source {
        l.and("source = ?", text(s));
    }
    if let Some(k) = &q.kind {
        l.and("kind = ?", text(k));
    }
    if let Some(id) = &q.dedupe_key {
        let (cond, values) = delivery_condition(id, d.delivery_tail);
        l.and(&cond, values);
    }
    if let Some(id) = &q.event_id {
        l.and("id = ?", text(id));
    }
    for (cond, v) in [
        ("seq < ?", q.before_seq),
        ("received_at >= ?", q.since_ms),
        ("received_at < ?", q.until_ms),
    ] {
        if let Some(v) = v {
            l.and(cond, vec![Arg::Int(v)]);
        }
    }
    l.finish("seq DESC", q.limit)
}

/// The dead-letter page's SQL after `select`, newest first, and its parameters.
pub(crate) fn dead_letters(q: &DeadLetterQuery, select: &str, d: &Dialect) -> (String, Vec<Arg>) {
    let mut l = Listing::new(select, d.mark);
    if let Some(b) = &q.binding_id {
        l.and("binding_id = ?", vec![Arg::Text(b.clone())]);
    }
    for (cond, v) in [
        ("id < ?", q.before_id),
        ("dead_at >= ?", q.since_ms),
        ("dead_at < ?", q.until_ms),
    ] {
        if let Some(v) = v {
            l.and(cond, vec![Arg::Int(v)]);
        }
    }
    if let Some(k) = &q.error_kind {
        l.and(
            &format!("{} = ?", d.last_error_kind),
            vec![Arg::Text(k.clone())],
        );
    }
    if q.unreplayed {
        l.and("replays = 0", Vec::new());
    }
    l.finish("id DESC", q.limit)
}

/// The condition of a search by delivery id `id`, over `tail` (the dialect's
/// [`delivery_tail`] of `dedupe_key`), and its parameters: the events whose key's tail
/// is `id`, or whose key is `id` itself (then its tail is `id`'s tail, so both
/// branches are lookups of that one index).
fn delivery_condition(id: &str, tail: &str) -> (String, Vec<Arg>) {
    let id_tail = delivery_tail(id);
    if id_tail == id {
        (format!("{tail} = ?"), vec![Arg::Text(id.to_owned())])
    } else {
        (
            format!("({tail} = ? OR ({tail} = ? AND dedupe_key = ?))"),
            [id, id_tail, id]
                .into_iter()
                .map(|s| Arg::Text(s.to_owned()))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PG: Dialect = Dialect {
        mark: '$',
        delivery_tail: "tail(k)",
        last_error_kind: "errors -> -1 ->> 'kind'",
    };

    #[test]
    fn only_the_set_filters_become_conditions_numbered_in_the_dialect() {
        let q = EventQuery {
            source: Some("gh".into()),
            since_ms: Some(5),
            limit: 50,
            ..EventQuery::default()
        };
        let (sql, args) = events(&q, "SELECT * FROM events", &PG);
        assert_eq!(
            sql,
            "SELECT * FROM events WHERE source = $1 AND received_at >= $2 ORDER BY seq DESC LIMIT $3"
        );
        assert_eq!(
            args,
            vec![Arg::Text("gh".into()), Arg::Int(5), Arg::Int(50)]
        );
        let (sql, args) = events(
            &EventQuery {
                limit: 1,
                ..EventQuery::default()
            },
            "S",
            &PG,
        );
        assert_eq!(
            (sql.as_str(), args),
            ("S ORDER BY seq DESC LIMIT $1", vec![Arg::Int(1)])
        );
    }

    #[test]
    fn a_qualified_delivery_id_searches_both_forms_through_one_index() {
        let q = EventQuery {
            dedupe_key: Some("hook:abc".into()),
            limit: 1,
            ..EventQuery::default()
        };
        let sqlite = Dialect { mark: '?', ..PG };
        let (sql, args) = events(&q, "S", &sqlite);
        assert_eq!(
            sql,
            "S WHERE (tail(k) = ?1 OR (tail(k) = ?2 AND dedupe_key = ?3)) ORDER BY seq DESC LIMIT ?4"
        );
        assert_eq!(
            args[..3],
            [
                Arg::Text("hook:abc".into()),
                Arg::Text("abc".into()),
                Arg::Text("hook:abc".into())
            ]
        );
    }

    #[test]
    fn the_dead_letter_page_takes_the_dialects_error_kind_and_unreplayed_as_a_literal() {
        let q = DeadLetterQuery {
            error_kind: Some("timeout".into()),
            unreplayed: true,
            before_id: Some(9),
            limit: 10,
            ..DeadLetterQuery::default()
        };
        let (sql, args) = dead_letters(&q, "SELECT x FROM dead_letters", &PG);
        assert_eq!(
            sql,
            "SELECT x FROM dead_letters WHERE id < $1 AND errors -> -1 ->> 'kind' = $2 AND replays = 0 ORDER BY id DESC LIMIT $3"
        );
        assert_eq!(
            args,
            vec![Arg::Int(9), Arg::Text("timeout".into()), Arg::Int(10)]
        );
    }
}
