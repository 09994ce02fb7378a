//! A runtime with trigger bindings under test: started from TOML on a real port and a
//! real store, with local connectors that record what they were given and fail on
//! demand; plus a gateway with a recording connector for invoke bindings.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use switchboard::RuntimeBuilder;
use switchboard::{BaseConnector, ExecuteContext, Payload, Runtime, RuntimeConfig};

#[allow(unused_imports)]
pub use crate::support::{env, fresh_postgres_schema, postgres_url, skip_postgres, StoreKind};

/// One delivery a recorder saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub payload: Value,
    pub context: HashMap<String, String>,
    pub at: tokio::time::Instant,
}

impl Seen {
    pub fn ctx(&self, key: &str) -> &str {
        self.context.get(key).map(String::as_str).unwrap_or("")
    }
}

/// A connector that records every execute, and fails the first `fail_first` of them
/// (or all, with `u32::MAX`) with a connector error.
#[derive(Clone, Default)]
pub struct Recorder {
    pub seen: Arc<Mutex<Vec<Seen>>>,
    fail_first: Arc<std::sync::atomic::AtomicU32>,
    /// While set, each execute waits for a permit from here first.
    pub gate: Option<Arc<tokio::sync::Semaphore>>,
}

impl Recorder {
    pub fn failing(n: u32) -> Recorder {
        let r = Recorder::default();
        r.fail_first.store(n, std::sync::atomic::Ordering::SeqCst);
        r
    }

    pub fn gated(gate: Arc<tokio::sync::Semaphore>) -> Recorder {
        Recorder {
            gate: Some(gate),
            ..Recorder::default()
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

#[async_trait]
impl BaseConnector for Recorder {
    fn connector_type(&self) -> &str {
        "recorder"
    }

    async fn execute(&self, _: Payload, _: Option<&str>) -> switchboard::Result<Payload> {
        unreachable!("the runtime calls execute_with_context")
    }

    async fn execute_with_context(
        &self,
        payload: Payload,
        _: Option<&str>,
        ctx: &ExecuteContext,
    ) -> switchboard::Result<Payload> {
        if let Some(g) = &self.gate {
            g.acquire().await.unwrap().forget();
        }
        let payload_json = match &payload {
            Payload::Json(v) => v.clone(),
            other => Value::String(format!("{other:?}")),
        };
        self.seen.lock().unwrap().push(Seen {
            payload: payload_json.clone(),
            context: ctx.values().clone(),
            at: tokio::time::Instant::now(),
        });
        let left = self.fail_first.load(std::sync::atomic::Ordering::SeqCst);
        if left > 0 {
            if left != u32::MAX {
                self.fail_first
                    .store(left - 1, std::sync::atomic::Ordering::SeqCst);
            }
            return Err(switchboard::Error::Connector(
                "recorder told to fail".into(),
            ));
        }
        Ok(Payload::Json(
            serde_json::json!({"ok": true, "echo": payload_json}),
        ))
    }
}

/// Lifecycle log entries (a history page's, or a change's) as `id@vN event` lines.
pub fn lifecycle_lines(entries: &Value) -> Vec<String> {
    entries
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            format!(
                "{}@v{} {}",
                e["binding_id"].as_str().unwrap(),
                e["version"],
                e["event"].as_str().unwrap()
            )
        })
        .collect()
}

impl Recorder {
    /// Each delivery as (payload `n`, the binding version it ran under), sorted.
    pub fn versions_by_payload(&self) -> Vec<(u64, String)> {
        let mut v: Vec<(u64, String)> = self
            .seen()
            .iter()
            .map(|s| {
                (
                    s.payload["n"].as_u64().unwrap(),
                    s.ctx("switchboard.binding_version").to_owned(),
                )
            })
            .collect();
        v.sort();
        v
    }
}

/// A binding's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub dispatched: u64,
    pub failed: u64,
    pub retried: u64,
    pub dead_lettered: u64,
}

/// A runtime on a SQLite file in its own temp dir, from `config` (TOML without the
/// `listen` / `store` lines, which are added), with `locals` registered.
pub struct Rt {
    pub runtime: Option<Runtime>,
    pub base: String,
    pub dir: Arc<tempfile::TempDir>,
    pub store_url: String,
}

impl Rt {
    pub async fn sqlite(config: &str, locals: &[(&str, Recorder)]) -> Rt {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let url = format!("sqlite:{}", dir.path().join("rt.db").display());
        Rt::on(url, dir, config, locals).await
    }

    pub async fn on(
        store_url: String,
        dir: Arc<tempfile::TempDir>,
        config: &str,
        locals: &[(&str, Recorder)],
    ) -> Rt {
        let locals: Vec<(String, Recorder)> = locals
            .iter()
            .map(|(n, r)| (n.to_string(), r.clone()))
            .collect();
        Rt::on_with(store_url, dir, config, move |mut b| {
            for (name, r) in locals {
                b = b.local_connector(name, r);
            }
            b
        })
        .await
    }

    /// A runtime on a fresh SQLite file whose builder `setup` completes (local
    /// connectors of any type).
    pub async fn sqlite_with(
        config: &str,
        setup: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
    ) -> Rt {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let url = format!("sqlite:{}", dir.path().join("rt.db").display());
        Rt::on_with(url, dir, config, setup).await
    }

    /// A runtime on `store_url` whose builder `setup` completes.
    pub async fn on_with(
        store_url: String,
        dir: Arc<tempfile::TempDir>,
        config: &str,
        setup: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
    ) -> Rt {
        let text = Rt::full_text(&store_url, config);
        let resolved = RuntimeConfig::from_toml(&text)
            .unwrap()
            .resolve_with(env)
            .unwrap();
        let runtime = setup(Runtime::builder(resolved)).start().await.unwrap();
        let base = format!("http://{}", runtime.local_addr());
        Rt {
            runtime: Some(runtime),
            base,
            dir,
            store_url,
        }
    }

    /// A runtime on a fresh SQLite file whose configuration is also written to
    /// `<dir>/switchboard.toml` and given as its reload source, so a test can rewrite
    /// it ([`Rt::write_config`]) and reload.
    pub async fn sqlite_file(config: &str, locals: &[(&str, Recorder)]) -> Rt {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let url = format!("sqlite:{}", dir.path().join("rt.db").display());
        Rt::on_file(url, dir, config, locals).await
    }

    /// Like [`Rt::sqlite_file`] on `store_url` and `dir` (a restart: same store, same
    /// file).
    pub async fn on_file(
        store_url: String,
        dir: Arc<tempfile::TempDir>,
        config: &str,
        locals: &[(&str, Recorder)],
    ) -> Rt {
        let path = dir.path().join("switchboard.toml");
        std::fs::write(&path, Rt::full_text(&store_url, config)).unwrap();
        let locals: Vec<(String, Recorder)> = locals
            .iter()
            .map(|(n, r)| (n.to_string(), r.clone()))
            .collect();
        Rt::on_with(store_url, dir, config, move |mut b| {
            b = b.config_path(&path);
            for (name, r) in locals {
                b = b.local_connector(name, r);
            }
            b
        })
        .await
    }

    fn full_text(store_url: &str, config: &str) -> String {
        format!("listen = \"127.0.0.1:0\"\nstore = \"{store_url}\"\n{config}")
    }

    /// Rewrites the configuration file (for the next reload).
    pub fn write_config(&self, config: &str) {
        let text = Rt::full_text(&self.store_url, config);
        std::fs::write(self.dir.path().join("switchboard.toml"), text).unwrap();
    }

    /// A binding's entry in `GET /api/v1/triggers`.
    pub async fn trigger(&self, id: &str) -> Value {
        self.get("/api/v1/triggers").await["triggers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// A binding's lifecycle log as `id@vN event` lines.
    pub async fn history(&self, id: &str) -> Vec<String> {
        lifecycle_lines(&self.get(&format!("/api/v1/triggers/{id}/history")).await["history"])
    }

    /// Enqueues `payload` for `binding` through the runtime's operations (no HTTP, so
    /// a paused-time test's clock stays virtual); the event id.
    pub async fn enqueue_direct(&self, binding: &str, payload: Value) -> String {
        let done = self
            .rt()
            .enqueue(switchboard::EnqueueRequest::to_binding(
                binding,
                serde_json::to_vec(&payload).unwrap(),
            ))
            .await
            .unwrap();
        assert!(!done.duplicate && !done.dropped);
        done.event_id
    }

    /// A binding's dispatcher counts, read without HTTP (for paused-time tests).
    pub async fn get_direct_counts(&self, binding: &str) -> Counts {
        let v = serde_json::to_value(self.rt().ops().triggers()).unwrap();
        let t = v["triggers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == binding)
            .unwrap()
            .clone();
        let n = |k: &str| t["counts"][k].as_u64().unwrap();
        Counts {
            dispatched: n("dispatched"),
            failed: n("failed"),
            retried: n("retried"),
            dead_lettered: n("dead_lettered"),
        }
    }

    pub fn rt(&self) -> &Runtime {
        self.runtime.as_ref().unwrap()
    }

    pub async fn stop(&mut self) {
        if let Some(r) = self.runtime.take() {
            r.shutdown().await.unwrap();
        }
    }

    /// POSTs `body` to `path`; the status and the JSON answer.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = reqwest::Client::new()
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> Value {
        reqwest::get(format!("{}{path}", self.base))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The `/metrics` exposition.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Enqueues `payload` for `binding` through the admin API.
    pub async fn enqueue(&self, binding: &str, payload: Value) -> String {
        let (status, v) = self
            .post(&format!("/api/v1/triggers/{binding}/invoke"), payload)
            .await;
        assert_eq!(status, 202, "{v}");
        v["event_id"].as_str().unwrap().to_owned()
    }
}
