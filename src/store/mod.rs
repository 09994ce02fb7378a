//! The durable event store: trigger events, their dedupe claims, the rejection audit
//! log and small per-source state (a captured Notion token, a cron source's last fire),
//! and, on the same database, the outbox ([`crate::outbox::OutboxStore`]).
//!
//! Two backends implement [`Backend`] and the outbox's trait, each in its own folder:
//! [`sqlite`] (embedded, the default) and, with the `postgres` feature, `postgres` for
//! several runtime processes sharing one database. Callers do not use a backend
//! directly: they hold a [`Store`], whose group commit ([`group_commit`]) gathers the
//! writes of concurrent requests into one transaction, so a burst of webhooks shares
//! one fsync instead of paying one each.
//!
//! Inside, bottom to top: [`body_codec`] (how bodies are stored), `options`
//! ([`StoreOptions`], [`redact_url`]), `backend` (the [`Backend`] trait and its
//! values), `outbox_rows` (the outbox columns' encoding both backends share),
//! `version_rows` (what both backends' binding-version code shares),
//! [`group_commit`], the two backends, and `open` ([`open_backend`]). This file only
//! declares and re-exports them.

pub(crate) mod body_codec;
pub(crate) mod group_commit;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod sqlite;

mod backend;
mod backfill_rows;
mod listing;
mod open;
mod options;
mod outbox_rows;
#[cfg(test)]
mod testing;
mod version_rows;

pub(crate) use backend::Rejected;
pub use backend::{Appended, Backend, EventQuery, StateWrite, Write};
pub(crate) use group_commit::GroupCommitStats;
pub use group_commit::{GroupAppend, Store};
pub use open::open_backend;
pub(crate) use open::probe_schema;
pub use options::{redact_url, StoreOptions};
