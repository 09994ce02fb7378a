//! One socket's outstanding executes, keyed by request id: a plain data structure,
//! tested without a runtime.
//!
//! The map is pruned on every path out of a request, which is where clients of this
//! shape classically leak: on the answer ([`PendingRequests::complete`]), on timeout or when the
//! caller's future is dropped ([`PendingRequests::forget`], via the execute path's guard), and on
//! disconnect ([`PendingRequests::close`]). After `close` nothing new is admitted, so an execute
//! racing the socket's death fails at once instead of waiting out its deadline for an
//! answer that cannot come.

use std::collections::HashMap;

/// Outstanding requests of one socket. `T` is the waiter (a oneshot sender in the
/// server, a plain value in tests); dropping a waiter is how its request is failed.
#[derive(Debug)]
pub(crate) struct PendingRequests<T> {
    map: HashMap<String, T>,
    closed: bool,
}

impl<T> Default for PendingRequests<T> {
    fn default() -> Self {
        PendingRequests {
            map: HashMap::new(),
            closed: false,
        }
    }
}

impl<T> PendingRequests<T> {
    /// Admits a request; hands `waiter` back if the socket already closed.
    pub(crate) fn insert(&mut self, request_id: String, waiter: T) -> Result<(), T> {
        if self.closed {
            return Err(waiter);
        }
        self.map.insert(request_id, waiter);
        Ok(())
    }

    /// Takes the waiter an answer belongs to; `None` for an unknown request id.
    pub(crate) fn complete(&mut self, request_id: &str) -> Option<T> {
        self.map.remove(request_id)
    }

    /// Drops a request whose caller gave up (timeout or cancellation).
    pub(crate) fn forget(&mut self, request_id: &str) {
        self.map.remove(request_id);
    }

    /// Takes every outstanding waiter but stays open (the channel closed, the socket
    /// did not), so that the caller can fail them all at once.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.map.drain().map(|(_, w)| w).collect()
    }

    /// Refuses further requests and takes every outstanding waiter, so that the
    /// caller can fail them all at once (by dropping them).
    pub(crate) fn close(&mut self) -> Vec<T> {
        self.closed = true;
        self.drain()
    }

    /// Number of outstanding requests.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_completes_its_request_exactly_once() {
        let mut p = PendingRequests::default();
        p.insert("1".into(), 'a').unwrap();
        assert_eq!(p.complete("1"), Some('a'));
        assert_eq!(p.complete("1"), None);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn an_unknown_request_id_completes_nothing() {
        let mut p = PendingRequests::default();
        p.insert("1".into(), 'a').unwrap();
        assert_eq!(p.complete("2"), None);
        assert_eq!(p.len(), 1);
    }

    #[test]
    fn a_forgotten_request_is_pruned() {
        let mut p = PendingRequests::default();
        p.insert("1".into(), 'a').unwrap();
        p.forget("1");
        assert_eq!(p.len(), 0);
        assert_eq!(p.complete("1"), None);
    }

    #[test]
    fn drain_takes_every_waiter_but_admits_new_ones() {
        let mut p = PendingRequests::default();
        p.insert("1".into(), 'a').unwrap();
        assert_eq!(p.drain(), ['a']);
        assert!(p.insert("2".into(), 'b').is_ok());
    }

    #[test]
    fn close_takes_every_waiter_and_refuses_new_ones() {
        let mut p = PendingRequests::default();
        p.insert("1".into(), 'a').unwrap();
        p.insert("2".into(), 'b').unwrap();
        let mut failed = p.close();
        failed.sort_unstable();
        assert_eq!(failed, ['a', 'b']);
        assert_eq!(p.insert("3".into(), 'c'), Err('c'));
        assert_eq!(p.len(), 0);
    }
}
