//! The process identity (`process_id`) and what a start does with it.
//!
//! A claim stamps the claimer's identity on its outbox rows (`lease_holder`) and a
//! poll source's lease names it (`{process_id}@{start}`). A process killed with
//! SIGKILL cannot give those back; without a stable identity its next start was a
//! stranger to them and waited out every lease (30 s by default) before delivering its
//! own rows again or polling its own sources. With one, [`release_previous`] runs at
//! start, before the dispatcher and the poll drivers: the rows this identity holds
//! under a live lease become due now and its poll leases are given back, and one info
//! line says how many. Rows other holders lease are reported in a second line (who,
//! how many, until when), so a wait is never silent.
//!
//! **The default** ([`default_for`]): `<host name>/<listen address>`, on both stores.
//! Two live processes on one host cannot listen on one address, so it is unique among
//! the processes sharing a store (a SQLite file is shared only on its host), and a
//! restart with the same configuration on the same host (a container restarted in
//! its pod keeps its host name) is recognised. Not the SQLite file's path, which
//! several processes may share; not `[gateway] instance_id`, which replicas started
//! from one file share. A process that comes back under another host name or port
//! (`listen` on port 0) is a stranger to its old rows, which wait out their lease as
//! before; set `process_id` (e.g. a StatefulSet's pod name) to do better.
//!
//! **Two processes misconfigured with one identity** (one `process_id` written in the
//! file of both): while both run, their poll leases still exclude each other (each
//! start is told apart) and their claims never share a row; but when one starts, it
//! releases what the other holds at that moment: those rows may be delivered twice
//! (the first attempt's finish is then skipped for its stale claim token) and one poll
//! may overlap another (its items dedupe). At worst a duplicate delivery, never a lost
//! one.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ingress::hosted::HostedSource;
use crate::store::Backend;

/// Longest `process_id` taken: it is stamped on rows and written in logs.
const MAX_LEN: usize = 200;

/// A configured `process_id`, checked: not empty, at most [`MAX_LEN`] bytes, no
/// whitespace or control characters.
pub(crate) fn checked(id: &str) -> Result<String> {
    let bad = |why: &str| {
        Error::Config(format!(
            "process_id = {id:?} {why}; name this process among those sharing the store with letters, digits and punctuation (e.g. \"runtime-1\"), or remove the key for the default"
        ))
    };
    if id.is_empty() {
        return Err(bad("is empty"));
    }
    if id.len() > MAX_LEN {
        return Err(bad(&format!("is longer than {MAX_LEN} bytes")));
    }
    if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("holds whitespace or a control character"));
    }
    Ok(id.to_owned())
}

/// The identity of a process that sets no `process_id`, listening on `listen` (the
/// bound address). See the module doc for why.
pub(crate) fn default_for(listen: SocketAddr) -> String {
    format!("{}/{listen}", host_name())
}

/// The host name, read without a system call the crate would need `unsafe` for: the
/// kernel's (Linux), `/etc/hostname`, then `HOSTNAME` or `COMPUTERNAME`; `localhost`
/// when none is there (the listen address still tells processes of one host apart).
fn host_name() -> String {
    let from_file = |path: &str| std::fs::read_to_string(path).ok();
    let from_env = |var: &str| std::env::var(var).ok();
    from_file("/proc/sys/kernel/hostname")
        .or_else(|| from_file("/etc/hostname"))
        .or_else(|| from_env("HOSTNAME"))
        .or_else(|| from_env("COMPUTERNAME"))
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && !h.chars().any(char::is_whitespace))
        .unwrap_or_else(|| "localhost".to_owned())
}

/// At start, before the dispatcher and the poll drivers run: releases what an
/// earlier start of `identity` holds (its leased rows become due now, its poll
/// leases are given back) and logs it, with the rows other holders lease. A store
/// error is logged, not fatal: those rows and leases then wait out their end, as
/// they would have without an identity.
pub(crate) async fn release_previous(
    backend: &Arc<dyn Backend>,
    sources: &[Arc<HostedSource>],
    identity: &str,
) {
    let now = crate::clock::now_ms();
    let leases = crate::ingress::poller::release_previous_leases(sources, identity, now).await;
    let polls: Vec<&str> = leases.iter().map(|(source, _)| source.as_str()).collect();
    match backend.release_holder(identity, now).await {
        Ok(done) => {
            tracing::info!(
                process_id = identity,
                rows = done.released,
                poll_leases = leases.len(),
                sources = ?polls,
                "released what this process held before this start: {} outbox rows due now, {} poll leases given back",
                done.released,
                leases.len()
            );
            // Warnings (the default level shows them): rows this process waits for.
            for held in done.held_by_others {
                tracing::warn!(
                    holder = held.holder.as_deref().unwrap_or("(no identity)"),
                    rows = held.rows,
                    until_ms = held.until_ms,
                    remaining = ?std::time::Duration::from_millis(held.until_ms.saturating_sub(now).max(0) as u64),
                    "outbox rows leased by another process; they are due again when it finishes or releases them, or when the lease ends"
                );
            }
        }
        Err(e) => tracing::warn!(
            process_id = identity,
            error = %e,
            poll_leases = leases.len(),
            "cannot release the outbox rows this process held before this start; they are due again when their lease ends"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_identity_is_checked_and_the_error_says_what_to_do() {
        assert_eq!(checked("runtime-1").unwrap(), "runtime-1");
        assert_eq!(checked("pod@eu/7").unwrap(), "pod@eu/7");
        for (bad, why) in [
            ("", "is empty"),
            ("two words", "whitespace"),
            ("tab\there", "whitespace"),
            ("bell\u{7}", "control"),
        ] {
            let e = checked(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("process_id"), "{bad:?}: {e}");
            assert!(e.contains("remove the key for the default"), "{e}");
        }
        let long = "x".repeat(MAX_LEN + 1);
        assert!(checked(&long)
            .unwrap_err()
            .to_string()
            .contains("longer than"));
    }

    #[test]
    fn the_default_is_the_host_and_the_listen_address() {
        let addr: SocketAddr = "127.0.0.1:8787".parse().unwrap();
        let other: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let a = default_for(addr);
        assert!(a.ends_with("/127.0.0.1:8787"), "{a}");
        assert_eq!(a, default_for(addr), "stable across starts");
        assert_ne!(a, default_for(other), "two listeners, two processes");
        assert_eq!(checked(&a).unwrap(), a, "a valid identity");
    }
}
