//! The binding lifecycle as a decision core: which versions of which bindings exist,
//! which one takes new events, which still drain, and what to write down when that
//! changes. No I/O and no clock: every input (a new set of definitions, the rows left
//! per version, `now`) is an argument, every output a value, so each rule is a plain
//! `#[test]` (`lifecycle/tests.rs`).
//!
//! A binding id has versions; a version's identity is its definition fingerprint,
//! shown as `id@vN`. A version is `registering` → `active` → `draining` →
//! `terminated`:
//! - a reload (or a run-time registration) that keeps a binding's fingerprint changes
//!   nothing; a new fingerprint gets a new version (or, when that fingerprint was seen
//!   before, its old number back) and the active one starts draining; a binding that
//!   is gone starts draining;
//! - a draining version's rows (claimed or due) finish under it; once the store holds
//!   none of them, and [`DRAIN_SETTLE_MS`] has passed since it started draining (so a
//!   write routed just before the change has landed), it is terminated;
//! - terminated versions beyond the newest [`KEEP_TERMINATED`] of a binding are
//!   dropped from memory (never from the log), unless pinned.
//!
//! Pausing is per binding id: its events are still matched and kept as rows, and none
//! starts until it is resumed.
//!
//! Call order, as the runtime uses it: [`Lifecycle::restore`] from the store at start
//! (and again whenever another process wrote to the log); then for every change, on a
//! clone: the operation ([`Lifecycle::reload`], [`Lifecycle::register`],
//! [`Lifecycle::deregister`], [`Lifecycle::drain`], [`Lifecycle::pause`],
//! [`Lifecycle::resume`], [`Lifecycle::observe`]), which returns the
//! [`LifecycleCommit`] to write; the store writes it in one transaction; only then does
//! the clone replace the live state. A failed write changes nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use super::binding::Binding;
use super::registry::TriggerRegistry;
use super::versions::{
    LifecycleCommit, LifecycleEntry, LifecycleEvent, Origin, VersionRecord, VersionState,
};
use crate::error::{Error, Result};

/// Terminated versions of one binding kept in memory (resolvable for replays) besides
/// pinned ones: the newest two.
pub(crate) const KEEP_TERMINATED: usize = 2;

/// How long a version drains at least before it may be terminated (ms): a row routed
/// to it just before it stopped being active may still be in the group commit.
pub(crate) const DRAIN_SETTLE_MS: i64 = 500;

/// One version in memory.
#[derive(Debug, Clone)]
pub(crate) struct Version {
    /// The definition, built.
    pub(crate) binding: Arc<Binding>,
    /// The stored record (number, state, origin, definition text).
    pub(crate) record: VersionRecord,
}

/// When a version took new events: from `from_ms` until `to_ms` (open while active).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Span {
    number: u32,
    from_ms: i64,
    to_ms: Option<i64>,
}

/// One binding id.
#[derive(Debug, Clone, Default)]
struct Entry {
    /// Versions in memory, by number.
    versions: BTreeMap<u32, Version>,
    /// Every number ever recorded for a fingerprint of this id (so a fingerprint seen
    /// before gets its number back after its version left memory).
    numbers: HashMap<String, u32>,
    /// Active intervals, oldest first: as-of resolution reads them.
    spans: Vec<Span>,
    /// Whether the binding is paused.
    paused: bool,
    /// Position in routing order (manifest order, then registration order).
    order: (u8, usize),
}

impl Entry {
    fn active(&self) -> Option<&Version> {
        self.versions
            .values()
            .find(|v| v.record.state == VersionState::Active)
    }

    fn next_number(&self) -> u32 {
        self.numbers.values().copied().max().unwrap_or(0) + 1
    }
}

/// What as-of resolution found (the live version is [`Lifecycle::active`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AsOf {
    /// The version (its number) active at that instant, still in memory.
    Version(u32),
    /// That version (`number`) was collected from memory.
    Collected {
        /// The collected version's number.
        number: u32,
    },
    /// No version was active then (before the first, or while removed).
    NoneThen,
}

/// One binding as an operator sees it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BindingView {
    /// The id.
    pub(crate) id: String,
    /// Manifest or dynamic (of its newest version).
    pub(crate) origin: Origin,
    /// Whether it is paused.
    pub(crate) paused: bool,
    /// The active version's number, if any.
    pub(crate) active: Option<u32>,
    /// Versions in memory: number, state, fingerprint, pinned.
    pub(crate) versions: Vec<VersionView>,
}

/// One version as an operator sees it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VersionView {
    /// Its number.
    pub(crate) version: u32,
    /// `id@vN`.
    pub(crate) label: String,
    /// Its state.
    pub(crate) state: VersionState,
    /// Its fingerprint.
    pub(crate) fingerprint: String,
    /// Whether it is pinned.
    pub(crate) pinned: bool,
}

/// The versions of every binding, and the routing registry of the active ones.
#[derive(Debug, Clone)]
pub(crate) struct Lifecycle {
    process: String,
    entries: BTreeMap<String, Entry>,
    routing: Arc<TriggerRegistry>,
    next_dynamic: usize,
}

/// The label of a version: `id@vN`.
pub(crate) fn label(id: &str, number: u32) -> String {
    format!("{id}@v{number}")
}

impl Lifecycle {
    /// An empty lifecycle for `process` (`host:pid`, written in the log).
    pub(crate) fn new(process: impl Into<String>) -> Lifecycle {
        Lifecycle {
            process: process.into(),
            entries: BTreeMap::new(),
            routing: Arc::new(TriggerRegistry::default()),
            next_dynamic: 0,
        }
    }

    /// Rebuilds the state from the store: every version record, each with its built
    /// binding (`None` when its definition no longer builds: its number stays known,
    /// its rows cannot run), the whole log (for the active intervals) and the paused
    /// ids. Terminated versions beyond the newest [`KEEP_TERMINATED`] stay out of
    /// memory unless pinned. `manifest_order` gives the routing order of manifest ids.
    pub(crate) fn restore(
        process: impl Into<String>,
        records: Vec<(VersionRecord, Option<Arc<Binding>>)>,
        log: &[LifecycleEntry],
        pauses: &[String],
        manifest_order: &[String],
    ) -> Lifecycle {
        let mut l = Lifecycle::new(process);
        for (record, binding) in records {
            let e = l.entries.entry(record.binding_id.clone()).or_default();
            e.numbers.insert(record.fingerprint.clone(), record.version);
            if let Some(mut binding) = binding {
                Arc::make_mut(&mut binding).version = record.version;
                e.versions
                    .insert(record.version, Version { binding, record });
            }
        }
        for entry in log {
            let Some(e) = l.entries.get_mut(&entry.binding_id) else {
                continue;
            };
            match entry.event {
                LifecycleEvent::Active => {
                    close_span(&mut e.spans, entry.at_ms);
                    e.spans.push(Span {
                        number: entry.version,
                        from_ms: entry.at_ms,
                        to_ms: None,
                    });
                }
                LifecycleEvent::Draining | LifecycleEvent::Terminated
                    if e.spans.last().is_some_and(|s| s.number == entry.version) =>
                {
                    close_span(&mut e.spans, entry.at_ms);
                }
                _ => {}
            }
        }
        for id in pauses {
            if let Some(e) = l.entries.get_mut(id) {
                e.paused = true;
            }
        }
        let position: HashMap<&str, usize> = manifest_order
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        for (id, e) in &mut l.entries {
            e.order = match position.get(id.as_str()) {
                Some(&i) => (0, i),
                None => {
                    l.next_dynamic += 1;
                    (1, l.next_dynamic)
                }
            };
        }
        l.collect();
        l.refresh();
        l
    }

    /// The registry new events are routed with: the active version of every binding,
    /// paused ones included (their events are kept as rows).
    pub(crate) fn routing(&self) -> &Arc<TriggerRegistry> {
        &self.routing
    }

    /// The active version of `id`.
    pub(crate) fn active(&self, id: &str) -> Option<&Arc<Binding>> {
        self.entries.get(id)?.active().map(|v| &v.binding)
    }

    /// The version of `id` whose fingerprint is `fingerprint`, if in memory: what a
    /// row enqueued under it runs with.
    pub(crate) fn resolve(&self, id: &str, fingerprint: &str) -> Option<&Arc<Binding>> {
        self.entries
            .get(id)?
            .versions
            .values()
            .find(|v| v.record.fingerprint == fingerprint)
            .map(|v| &v.binding)
    }

    /// Version `number` of `id`, if in memory (pinned versions always are).
    pub(crate) fn version(&self, id: &str, number: u32) -> Option<&Arc<Binding>> {
        self.entries
            .get(id)?
            .versions
            .get(&number)
            .map(|v| &v.binding)
    }

    /// The number of `id`'s version with `fingerprint`, if it was ever recorded.
    pub(crate) fn number(&self, id: &str, fingerprint: &str) -> Option<u32> {
        self.entries.get(id)?.numbers.get(fingerprint).copied()
    }

    /// Whether `id` is paused.
    pub(crate) fn is_paused(&self, id: &str) -> bool {
        self.entries.get(id).is_some_and(|e| e.paused)
    }

    /// Every version that may start rows, of a binding not paused: active or draining
    /// ones, and, of a binding with none of those, its pinned terminated ones (a
    /// replay under a pinned version of a removed binding must still be claimed; a
    /// binding with a live version is claimed anyway, and its rows of any version in
    /// memory run).
    pub(crate) fn claimable(&self) -> impl Iterator<Item = &Arc<Binding>> + '_ {
        let live = |v: &&Version| {
            matches!(
                v.record.state,
                VersionState::Active | VersionState::Draining
            )
        };
        self.entries
            .values()
            .filter(|e| !e.paused)
            .flat_map(move |e| {
                let any_live = e.versions.values().any(|v| live(&v));
                e.versions
                    .values()
                    .filter(move |v| if any_live { live(v) } else { v.record.pinned })
            })
            .map(|v| &v.binding)
    }

    /// Every version in memory (for permit gates: a version's rows need one).
    pub(crate) fn versions(&self) -> impl Iterator<Item = &Version> + '_ {
        self.entries.values().flat_map(|e| e.versions.values())
    }

    /// The bindings as an operator sees them, in routing order.
    pub(crate) fn view(&self) -> Vec<BindingView> {
        let mut ids: Vec<(&String, &Entry)> = self.entries.iter().collect();
        ids.sort_by_key(|(_, e)| e.order);
        ids.into_iter()
            .filter(|(_, e)| !e.versions.is_empty())
            .map(|(id, e)| BindingView {
                id: id.clone(),
                origin: e
                    .versions
                    .values()
                    .last()
                    .map_or(Origin::Manifest, |v| v.record.origin),
                paused: e.paused,
                active: e.active().map(|v| v.record.version),
                versions: e
                    .versions
                    .values()
                    .map(|v| VersionView {
                        version: v.record.version,
                        label: label(id, v.record.version),
                        state: v.record.state,
                        fingerprint: v.record.fingerprint.clone(),
                        pinned: v.record.pinned,
                    })
                    .collect(),
            })
            .collect()
    }

    /// The version of `id` that was active at `at_ms` (when an event was received).
    pub(crate) fn as_of(&self, id: &str, at_ms: i64) -> AsOf {
        let Some(e) = self.entries.get(id) else {
            return AsOf::NoneThen;
        };
        let span = e
            .spans
            .iter()
            .rev()
            .find(|s| s.from_ms <= at_ms && s.to_ms.is_none_or(|to| at_ms < to));
        match span {
            None => AsOf::NoneThen,
            Some(s) if e.versions.contains_key(&s.number) => AsOf::Version(s.number),
            Some(s) => AsOf::Collected { number: s.number },
        }
    }

    /// Applies the configuration's `[[triggers]]` (in file order): unchanged bindings
    /// stay as they are, changed ones get a new version and the old one drains, missing
    /// manifest bindings drain. The whole new set (with the dynamic bindings) is
    /// checked first, with the errors a start gives; an error changes nothing.
    pub(crate) fn reload(
        &mut self,
        manifest: Vec<Binding>,
        now_ms: i64,
    ) -> Result<LifecycleCommit> {
        self.apply_manifest(manifest, now_ms, false)
    }

    /// [`Lifecycle::reload`] at start: here the file wins over a dynamic binding of the
    /// same id (which drains), since refusing would leave a runtime that cannot start
    /// and so cannot deregister it.
    pub(crate) fn start(&mut self, manifest: Vec<Binding>, now_ms: i64) -> Result<LifecycleCommit> {
        self.apply_manifest(manifest, now_ms, true)
    }

    fn apply_manifest(
        &mut self,
        manifest: Vec<Binding>,
        now_ms: i64,
        file_wins: bool,
    ) -> Result<LifecycleCommit> {
        let ids: HashSet<&str> = manifest.iter().map(|b| b.id.as_str()).collect();
        for b in manifest.iter().filter(|_| !file_wins) {
            if let Some(v) = self.entries.get(&b.id).and_then(Entry::active) {
                if v.record.origin == Origin::Dynamic {
                    return Err(Error::Config(format!(
                        "trigger {:?} is registered at run time (a dynamic binding); deregister it before the configuration can define it",
                        b.id
                    )));
                }
            }
        }
        let mut next: Vec<Binding> = manifest.clone();
        next.extend(
            self.active_of(Origin::Dynamic)
                .filter(|b| !ids.contains(b.id.as_str()))
                .map(|b| (**b).clone()),
        );
        TriggerRegistry::new(next)?;
        let mut commit = LifecycleCommit::default();
        let gone: Vec<String> = self
            .active_of(Origin::Manifest)
            .filter(|b| !ids.contains(b.id.as_str()))
            .map(|b| b.id.clone())
            .collect();
        for id in gone {
            self.stop(&id, now_ms, "removed from the configuration", &mut commit);
        }
        for (i, b) in manifest.into_iter().enumerate() {
            self.entries.entry(b.id.clone()).or_default().order = (0, i);
            self.put(b, Origin::Manifest, now_ms, "configuration", &mut commit);
        }
        self.refresh();
        Ok(commit)
    }

    /// Registers a dynamic binding. A duplicate id is refused unless `replace` is set
    /// and the existing binding is dynamic; a manifest binding is never replaced this
    /// way (the configuration file owns it).
    pub(crate) fn register(
        &mut self,
        binding: Binding,
        replace: bool,
        now_ms: i64,
    ) -> Result<LifecycleCommit> {
        if let Some(v) = self.entries.get(&binding.id).and_then(Entry::active) {
            if v.record.origin == Origin::Manifest {
                return Err(Error::Config(format!(
                    "trigger {:?} is defined in the configuration file; change it there and reload",
                    binding.id
                )));
            }
            if !replace {
                return Err(Error::Conflict(format!(
                    "trigger {:?} is already registered; deregister it first, or register with replace",
                    binding.id
                )));
            }
        }
        let mut next = self.routing.to_vec_except(Some(&binding.id));
        next.push(binding.clone());
        TriggerRegistry::new(next)?;
        let e = self.entries.entry(binding.id.clone()).or_default();
        if e.active().is_none() {
            self.next_dynamic += 1;
            e.order = (1, self.next_dynamic);
        }
        let mut commit = LifecycleCommit::default();
        self.put(
            binding,
            Origin::Dynamic,
            now_ms,
            "registered at run time",
            &mut commit,
        );
        self.refresh();
        Ok(commit)
    }

    /// Deregisters a dynamic binding: it drains and terminates.
    pub(crate) fn deregister(&mut self, id: &str, now_ms: i64) -> Result<LifecycleCommit> {
        match self.entries.get(id).and_then(Entry::active) {
            None => Err(Error::NotFound(format!("no active trigger {id:?}"))),
            Some(v) if v.record.origin == Origin::Manifest => Err(Error::Config(format!(
                "trigger {id:?} is defined in the configuration file; remove it there and reload (or drain it)"
            ))),
            Some(_) => {
                self.check_unreferenced(id)?;
                let mut commit = LifecycleCommit::default();
                self.stop(id, now_ms, "deregistered at run time", &mut commit);
                self.refresh();
                Ok(commit)
            }
        }
    }

    /// Drains a binding on its own: it takes no new events, its rows finish, then it
    /// is terminated. A manifest binding comes back at the next reload that still
    /// has it.
    pub(crate) fn drain(&mut self, id: &str, now_ms: i64) -> Result<LifecycleCommit> {
        if self.entries.get(id).and_then(Entry::active).is_none() {
            return Err(Error::NotFound(format!("no active trigger {id:?}")));
        }
        self.check_unreferenced(id)?;
        let mut commit = LifecycleCommit::default();
        self.stop(id, now_ms, "drained by an operator", &mut commit);
        self.refresh();
        Ok(commit)
    }

    /// Pauses (`true`) or resumes a binding. Pausing a paused binding, or resuming a
    /// running one, writes nothing.
    pub(crate) fn set_paused(
        &mut self,
        id: &str,
        paused: bool,
        now_ms: i64,
    ) -> Result<LifecycleCommit> {
        let process = self.process.clone();
        let e = self
            .entries
            .get_mut(id)
            .filter(|e| !e.versions.is_empty())
            .ok_or_else(|| Error::NotFound(format!("no trigger {id:?}")))?;
        let mut commit = LifecycleCommit::default();
        if e.paused == paused {
            return Ok(commit);
        }
        e.paused = paused;
        let v = e
            .active()
            .or_else(|| e.versions.values().last())
            .expect("checked non-empty");
        let (event, reason) = if paused {
            (LifecycleEvent::Paused, "paused by an operator")
        } else {
            (LifecycleEvent::Resumed, "resumed by an operator")
        };
        commit
            .entries
            .push(entry(&process, &v.record, event, reason, now_ms));
        commit.pauses.push((id.to_owned(), paused));
        Ok(commit)
    }

    /// Feeds what the store holds: outbox rows per (binding id, fingerprint) of the
    /// versions it was asked about. Every such draining version with none left,
    /// draining for at least [`DRAIN_SETTLE_MS`], is terminated (one not in the map is
    /// left draining); then old terminated versions leave memory.
    pub(crate) fn observe(
        &mut self,
        outstanding: &HashMap<(String, String), u64>,
        now_ms: i64,
    ) -> LifecycleCommit {
        let mut commit = LifecycleCommit::default();
        let process = self.process.clone();
        for (id, e) in &mut self.entries {
            for v in e.versions.values_mut() {
                // A version the store was not asked about (it began draining, in
                // another process, after the question) is left as it is.
                let left = outstanding.get(&(id.clone(), v.record.fingerprint.clone()));
                if v.record.state == VersionState::Draining
                    && left == Some(&0)
                    && now_ms - v.record.updated_at_ms >= DRAIN_SETTLE_MS
                {
                    transition(
                        &process,
                        &mut v.record,
                        VersionState::Terminated,
                        "nothing left to drain",
                        now_ms,
                        &mut commit,
                    );
                }
            }
        }
        self.collect();
        commit
    }

    fn active_of(&self, origin: Origin) -> impl Iterator<Item = &Arc<Binding>> + '_ {
        self.entries
            .values()
            .filter_map(Entry::active)
            .filter(move |v| v.record.origin == origin)
            .map(|v| &v.binding)
    }

    /// Refuses to stop `id` while another active binding names it in `dead_letter_for`.
    fn check_unreferenced(&self, id: &str) -> Result<()> {
        let mut rest = self.routing.to_vec_except(Some(id));
        rest.sort_by(|a, b| a.id.cmp(&b.id));
        TriggerRegistry::new(rest).map(drop)
    }

    /// Makes `binding` the active version of its id (nothing if it already is).
    fn put(
        &mut self,
        binding: Binding,
        origin: Origin,
        now_ms: i64,
        why: &str,
        commit: &mut LifecycleCommit,
    ) {
        let process = self.process.clone();
        let e = self.entries.entry(binding.id.clone()).or_default();
        let old = e
            .active()
            .map(|v| (v.record.version, v.record.fingerprint.clone()));
        if old
            .as_ref()
            .is_some_and(|(_, fp)| *fp == binding.fingerprint)
        {
            return;
        }
        let number = e
            .numbers
            .get(&binding.fingerprint)
            .copied()
            .unwrap_or_else(|| e.next_number());
        e.numbers.insert(binding.fingerprint.clone(), number);
        if let Some((old, _)) = old {
            let reason = format!("{why}: replaced by {}", label(&binding.id, number));
            let v = e.versions.get_mut(&old).expect("active is in memory");
            transition(
                &process,
                &mut v.record,
                VersionState::Draining,
                &reason,
                now_ms,
                commit,
            );
        }
        close_span(&mut e.spans, now_ms);
        e.spans.push(Span {
            number,
            from_ms: now_ms,
            to_ms: None,
        });
        let reason = match &old {
            Some((n, _)) => format!("{why}: replaces {}", label(&binding.id, *n)),
            None => format!("{why}: new binding"),
        };
        match e.versions.get_mut(&number) {
            Some(v) => {
                // A fingerprint seen before: the same version comes back.
                v.record.origin = origin;
                transition(
                    &process,
                    &mut v.record,
                    VersionState::Active,
                    &reason,
                    now_ms,
                    commit,
                );
            }
            None => {
                let mut record = VersionRecord {
                    binding_id: binding.id.clone(),
                    version: number,
                    fingerprint: binding.fingerprint.clone(),
                    definition: super::config::definition_json(&binding),
                    origin,
                    state: VersionState::Registering,
                    pinned: false,
                    created_at_ms: now_ms,
                    updated_at_ms: now_ms,
                };
                commit.entries.push(entry(
                    &process,
                    &record,
                    LifecycleEvent::Registering,
                    &reason,
                    now_ms,
                ));
                transition(
                    &process,
                    &mut record,
                    VersionState::Active,
                    &reason,
                    now_ms,
                    commit,
                );
                let mut binding = binding;
                binding.version = number;
                e.versions.insert(
                    number,
                    Version {
                        binding: Arc::new(binding),
                        record,
                    },
                );
            }
        }
    }

    /// Moves `id`'s active version to draining.
    fn stop(&mut self, id: &str, now_ms: i64, reason: &str, commit: &mut LifecycleCommit) {
        let process = self.process.clone();
        let Some(e) = self.entries.get_mut(id) else {
            return;
        };
        close_span(&mut e.spans, now_ms);
        if let Some(v) = e
            .versions
            .values_mut()
            .find(|v| v.record.state == VersionState::Active)
        {
            transition(
                &process,
                &mut v.record,
                VersionState::Draining,
                reason,
                now_ms,
                commit,
            );
        }
    }

    /// Drops terminated versions beyond the newest [`KEEP_TERMINATED`] per binding
    /// (by when they ended), pinned ones excepted.
    fn collect(&mut self) {
        for e in self.entries.values_mut() {
            let mut ended: Vec<(i64, u32)> = e
                .versions
                .values()
                .filter(|v| v.record.state == VersionState::Terminated && !v.record.pinned)
                .map(|v| (v.record.updated_at_ms, v.record.version))
                .collect();
            ended.sort_unstable_by(|a, b| b.cmp(a));
            for (_, number) in ended.into_iter().skip(KEEP_TERMINATED) {
                e.versions.remove(&number);
            }
        }
    }

    /// Rebuilds the routing registry from the active versions, in routing order.
    fn refresh(&mut self) {
        let mut active: Vec<(&(u8, usize), Arc<Binding>)> = self
            .entries
            .values()
            .filter_map(|e| e.active().map(|v| (&e.order, v.binding.clone())))
            .collect();
        active.sort_by_key(|(order, _)| **order);
        self.routing = Arc::new(TriggerRegistry::from_checked(
            active.into_iter().map(|(_, b)| b).collect(),
        ));
    }
}

fn close_span(spans: &mut [Span], at_ms: i64) {
    if let Some(last) = spans.last_mut() {
        if last.to_ms.is_none() {
            last.to_ms = Some(at_ms);
        }
    }
}

fn entry(
    process: &str,
    record: &VersionRecord,
    event: LifecycleEvent,
    reason: &str,
    at_ms: i64,
) -> LifecycleEntry {
    LifecycleEntry {
        seq: 0,
        binding_id: record.binding_id.clone(),
        version: record.version,
        fingerprint: record.fingerprint.clone(),
        event,
        reason: reason.to_owned(),
        process: process.to_owned(),
        at_ms,
    }
}

/// Moves `record` to `state`, writing the record and a log entry into `commit`.
fn transition(
    process: &str,
    record: &mut VersionRecord,
    state: VersionState,
    reason: &str,
    now_ms: i64,
    commit: &mut LifecycleCommit,
) {
    record.state = state;
    record.updated_at_ms = now_ms;
    let event = match state {
        VersionState::Registering => LifecycleEvent::Registering,
        VersionState::Active => LifecycleEvent::Active,
        VersionState::Draining => LifecycleEvent::Draining,
        VersionState::Terminated => LifecycleEvent::Terminated,
    };
    commit
        .entries
        .push(entry(process, record, event, reason, now_ms));
    commit
        .versions
        .retain(|r| !(r.binding_id == record.binding_id && r.version == record.version));
    commit.versions.push(record.clone());
}

mod pins;
#[cfg(test)]
mod tests;
