//! Pinning: a pinned version stays in memory whatever its state and age, so replays
//! (and the rows they enqueue, in every process) can run under it. Pinning a version
//! that has already left memory brings it back from its stored definition
//! ([`Lifecycle::recall`]); both write a `pinned` entry to the lifecycle log, which is
//! also how other processes on the same database learn of it (they restore from the
//! store when the log moves, and a restore keeps pinned versions in memory).

use std::sync::Arc;

use super::{entry, label, Lifecycle, Version};
use crate::error::{Error, Result};
use crate::triggers::binding::Binding;
use crate::triggers::versions::{LifecycleCommit, LifecycleEvent, VersionRecord};

impl Lifecycle {
    /// Pins (or unpins) a version in memory. A version not in memory cannot be
    /// unpinned (it is not pinned) and is pinned through [`Lifecycle::recall`].
    pub(crate) fn set_pinned(
        &mut self,
        id: &str,
        number: u32,
        pinned: bool,
        reason: &str,
        now_ms: i64,
    ) -> Result<LifecycleCommit> {
        let process = self.process.clone();
        let v = self
            .entries
            .get_mut(id)
            .and_then(|e| e.versions.get_mut(&number))
            .ok_or_else(|| {
                Error::NotFound(format!("no version {} in memory", label(id, number)))
            })?;
        let mut commit = LifecycleCommit::default();
        if v.record.pinned != pinned {
            v.record.pinned = pinned;
            v.record.updated_at_ms = now_ms;
            commit.versions.push(v.record.clone());
            let event = if pinned {
                LifecycleEvent::Pinned
            } else {
                LifecycleEvent::Unpinned
            };
            commit
                .entries
                .push(entry(&process, &v.record, event, reason, now_ms));
        }
        self.collect();
        Ok(commit)
    }

    /// Brings a version that left memory back into it, pinned, with `binding` built
    /// from `record`'s stored definition; pins it when it is in memory already. The
    /// version keeps its state (a terminated version stays terminated: it takes no new
    /// events, and only rows enqueued for it explicitly, replays, run under it).
    pub(crate) fn recall(
        &mut self,
        mut record: VersionRecord,
        binding: Arc<Binding>,
        reason: &str,
        now_ms: i64,
    ) -> Result<LifecycleCommit> {
        let (id, number) = (record.binding_id.clone(), record.version);
        let e = self.entries.entry(id.clone()).or_default();
        if !e.versions.contains_key(&number) {
            if binding.fingerprint != record.fingerprint {
                return Err(Error::Config(format!(
                    "{}: its stored definition builds to another fingerprint in this build",
                    label(&id, number)
                )));
            }
            let mut binding = binding;
            Arc::make_mut(&mut binding).version = number;
            e.numbers.insert(record.fingerprint.clone(), number);
            record.pinned = false;
            e.versions.insert(number, Version { binding, record });
        }
        self.set_pinned(&id, number, true, reason, now_ms)
    }
}
