//! What the SQLite and PostgreSQL [`VersionStore`](crate::triggers::versions::VersionStore)
//! code share, written once so both backends decide and store the same things: whether
//! a version record is new, the same as a stored one, or in conflict with one; the
//! stored spellings read back into records and log entries; when a pause started; and
//! the error a stranded row is dead-lettered with.
//!
//! Plain functions of their inputs, no I/O, so they are tested here once.

use crate::error::{Error, Result};
use crate::outbox::model::AttemptError;
use crate::triggers::versions::{
    LifecycleCommit, LifecycleEntry, LifecycleEvent, Origin, VersionRecord, VersionState,
};

/// The label of the error a row gets when it is dead-lettered because no version of
/// its binding has the fingerprint it was enqueued under.
pub(crate) const STRANDED_KIND: &str = "stranded";

/// How many hex characters of a fingerprint a message shows: enough to tell versions
/// apart, short enough to read.
const FINGERPRINT_SHOWN: usize = 12;

/// What to do with a version record, given the stored records of its binding that
/// share its number or its fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upsert {
    /// Nothing stored shares either: insert it.
    Insert,
    /// The same (number, fingerprint) is stored: update its state, pin and time.
    Update,
}

/// Decides [`Upsert`] for `record` from `found`, the stored (version, fingerprint)
/// pairs of its binding with its number or its fingerprint; a pair that shares one but
/// not the other is a [`Error::Conflict`] (another process recorded a version at the
/// same time), naming the binding and both versions.
pub(crate) fn upsert(record: &VersionRecord, found: &[(i64, String)]) -> Result<Upsert> {
    let mine = (i64::from(record.version), record.fingerprint.as_str());
    match found.iter().find(|(v, fp)| (*v, fp.as_str()) != mine) {
        Some((v, fp)) => Err(Error::Conflict(format!(
            "binding {id}@v{n} (fingerprint {mine_fp}) conflicts with the stored {id}@v{v} \
             (fingerprint {theirs}): another process recorded a version of {id} at the same \
             time; reload the versions and decide again",
            id = record.binding_id,
            n = record.version,
            mine_fp = short(&record.fingerprint),
            theirs = short(fp),
        ))),
        None if found.is_empty() => Ok(Upsert::Insert),
        None => Ok(Upsert::Update),
    }
}

/// The first [`FINGERPRINT_SHOWN`] characters of a fingerprint.
fn short(fingerprint: &str) -> &str {
    fingerprint
        .char_indices()
        .nth(FINGERPRINT_SHOWN)
        .map_or(fingerprint, |(i, _)| &fingerprint[..i])
}

/// When the pause of `binding_id` in `commit` started: the time of the commit's
/// `paused` entry for it, or `now_ms` when it has none.
pub(crate) fn paused_at(commit: &LifecycleCommit, binding_id: &str, now_ms: i64) -> i64 {
    commit
        .entries
        .iter()
        .find(|e| e.binding_id == binding_id && e.event == LifecycleEvent::Paused)
        .map_or(now_ms, |e| e.at_ms)
}

/// A version number as the databases store it.
pub(crate) fn version_col(version: u32) -> i64 {
    i64::from(version)
}

/// A stored version number back; out of range (never written) is an error, not a
/// silently different version.
fn version_of(binding_id: &str, n: i64) -> Result<u32> {
    u32::try_from(n).map_err(|_| bad(binding_id, "version number", &n.to_string()))
}

fn bad(binding_id: &str, what: &str, value: &str) -> Error {
    Error::Store(format!(
        "binding {binding_id} has a stored {what} this build cannot read ({value:?}); it was \
         written by hand or by a newer switchboard"
    ))
}

/// One `trigger_versions` row, in column order (binding id, version, fingerprint,
/// definition, origin, state, pinned, created at, updated at).
pub(crate) type VersionRow = (String, i64, String, String, String, String, bool, i64, i64);

/// A stored version record back. An unknown state or origin is an error: deciding on a
/// record that cannot be read would be deciding blind.
pub(crate) fn version_record(row: VersionRow) -> Result<VersionRecord> {
    let (binding_id, version, fingerprint, definition, origin, state, pinned, created, updated) =
        row;
    Ok(VersionRecord {
        version: version_of(&binding_id, version)?,
        origin: Origin::parse(&origin).ok_or_else(|| bad(&binding_id, "origin", &origin))?,
        state: VersionState::parse(&state).ok_or_else(|| bad(&binding_id, "state", &state))?,
        binding_id,
        fingerprint,
        definition,
        pinned,
        created_at_ms: created,
        updated_at_ms: updated,
    })
}

/// One `trigger_lifecycle` row, in column order (seq, binding id, version,
/// fingerprint, event, reason, process, at).
pub(crate) type EntryRow = (i64, String, i64, String, String, String, String, i64);

/// A stored log entry back; an unknown event is an error, as in [`version_record`].
pub(crate) fn lifecycle_entry(row: EntryRow) -> Result<LifecycleEntry> {
    let (seq, binding_id, version, fingerprint, event, reason, process, at_ms) = row;
    Ok(LifecycleEntry {
        seq,
        version: version_of(&binding_id, version)?,
        event: LifecycleEvent::parse(&event)
            .ok_or_else(|| bad(&binding_id, "lifecycle event", &event))?,
        binding_id,
        fingerprint,
        reason,
        process,
        at_ms,
    })
}

/// The error a row of `binding_id` enqueued under `fingerprint`, tried `attempts`
/// times, is dead-lettered with when no version has that fingerprint: the runtime
/// cannot build the definition it would have to run the row under.
pub(crate) fn stranded_error(
    binding_id: &str,
    fingerprint: &str,
    attempts: u32,
    now_ms: i64,
) -> AttemptError {
    AttemptError {
        attempt: attempts,
        at_ms: now_ms,
        kind: STRANDED_KIND.into(),
        message: format!(
            "binding {binding_id} has no version with fingerprint {}: the runtime cannot \
             rebuild the definition this row was enqueued under, so it is dead-lettered \
             instead of left in the outbox",
            short(fingerprint)
        ),
        took_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u32, fingerprint: &str) -> VersionRecord {
        VersionRecord {
            binding_id: "b".into(),
            version,
            fingerprint: fingerprint.into(),
            definition: "{}".into(),
            origin: Origin::Manifest,
            state: VersionState::Active,
            pinned: false,
            created_at_ms: 1,
            updated_at_ms: 1,
        }
    }

    #[test]
    fn a_record_is_new_the_same_or_in_conflict() {
        let r = record(2, "ffff");
        assert_eq!(upsert(&r, &[]).unwrap(), Upsert::Insert);
        assert_eq!(upsert(&r, &[(2, "ffff".into())]).unwrap(), Upsert::Update);
        for clash in [(2, "eeee".to_owned()), (3, "ffff".to_owned())] {
            let err = upsert(&r, &[clash]).unwrap_err();
            assert!(matches!(err, Error::Conflict(_)), "{err:?}");
            assert!(err.to_string().contains("b@v2"), "{err}");
        }
    }

    #[test]
    fn a_pause_starts_at_its_entry_or_now() {
        let mut commit = LifecycleCommit::default();
        assert_eq!(paused_at(&commit, "b", 9), 9);
        commit.entries.push(LifecycleEntry {
            seq: 0,
            binding_id: "b".into(),
            version: 1,
            fingerprint: "f".into(),
            event: LifecycleEvent::Paused,
            reason: "admin".into(),
            process: "h:1".into(),
            at_ms: 5,
        });
        assert_eq!(paused_at(&commit, "b", 9), 5);
        assert_eq!(paused_at(&commit, "c", 9), 9);
    }

    #[test]
    fn unreadable_rows_are_errors_and_the_stranded_error_names_the_fingerprint() {
        let row = |state: &str| -> VersionRow {
            let (b, f, d) = ("b".to_owned(), "f".to_owned(), "{}".to_owned());
            (b, 1, f, d, "dynamic".into(), state.into(), true, 1, 2)
        };
        assert_eq!(version_record(row("draining")).unwrap().version, 1);
        assert!(version_record(row("gone")).is_err());
        let e = stranded_error("b", "0123456789abcdef", 3, 7);
        assert_eq!((e.kind.as_str(), e.attempt, e.at_ms), ("stranded", 3, 7));
        assert!(
            e.message.contains("fingerprint 0123456789ab:"),
            "{}",
            e.message
        );
    }
}
