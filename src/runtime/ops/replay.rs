//! Replays under the version that was in force: `POST /api/v1/events/{id}/replay`
//! (optionally `?binding=`, `?version=`) and `POST /api/v1/dead-letters/{id}/replay`
//! (optionally `?version=`).
//!
//! An event is replayed against each binding as it was when the event was received:
//! the version active at that instant ([`Lifecycle::as_of`]), its sources, kinds and
//! filter deciding whether it takes the event (a binding named with `?binding=` takes
//! it regardless, as `outbox.enqueue` does). A dead letter is replayed under the version
//! it ran under. `?version=N` pins the replay to version N instead.
//!
//! A version that has left memory (the newest two terminated versions of a binding
//! and pinned ones stay) is rebuilt from the definition the store keeps of it
//! (`trigger_versions`) and pinned, so the replayed rows run under it in every
//! process; the answer's `notes` say so, since the pin stays until an operator lifts
//! it. Only when that definition is gone (never recorded, or it no longer builds)
//! does a replay fall back to the live version, and the notes say why. A replay is
//! asked for explicitly, so a binding's `dedupe_key` and `debounce` do not apply to
//! it.

use std::collections::HashMap;

use serde::Serialize;

use super::base::{OpError, Operations};
use crate::clock::now_ms;
use crate::error::Error;
use crate::outbox::model::{DeadLetterQuery, Enqueue};
use crate::store::EventQuery;
use crate::triggers::binding::Binding;
use crate::triggers::filter::EventContext;
use crate::triggers::lifecycle::{label, AsOf, Lifecycle};
use crate::triggers::TriggerEvent;

/// The version a replay runs under, and why, if not the one in force at the time.
struct Chosen<'a> {
    binding: &'a Binding,
    note: Option<String>,
}

/// What bringing a version back into memory for a replay found.
enum Recalled {
    /// It was in memory.
    Already,
    /// It had left memory and was rebuilt from the store, pinned.
    Back,
    /// It cannot be rebuilt: why (never recorded, or its definition no longer builds).
    Gone(String),
}

/// Whether `b` takes `event`: its sources, events and filter.
fn takes(b: &Binding, event: &TriggerEvent) -> bool {
    b.takes(&event.source, &event.kind)
        && b.filter
            .as_ref()
            .is_none_or(|f| f.eval_bool_in(&EventContext::new(event)).unwrap_or(false))
}

/// The note a replay answers with when it brought a version back.
fn recalled_note(id: &str, number: u32) -> String {
    format!(
        "{} had left memory; it was rebuilt from its stored definition and pinned (unpin it once the replay is done)",
        label(id, number)
    )
}

/// Picks the version of `id` for an event received at `at_ms`; `None` when the
/// binding had no version then and was not named. `gone` says why the version wanted
/// could not be brought back into memory, if it could not.
fn choose<'a>(
    current: &'a Lifecycle,
    id: &str,
    at_ms: i64,
    pinned: Option<u32>,
    named: bool,
    gone: Option<&String>,
) -> Result<Option<Chosen<'a>>, OpError> {
    if let Some(n) = pinned {
        let b = current.version(id, n).ok_or_else(|| {
            OpError::NotFound(
                gone.cloned()
                    .unwrap_or_else(|| format!("{} is not in memory", label(id, n))),
            )
        })?;
        return Ok(Some(Chosen {
            binding: b,
            note: None,
        }));
    }
    let live_or = |note: String| -> Result<Option<Chosen<'a>>, OpError> {
        match current.active(id) {
            Some(b) => Ok(Some(Chosen {
                binding: b,
                note: Some(format!(
                    "{note}; replayed under the live {}",
                    label(id, b.version)
                )),
            })),
            None => Err(OpError::Invalid(format!(
                "{note}, and binding {id:?} has no active version to fall back to"
            ))),
        }
    };
    match current.as_of(id, at_ms) {
        AsOf::Version(n) => Ok(current.version(id, n).map(|b| Chosen {
            binding: b,
            note: None,
        })),
        AsOf::Collected { number } => live_or(format!(
            "{} (in force when the event arrived) left memory and cannot be rebuilt: {}",
            label(id, number),
            gone.map_or("it was collected again", String::as_str)
        )),
        AsOf::NoneThen if named => live_or(format!(
            "binding {id:?} had no active version when the event arrived"
        )),
        AsOf::NoneThen => Ok(None),
    }
}

impl Operations {
    /// Whether version `number` of `id`, as the store keeps it, takes `event` (its
    /// sources, events and filter). A version whose definition cannot be read counts
    /// as taking it: the replay then says why it fell back.
    async fn stored_takes(&self, id: &str, number: u32, event: &TriggerEvent) -> bool {
        if let Some(b) = self.triggers.current().version(id, number) {
            return takes(b, event);
        }
        match self.control.stored(id, number).await {
            Ok((_, b)) => takes(&b, event),
            Err(_) => true,
        }
    }

    /// Makes sure version `number` of `id` is in memory for a replay, rebuilding it
    /// from the store (pinned) if it left.
    async fn recall(&self, id: &str, number: u32) -> Result<Recalled, OpError> {
        if self.triggers.current().version(id, number).is_some() {
            return Ok(Recalled::Already);
        }
        let reason = "rebuilt from its stored definition for a replay";
        match self.control.recall(id, number, reason).await {
            Ok(_) => Ok(Recalled::Back),
            Err(Error::NotFound(why) | Error::Config(why)) => Ok(Recalled::Gone(why)),
            Err(e) => Err(e.into()),
        }
    }
}

impl Operations {
    async fn stored_event(&self, event_id: &str) -> Result<TriggerEvent, OpError> {
        let found = self
            .store
            .backend()
            .events(&EventQuery {
                limit: 1,
                event_id: Some(event_id.to_owned()),
                ..EventQuery::default()
            })
            .await?;
        found.into_iter().next().map(|e| e.event).ok_or_else(|| {
            OpError::NotFound(format!("no event {event_id:?} (expired, or never stored)"))
        })
    }

    /// Replays a stored event: to `binding` if named, else to every binding whose
    /// version in force at the event's arrival takes it; under that version, or
    /// `version` if given. Answers with the rows enqueued and any notes.
    pub(crate) async fn replay_event(
        &self,
        event_id: &str,
        binding: Option<&str>,
        version: Option<u32>,
    ) -> Result<EventReplay, OpError> {
        if version.is_some() && binding.is_none() {
            return Err(OpError::Invalid(
                "?version= pins one binding's version: name the binding with ?binding=".into(),
            ));
        }
        let event = self.stored_event(event_id).await?;
        let ids: Vec<String> = {
            let current = self.triggers.current();
            match binding {
                Some(b) => {
                    if current.view().iter().all(|v| v.id != b) {
                        return Err(OpError::NotFound(format!("no trigger binding {b:?}")));
                    }
                    vec![b.to_owned()]
                }
                None => current.view().into_iter().map(|v| v.id).collect(),
            }
        };
        let mut notes: Vec<String> = Vec::new();
        // Versions that left memory come back from the store first.
        let mut gone: HashMap<&str, String> = HashMap::new();
        let mut left_out: std::collections::HashSet<&str> = Default::default();
        for id in &ids {
            let wanted = version.or(
                match self.triggers.current().as_of(id, event.received_at_ms) {
                    AsOf::Collected { number } => Some(number),
                    _ => None,
                },
            );
            if let Some(n) = wanted {
                // Unnamed, a binding whose version then would not take the event is
                // left out before anything is pinned for it.
                if binding.is_none() && !self.stored_takes(id, n, &event).await {
                    left_out.insert(id.as_str());
                    continue;
                }
                match self.recall(id, n).await? {
                    Recalled::Already => {}
                    Recalled::Back => notes.push(recalled_note(id, n)),
                    Recalled::Gone(why) => {
                        gone.insert(id, why);
                    }
                }
            }
        }
        let current = self.triggers.current();
        let mut rows: Vec<Enqueue> = Vec::new();
        let mut labels = Vec::new();
        for id in &ids {
            if left_out.contains(id.as_str()) {
                continue;
            }
            let Some(chosen) = choose(
                &current,
                id,
                event.received_at_ms,
                version,
                binding.is_some(),
                gone.get(id.as_str()),
            )?
            else {
                continue;
            };
            let b = chosen.binding;
            if b.is_dead_letter_handler() {
                if binding.is_some() {
                    return Err(OpError::Invalid(format!(
                        "binding {id:?} is a dead-letter handler; it takes dead letters only"
                    )));
                }
                continue;
            }
            if binding.is_none() && !takes(b, &event) {
                continue;
            }
            let mut row = current
                .routing()
                .enqueue_for(b, &event, 0)
                .map_err(|e| OpError::Invalid(format!("binding {id:?}: {e}")))?;
            // A replay is asked for: never deduplicated or debounced away.
            row.dedupe = None;
            row.debounce_key = None;
            row.debounce_window_ms = None;
            rows.push(row);
            labels.push(label(id, b.version));
            notes.extend(chosen.note);
        }
        if !rows.is_empty() {
            let stored = self
                .store
                .backend()
                .enqueue_rows(&event.id, rows, now_ms())
                .await?;
            if stored == 0 {
                return Err(OpError::NotFound(format!(
                    "event {event_id:?} expired while it was being replayed"
                )));
            }
        }
        Ok(EventReplay {
            event_id: event.id.clone(),
            replayed: labels
                .into_iter()
                .map(|version| ReplayedTo { version })
                .collect(),
            notes,
        })
    }

    /// Replays a dead letter under the version it ran under, or `version` if given
    /// (rebuilt from the store if it left memory); the live version, with a note,
    /// only when its own cannot be rebuilt.
    pub(crate) async fn replay_dead_letter(
        &self,
        id: i64,
        version: Option<u32>,
    ) -> Result<DeadLetterReplay, OpError> {
        let backend = self.store.backend();
        let dl = backend
            .dead_letter(id)
            .await?
            .ok_or_else(|| OpError::NotFound(format!("no dead letter {id}")))?;
        let mut note = None;
        let fingerprint = if dl.queue.is_some() {
            None
        } else if let Some(n) = version {
            let gone = match self.recall(&dl.binding_id, n).await? {
                Recalled::Gone(why) => Some(why),
                Recalled::Back => {
                    note = Some(recalled_note(&dl.binding_id, n));
                    None
                }
                Recalled::Already => None,
            };
            let current = self.triggers.current();
            let chosen =
                choose(&current, &dl.binding_id, 0, Some(n), true, gone.as_ref())?.expect("pinned");
            Some(chosen.binding.fingerprint.clone())
        } else if self
            .triggers
            .current()
            .resolve(&dl.binding_id, &dl.fingerprint)
            .is_some()
        {
            None
        } else {
            let number = self
                .triggers
                .current()
                .number(&dl.binding_id, &dl.fingerprint);
            let why = match number {
                Some(n) => match self.recall(&dl.binding_id, n).await? {
                    Recalled::Already => None,
                    Recalled::Back => {
                        note = Some(recalled_note(&dl.binding_id, n));
                        None
                    }
                    Recalled::Gone(why) => Some(why),
                },
                None => Some("its version was never recorded".to_owned()),
            };
            match why {
                // Back in memory: it runs under its own version.
                None => None,
                Some(why) => {
                    let current = self.triggers.current();
                    let was = number
                        .map_or_else(|| "its version".to_owned(), |n| label(&dl.binding_id, n));
                    let Some(live) = current.active(&dl.binding_id) else {
                        return Err(OpError::Invalid(format!(
                            "{was} cannot be rebuilt ({why}) and binding {:?} has no active version to fall back to",
                            dl.binding_id
                        )));
                    };
                    note = Some(format!(
                        "{was} cannot be rebuilt ({why}); replayed under the live {}",
                        label(&dl.binding_id, live.version)
                    ));
                    Some(live.fingerprint.clone())
                }
            }
        };
        let current = self.triggers.current();
        let row = backend
            .replay(id, now_ms(), fingerprint.as_deref())
            .await?
            .ok_or_else(|| OpError::NotFound(format!("no dead letter {id}")))?;
        let version = fingerprint
            .as_deref()
            .or(Some(dl.fingerprint.as_str()))
            .and_then(|fp| current.number(&dl.binding_id, fp))
            .map(|n| label(&dl.binding_id, n));
        Ok(DeadLetterReplay {
            replayed: id,
            row_id: row,
            version,
            notes: note.into_iter().collect(),
        })
    }
}

/// What [`Operations::replay_event`] answers: the versions the event was enqueued for
/// again, and notes (a version collected from memory, a binding that would not take
/// it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct EventReplay {
    /// The event.
    pub(crate) event_id: String,
    /// One entry per row enqueued.
    pub(crate) replayed: Vec<ReplayedTo>,
    /// Why a binding was left out, or replayed under another version than asked.
    pub(crate) notes: Vec<String>,
}

/// One row an event replay enqueued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ReplayedTo {
    /// `id@vN`: the binding version it runs under.
    pub(crate) version: String,
}

/// What [`Operations::replay_dead_letter`] answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DeadLetterReplay {
    /// The dead letter's id.
    pub(crate) replayed: i64,
    /// The outbox row made for it.
    pub(crate) row_id: i64,
    /// `id@vN` it runs under, when known to this process.
    pub(crate) version: Option<String>,
    /// Set when its version was rebuilt from the store, or when it runs under the
    /// live version because its own cannot be.
    pub(crate) notes: Vec<String>,
}

/// Most dead letters one bulk replay call replays; a larger selection is replayed in
/// several calls, each resuming at the previous answer's `next`, so one request never
/// holds the store (or the HTTP client) for long.
pub(crate) const MAX_BULK_REPLAY: usize = 1000;

/// Which dead letters a bulk replay takes: newest first, all filters combined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeadLetterSelection {
    /// Only this binding's.
    pub(crate) binding: Option<String>,
    /// Only those whose last attempt failed with this kind (`handler`, `timeout`, …).
    pub(crate) error_kind: Option<String>,
    /// Only those dead-lettered at or after this instant (unix ms).
    pub(crate) since_ms: Option<i64>,
    /// Only those dead-lettered before this instant (unix ms).
    pub(crate) before_ms: Option<i64>,
    /// Resume below this dead-letter id (the previous call's `next`).
    pub(crate) after_id: Option<i64>,
    /// At most this many, 1 to [`MAX_BULK_REPLAY`].
    pub(crate) limit: usize,
    /// Replayed ones too (by default only dead letters never replayed are taken, so
    /// repeating a call replays nothing twice).
    pub(crate) include_replayed: bool,
}

/// What a bulk replay of dead letters answers ([`Operations::replay_dead_letters`]).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BulkReplay {
    /// How many were replayed.
    pub(crate) replayed: usize,
    /// Their ids, newest first.
    pub(crate) ids: Vec<i64>,
    /// Those that could not be (their binding gone, say), with why.
    pub(crate) failed: Vec<ReplayFailure>,
    /// Set when the page was full (more may match): pass it as `after`.
    pub(crate) next: Option<i64>,
}

/// A dead letter a bulk replay could not replay.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReplayFailure {
    pub(crate) id: i64,
    /// The error's stable code (`not_found`, `invalid`, …).
    pub(crate) error: &'static str,
    pub(crate) message: String,
}

impl Operations {
    /// Replays the dead letters `sel` selects, newest first, each through the single
    /// replay ([`Operations::replay_dead_letter`]: under the version it ran under),
    /// at most `sel.limit` of them. Answers `{"replayed": n, "failed": [{"id",
    /// "error", "message"}], "ids": [...], "next": id or null}`: `next` is set when
    /// the page was full (more may match); pass it as `after` to go on. A dead letter
    /// that cannot be replayed (its binding gone, say) is reported in `failed` and
    /// does not stop the others.
    pub(crate) async fn replay_dead_letters(
        &self,
        sel: &DeadLetterSelection,
    ) -> Result<BulkReplay, OpError> {
        if !(1..=MAX_BULK_REPLAY).contains(&sel.limit) {
            return Err(OpError::Invalid(format!(
                "limit must be from 1 to {MAX_BULK_REPLAY}"
            )));
        }
        let query = DeadLetterQuery {
            binding_id: sel.binding.clone(),
            limit: sel.limit,
            before_id: sel.after_id,
            since_ms: sel.since_ms,
            until_ms: sel.before_ms,
            error_kind: sel.error_kind.clone(),
            unreplayed: !sel.include_replayed,
        };
        let page = self.store.backend().dead_letters(&query).await?;
        let mut ids = Vec::new();
        let mut failed = Vec::new();
        for dl in &page {
            match self.replay_dead_letter(dl.id, None).await {
                Ok(_) => ids.push(dl.id),
                Err(OpError::Store(e)) => return Err(OpError::Store(e)),
                Err(e) => failed.push(ReplayFailure {
                    id: dl.id,
                    error: e.code(),
                    message: e.message(),
                }),
            }
        }
        let next = if page.len() == sel.limit {
            page.last().map(|d| d.id)
        } else {
            None
        };
        Ok(BulkReplay {
            replayed: ids.len(),
            ids,
            failed,
            next,
        })
    }
}
