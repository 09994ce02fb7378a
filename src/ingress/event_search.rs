//! The event search behind `GET /api/v1/events` and the console's event list: one
//! operation, [`list_events`], that the HTTP handler (`runtime::http::ops_api`) and the
//! console's HTML handlers both call, so the page and the API cannot disagree and the
//! console never calls its own HTTP API.
//!
//! Filters: `source=`, `kind=`, `delivery_id=` (the event's dedupe key as stored, or
//! for GitHub the `X-GitHub-Delivery` id), `since=` / `until=` (received time, unix
//! ms, `since` inclusive, `until` exclusive), `limit=` (1 to [`MAX_PAGE`], default
//! [`DEFAULT_PAGE`]) and `after=` (the previous page's `next`). Every page is one
//! keyset step down the events' sequence numbers with the filters applied, so paging
//! stays correct under any combination and never loads a table (the store serves
//! each equality filter from an index).

use std::collections::HashMap;

use serde::Serialize;

use crate::store::{EventQuery, Store};
use crate::triggers::TriggerEvent;

/// Largest page of events or rejections.
pub(crate) const MAX_PAGE: usize = 500;
/// Page size when `limit` is not given.
pub(crate) const DEFAULT_PAGE: usize = 50;

/// A filter the caller got wrong: answered 400 with this reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadFilter {
    /// A stable label (`bad_limit`, `bad_cursor`, `bad_filter`).
    pub(crate) reason: &'static str,
    /// What to send instead, for a person.
    pub(crate) message: String,
}

/// What to list, parsed and checked: build it with [`EventFilter::parse`] from query
/// parameters, or directly (the console does, from its own form).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EventFilter {
    /// Only this source's events.
    pub(crate) source: Option<String>,
    /// Only events of this kind.
    pub(crate) kind: Option<String>,
    /// Only the event(s) with this delivery id (dedupe key).
    pub(crate) delivery_id: Option<String>,
    /// Received at or after (unix ms).
    pub(crate) since_ms: Option<i64>,
    /// Received before (unix ms).
    pub(crate) until_ms: Option<i64>,
    /// Page size, 1 to [`MAX_PAGE`].
    pub(crate) limit: usize,
    /// The previous page's `next`: only events older than it.
    pub(crate) after: Option<i64>,
}

/// Parses a page size: absent means [`DEFAULT_PAGE`], anything but 1 to [`MAX_PAGE`] is
/// refused (a silent clamp would hide a client's bug).
pub(crate) fn parse_limit(raw: Option<&str>) -> Result<usize, BadFilter> {
    match raw {
        None => Ok(DEFAULT_PAGE),
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| BadFilter {
                reason: "bad_limit",
                message: format!("limit must be an integer from 1 to {MAX_PAGE}"),
            }),
    }
}

/// Parses a unix-ms instant parameter named `name`.
pub(crate) fn parse_ms(name: &str, raw: Option<&str>) -> Result<Option<i64>, BadFilter> {
    match raw.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => s
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| BadFilter {
                reason: "bad_filter",
                message: format!("{name} must be a time in milliseconds since the Unix epoch"),
            }),
    }
}

impl EventFilter {
    /// Reads the filter from query parameters (empty values count as absent, as an
    /// HTML form sends them).
    pub(crate) fn parse(params: &HashMap<String, String>) -> Result<EventFilter, BadFilter> {
        let text = |k: &str| params.get(k).filter(|s| !s.is_empty()).cloned();
        let after = match params.get("after").map(String::as_str) {
            None | Some("") => None,
            Some(s) => Some(s.parse::<i64>().map_err(|_| BadFilter {
                reason: "bad_cursor",
                message: "after must be the `next` value of a previous page".into(),
            })?),
        };
        Ok(EventFilter {
            source: text("source"),
            kind: text("kind"),
            delivery_id: text("delivery_id"),
            since_ms: parse_ms("since", params.get("since").map(String::as_str))?,
            until_ms: parse_ms("until", params.get("until").map(String::as_str))?,
            limit: parse_limit(params.get("limit").map(String::as_str))?,
            after,
        })
    }
}

/// One page of events, newest first, as `GET /api/v1/events` answers it and the
/// console lists it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EventsPage {
    /// The events, newest first.
    pub(crate) events: Vec<TriggerEvent>,
    /// Set when the page is full (more may match): pass it as `after`.
    pub(crate) next: Option<String>,
}

/// One page of events, newest first: `{"events": [...], "next": cursor or null}`.
/// `next` is set when the page is full (more may match); pass it as `after`.
pub(crate) async fn list_events(store: &Store, f: &EventFilter) -> crate::Result<EventsPage> {
    let limit = f.limit.clamp(1, MAX_PAGE);
    let q = EventQuery {
        source: f.source.clone(),
        limit,
        before_seq: f.after,
        event_id: None,
        kind: f.kind.clone(),
        dedupe_key: f.delivery_id.clone(),
        since_ms: f.since_ms,
        until_ms: f.until_ms,
    };
    let rows = store.backend().events(&q).await?;
    let next = if rows.len() == limit {
        rows.last().map(|r| r.seq.to_string())
    } else {
        None
    };
    let events = rows.into_iter().map(|r| r.event).collect();
    Ok(EventsPage { events, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_filter_reads_every_parameter_and_treats_empty_as_absent() {
        let f = EventFilter::parse(&params(&[
            ("source", "gh"),
            ("kind", ""),
            ("delivery_id", "d-1"),
            ("since", "10"),
            ("until", ""),
            ("limit", "7"),
            ("after", "99"),
        ]))
        .unwrap();
        assert_eq!(
            f,
            EventFilter {
                source: Some("gh".into()),
                kind: None,
                delivery_id: Some("d-1".into()),
                since_ms: Some(10),
                until_ms: None,
                limit: 7,
                after: Some(99),
            }
        );
    }

    #[test]
    fn bad_values_are_refused_with_their_reason() {
        let reason = |p: &[(&str, &str)]| EventFilter::parse(&params(p)).unwrap_err().reason;
        assert_eq!(reason(&[("limit", "0")]), "bad_limit");
        assert_eq!(reason(&[("limit", "501")]), "bad_limit");
        assert_eq!(reason(&[("since", "yesterday")]), "bad_filter");
        assert_eq!(reason(&[("until", "-5")]), "bad_filter");
        assert_eq!(reason(&[("after", "x")]), "bad_cursor");
    }
}
