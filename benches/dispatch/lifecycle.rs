//! The binding lifecycle's cost: the runtime's dispatch rate with a no-op handler
//! ([`RuntimeBuilder::deliver_with`]) over 1 binding, over 50 bindings, and over 50
//! bindings while the configuration is reloaded every second (each reload gives one
//! binding a new version, so its rows drain under the old one while new versions come
//! and go), on the same database kind in the same run.
//!
//! Each run: a runtime starts once on a fresh database to record the versions and stops;
//! `rows` rows (spread round-robin over the bindings, each under its binding's
//! fingerprint) are prefilled through the group commit; the runtime starts again and
//! the clock runs from its start until the outbox is empty.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard::__private::outbox::model::Enqueue;
use switchboard::{Runtime, RuntimeConfig};

use super::{drained, open, prefill_rows, Noop};

/// How often the reloading run reloads.
pub(crate) const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// One lifecycle measurement.
pub(crate) struct LifecycleRate {
    pub(crate) rows_per_s: f64,
    pub(crate) reloads: u64,
}

/// The configuration: `bindings` local no-op bindings; binding `b0` at
/// `max_concurrent = first` (the reloads alternate it, a change of definition).
fn config_text(url: &str, bindings: usize, first: usize) -> String {
    let mut text = format!("listen = \"127.0.0.1:0\"\nstore = \"{url}\"\n");
    for i in 0..bindings {
        let max = if i == 0 { first } else { 256 };
        text.push_str(&format!(
            "[[triggers]]\nid = \"b{i}\"\nhandler = {{ local = \"noop\", capability = \"noop\" }}\nmax_concurrent = {max}\n"
        ));
    }
    text
}

async fn start(path: &std::path::Path, text: &str, noop: Arc<Noop>) -> Runtime {
    std::fs::write(path, text).unwrap();
    let config = RuntimeConfig::from_toml(text)
        .unwrap()
        .resolve_with(|_| None)
        .unwrap();
    Runtime::builder(config)
        .config_path(path)
        .deliver_with(noop)
        .start()
        .await
        .expect("runtime")
}

/// Dispatches `rows` rows over `bindings` bindings; reloads every second if `reload`.
pub(crate) async fn run(
    url: &str,
    dir: &std::path::Path,
    rows: usize,
    bindings: usize,
    reload: bool,
) -> LifecycleRate {
    let path = dir.join(format!("lifecycle-{}.toml", rand::random::<u32>()));
    let text = config_text(url, bindings, 256);
    // Record the versions, then stop: the rows go in while nothing dispatches.
    start(&path, &text, Arc::new(Noop::default()))
        .await
        .shutdown()
        .await
        .unwrap();
    let resolved = RuntimeConfig::from_toml(&text)
        .unwrap()
        .resolve_with(|_| None)
        .unwrap();
    let rows_of: Vec<Enqueue> = resolved
        .triggers
        .bindings()
        .iter()
        .map(|b| Enqueue::dispatch(b.id.clone(), b.fingerprint.clone()))
        .collect();
    {
        let (_backend, store) = open(url).await;
        prefill_rows(&store, rows, &|n| rows_of[n % rows_of.len()].clone()).await;
    }
    let noop = Arc::new(Noop::default());
    let started = Instant::now();
    let rt = start(&path, &text, noop.clone()).await;
    let reloads = AtomicU64::new(0);
    let elapsed = {
        let reloading = async {
            let mut toggle = false;
            loop {
                tokio::time::sleep(RELOAD_EVERY).await;
                toggle = !toggle;
                std::fs::write(
                    &path,
                    config_text(url, bindings, if toggle { 255 } else { 256 }),
                )
                .unwrap();
                let changed = rt.reload().await.expect("reload");
                assert!(changed > 0, "each reload changes b0");
                reloads.fetch_add(1, Ordering::Relaxed);
            }
        };
        let drained = drained(rt.store().backend(), &noop.calls, rows as u64);
        if reload {
            tokio::select! {
                _ = drained => {}
                _ = reloading => unreachable!("reloads forever"),
            }
        } else {
            drained.await;
        }
        started.elapsed()
    };
    rt.shutdown().await.unwrap();
    assert_eq!(
        noop.calls.load(Ordering::Relaxed),
        rows as u64,
        "each row once"
    );
    LifecycleRate {
        rows_per_s: rows as f64 / elapsed.as_secs_f64(),
        reloads: reloads.load(Ordering::Relaxed),
    }
}
