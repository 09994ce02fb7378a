//! Internals that this crate's own benches, store-contract tests and fuzz targets
//! reach from outside the crate. Hidden from the docs and **not** part of the public
//! API: anything here may change or go in any release.
//!
//! Why it exists: a bench that measures the dispatcher against a claim-and-delete floor,
//! or a test that runs one store contract against SQLite and PostgreSQL, needs the
//! internal types, and those targets are separate crates. Re-exporting the few items
//! they use, by name, keeps every other internal `pub(crate)`.
#![allow(missing_docs)]

pub use crate::clock::now_ms;

#[cfg(feature = "runtime")]
pub mod store {
    /// The SQLite WAL's documented cap under steady load, for `tests/sqlite_wal.rs`.
    pub use crate::store::sqlite::WAL_CAP as SQLITE_WAL_CAP;
    pub use crate::store::{
        open_backend, redact_url, Appended, Backend, EventQuery, GroupAppend, StateWrite, Store,
        StoreOptions, Write,
    };

    /// The outbox's claim, next-due and depth statements with literal arguments, for
    /// `EXPLAIN` in `benches/backlog.rs`.
    #[cfg(feature = "postgres")]
    pub fn postgres_explained(binding: &str, now_ms: i64) -> Vec<(&'static str, String)> {
        crate::store::postgres::explained(binding, now_ms)
    }

    /// An append of `event` with `enqueue`, its body prepared uncompressed, for tests
    /// that hand [`Backend::write_batch`] a commit clock of their own.
    pub fn append_write(
        mut event: crate::triggers::TriggerEvent,
        claim_expires_at_ms: i64,
        enqueue: Vec<crate::outbox::model::Enqueue>,
    ) -> Write {
        let prepared = crate::store::body_codec::Prepared::take(
            &mut event,
            crate::store::body_codec::BodyCompression::None,
        );
        Write::Append {
            event: Box::new(event),
            claim_expires_at_ms,
            enqueue,
            prepared,
        }
    }
}

#[cfg(feature = "runtime")]
pub mod outbox {
    pub mod model {
        pub use crate::outbox::model::{
            AttemptError, ClaimRequest, ClaimedRow, DeadLetterQuery, Destination, Enqueue, Finish,
            HeldRows, HolderRelease, ReceiveRequest, RunRecord,
        };
    }
    pub mod outcome {
        pub use crate::outbox::outcome::AttemptFailure;
    }
}

#[cfg(feature = "runtime")]
pub mod dispatch {
    pub mod deliver {
        pub use crate::dispatch::deliver::{AttemptInput, Deliver};
    }
    pub mod dispatcher {
        pub use crate::dispatch::dispatcher::Dispatcher;
        pub use crate::dispatch::options::{DispatcherOptions, DEFAULT_MAX_IN_FLIGHT};
        pub use crate::dispatch::permits::Permits;
    }
    pub mod metrics {
        pub use crate::dispatch::metrics::DispatchMetrics;
    }
}

#[cfg(feature = "runtime")]
pub mod triggers {
    pub use crate::triggers::{trace_id_from, SignatureStatus, TriggerEvent};
    pub mod binding {
        pub use crate::triggers::binding::{Binding, Handler};
    }
    pub mod registry {
        pub use crate::triggers::registry::TriggerRegistry;
    }
    pub mod versions {
        pub use crate::triggers::backfill::{
            BackfillJob, BackfillSpec, BackfillState, BackfillStep, BackfillStore, Window,
        };
        pub use crate::triggers::versions::{
            LifecycleCommit, LifecycleEntry, LifecycleEvent, Origin, VersionRecord, VersionState,
            VersionStore,
        };
    }
}

#[cfg(feature = "runtime")]
pub mod ingress {
    pub use crate::ingress::{CURSOR_KEY, LAST_FIRE_KEY};
    pub mod signature {
        pub use crate::ingress::signature::{github, standard_webhooks, Rejection};
    }
    /// The console's event list, for `benches/event_search.rs`.
    ///
    /// A wrapper rather than a re-export: `ingress::event_search` is `pub(crate)`.
    pub mod event_search {
        use crate::ingress::event_search::EventFilter;
        use crate::store::{EventQuery, Store};

        /// One page of the runtime's event search (`ingress::event_search::list_events`,
        /// the JSON that `GET /api/v1/events` answers) for the filter `q` spells: `source`, `kind`,
        /// `dedupe_key` (the `delivery_id` filter), `since_ms`, `until_ms`, `limit`,
        /// `before_seq` (the `after` cursor). `q.event_id` is not a list filter and is
        /// ignored.
        pub async fn list_events(
            store: &Store,
            q: &EventQuery,
        ) -> crate::Result<serde_json::Value> {
            let f = EventFilter {
                source: q.source.clone(),
                kind: q.kind.clone(),
                delivery_id: q.dedupe_key.clone(),
                since_ms: q.since_ms,
                until_ms: q.until_ms,
                limit: q.limit,
                after: q.before_seq,
            };
            let page = crate::ingress::event_search::list_events(store, &f).await?;
            Ok(serde_json::to_value(page).unwrap_or_default())
        }
    }
    /// Cron expressions, for the `cron_expression` fuzz target.
    pub mod cron {
        pub use crate::ingress::cron::{CronError, Schedule};
    }
    /// The ingest decision, for the `ingest_decision` and `config_loader` fuzz targets.
    ///
    /// A wrapper rather than a re-export: `ingress::ingest::decide` and its
    /// `IngestDecision` are `pub(crate)`, and a fuzz target needs only the status the
    /// listener would answer.
    pub mod ingest {
        use crate::inbound::InboundRequest;
        use crate::inbound::SourceContext;
        use crate::ingress::ingest::{decide, IngestDecision};
        use crate::ingress::source::SourceSpec;

        /// The HTTP status the listener answers for this delivery to `spec`, with the
        /// refusal's reason label (`stored`, `notion_token_captured` or `reply` when
        /// it is not refused): the built-in provider's rule built from the source's
        /// options as its connector builds it, then `ingress::ingest::decide`.
        /// A source that is not a built-in webhook provider answers 405
        /// `not_accepted`; options its connector refuses, 400 `invalid_options`.
        pub fn decide_status(
            spec: &SourceSpec,
            notion_token: Option<&str>,
            method: &str,
            path: &str,
            headers: &[(&str, &str)],
            body: &[u8],
            now_ms: i64,
        ) -> (u16, String) {
            let ctx = SourceContext::detached(
                &spec.id,
                &spec.provider,
                &spec.tenant,
                spec.options.clone(),
                spec.secrets.clone(),
            );
            let rule = match crate::ingress::builtin::webhook_spec(&spec.provider, &ctx) {
                Ok(Some(rule)) => rule,
                Ok(None) => return (405, "not_accepted".into()),
                Err(_) => return (400, "invalid_options".into()),
            };
            let req = InboundRequest::new(method, path, headers, body, now_ms);
            match decide(&rule, &spec.secrets, notion_token, &req) {
                IngestDecision::Store(_) => (200, "stored".into()),
                IngestDecision::CaptureNotionToken(_) => (200, "notion_token_captured".into()),
                IngestDecision::Respond(r) => (r.status, "reply".into()),
                IngestDecision::Refuse(r) => (r.status, r.reason.into_owned()),
            }
        }
    }
}

/// The outbound HTTP client and its signer, for `benches/http_deliver.rs` and the
/// breaker test in `tests/http_handler.rs`.
#[cfg(feature = "runtime")]
pub mod outbound {
    pub use crate::outbound::http::{
        HttpDelivery, HttpError, HttpRequest, HttpResponse, OutboundSettings, Signing,
    };
    pub use crate::outbound::sign::{message_id, SigningKey};
}

#[cfg(feature = "runtime")]
pub mod runtime {
    pub mod ops {
        pub use crate::runtime::ops::base::OpError;
        pub use crate::runtime::ops::enqueue::ApiTrace;
    }
}

/// The connection core (`mux::core`) framed as one gRPC `Connect` stream
/// (`Framing::Stream`), for the `grpc_frame` fuzz target: what the driver does with a
/// message that tonic decoded off the stream, with no I/O and a clock the caller moves.
///
/// A small handle rather than re-exports: the core, its options, inputs and events are
/// `pub(crate)`. It holds one registration (tenant `t`, type `echo`, instance `i1`)
/// with the runner's default timings; the caller plays the driver, answering
/// `StartExecute` with `StreamCore::execute_done` and a due metrics report with
/// `StreamCore::send_metrics_report`.
#[cfg(feature = "websocket")]
pub mod stream_core {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::backoff::BackoffPolicy;
    use crate::connector::config::HeartbeatSettings;
    use crate::identity::RegistrationKey;
    use crate::mux::core::{
        Connection, CoreOptions, Event, Framing, Incoming, InvokeSpec, Now, RegistrationSpec,
        Transmit,
    };
    use crate::mux::metrics::{HandleMetrics, SocketMetrics};
    use crate::proto::{ExecuteRequest, ExecuteResponse, RegisterConnectorRequest, StreamMessage};

    /// The wall clock at the core's start, Unix milliseconds.
    const UNIX_START_MS: i64 = 1_700_000_000_000;

    /// The registration's settings that change what the core does with a message.
    #[derive(Debug, Clone)]
    pub struct StreamCoreOptions {
        /// Executes run at once.
        pub max_concurrent: usize,
        /// Executes that wait for a permit.
        pub max_queued: usize,
        /// Metrics reports every this long; zero for none.
        pub metrics_interval: Duration,
        /// A stored session token.
        pub session_token: Option<String>,
        /// A configured `auth_token`.
        pub auth_token: String,
        /// Hold the first register for a JWT minted from stored keys.
        pub await_jwt: bool,
    }

    /// What the core asked its driver to do, flattened.
    #[derive(Debug)]
    pub enum CoreEvent {
        /// Run the connector; answer with [`StreamCore::execute_done`].
        StartExecute { exec: u64, request: ExecuteRequest },
        /// Drop the execute's future.
        CancelExecute(u64),
        /// An invoke ended: answered by the gateway (`answered`), sent
        /// fire-and-forget, or failed.
        InvokeDone { waiter: u64, answered: bool },
        /// Send the metrics report ([`StreamCore::send_metrics_report`]).
        MetricsDue,
        /// Close the stream and redial.
        Reconnect(String),
        /// The last registration was removed.
        Close,
        /// Any other event, by name (registered, pending, a proxy message, ...).
        Other(&'static str),
    }

    /// One stream's connection core and its clock.
    pub struct StreamCore {
        conn: Connection<u64, ()>,
        handle: u64,
        start: Instant,
        elapsed: Duration,
    }

    impl StreamCore {
        /// A core with its one registration and no stream yet.
        pub fn new(o: StreamCoreOptions) -> Self {
            let opts = CoreOptions {
                tenant: "t".into(),
                heartbeat: HeartbeatSettings::default(),
                join_timeout: crate::DEFAULT_CONNECT_TIMEOUT,
                max_handlers: 1,
                max_frame_bytes: 4 << 20,
                seed: 7,
                framing: Framing::Stream,
            };
            let mut conn = Connection::new(opts, Arc::new(SocketMetrics::default()));
            let spec = RegistrationSpec {
                key: RegistrationKey::new("t", "echo", "i1"),
                register: RegisterConnectorRequest {
                    tenant_id: "t".into(),
                    connector_type: "echo".into(),
                    instance_id: "i1".into(),
                    jwt_token: o.auth_token,
                    ..Default::default()
                },
                register_timeout: crate::DEFAULT_REGISTER_TIMEOUT,
                retry: BackoffPolicy::default(),
                max_concurrent: o.max_concurrent,
                max_queued: o.max_queued,
                execute_timeout: crate::DEFAULT_EXECUTE_TIMEOUT,
                metrics_interval: o.metrics_interval,
                metrics: Arc::new(HandleMetrics::default()),
                session_token: o.session_token,
                jwt: None,
                await_jwt: o.await_jwt,
            };
            let start = Instant::now();
            let now = Now {
                instant: start,
                unix_ms: UNIX_START_MS,
            };
            let handle = conn
                .add(now, spec, ())
                .expect("the first registration is admitted");
            StreamCore {
                conn,
                handle,
                start,
                elapsed: Duration::ZERO,
            }
        }

        fn now(&self) -> Now {
            Now {
                instant: self.start + self.elapsed,
                unix_ms: UNIX_START_MS + self.elapsed.as_millis() as i64,
            }
        }

        /// Time since the core was made.
        pub fn elapsed(&self) -> Duration {
            self.elapsed
        }

        /// Moves the clock on; call [`StreamCore::handle_timeout`] when
        /// [`StreamCore::poll_timeout`] has come.
        pub fn advance(&mut self, d: Duration) {
            self.elapsed += d;
        }

        /// When the core next wants [`StreamCore::handle_timeout`], as time since it
        /// was made.
        pub fn poll_timeout(&self) -> Option<Duration> {
            self.conn
                .poll_timeout()
                .map(|at| at.saturating_duration_since(self.start))
        }

        /// The deadlines that have passed.
        pub fn handle_timeout(&mut self) {
            self.conn.handle_timeout(self.now());
        }

        /// The stream opened.
        pub fn connect(&mut self) {
            self.conn.handle_connected(self.now());
        }

        /// The stream died (or the driver closed it).
        pub fn disconnect(&mut self) {
            self.conn.handle_disconnected(self.now(), "bench");
        }

        /// One message read off the stream.
        pub fn message(&mut self, msg: StreamMessage) {
            self.conn.handle_frame(self.now(), Incoming::Message(msg));
        }

        /// The connector answered execute `exec`.
        pub fn execute_done(&mut self, exec: u64, resp: ExecuteResponse) {
            self.conn.handle_execute_done(self.now(), exec, resp);
        }

        /// The registration invokes `target`; `Err` hands the waiter back.
        pub fn invoke(
            &mut self,
            request_id: String,
            target: String,
            timeout: Duration,
            fire_and_forget: bool,
            waiter: u64,
        ) -> Result<(), u64> {
            let spec = InvokeSpec {
                request_id,
                target,
                capability_id: String::new(),
                payload: bytes::Bytes::from_static(b"{}"),
                payload_encoding: 0,
                context: Default::default(),
                timeout,
                fire_and_forget,
            };
            let now = self.now();
            self.conn
                .invoke(now, self.handle, spec, waiter)
                .map_err(|(w, _)| w)
        }

        /// The caller of an invoke gave up on it.
        pub fn cancel_invoke(&mut self, request_id: &str) {
            self.conn.cancel_invoke(request_id);
        }

        /// The approval exchange produced a JWT, or gave up.
        pub fn set_credentials(&mut self, jwt: Option<String>) {
            let now = self.now();
            self.conn.set_credentials(now, self.handle, jwt);
        }

        /// Sends the registration's metrics report if it is registered.
        pub fn send_metrics_report(&mut self) {
            let now = self.now();
            self.conn
                .send_metrics_report(now, self.handle, Default::default());
        }

        /// Removes the registration; false when it was removed already.
        pub fn remove(&mut self) -> bool {
            let now = self.now();
            self.conn.remove(now, self.handle).is_some()
        }

        /// The next message to write: `Err` with the text of a Phoenix frame, which a
        /// stream core must never produce.
        pub fn poll_transmit(&mut self) -> Option<Result<StreamMessage, String>> {
            self.conn.poll_transmit().map(|t| match t {
                Transmit::Message(m) => Ok(*m),
                Transmit::Text(text) => Err(text),
                Transmit::Binary(bytes) => Err(format!("a binary frame of {} bytes", bytes.len())),
            })
        }

        /// The next event to act on.
        pub fn poll_event(&mut self) -> Option<CoreEvent> {
            let ev = self.conn.poll_event()?;
            Some(match ev {
                Event::StartExecute { exec, request, .. } => {
                    CoreEvent::StartExecute { exec, request }
                }
                Event::CancelExecute(exec) => CoreEvent::CancelExecute(exec),
                Event::InvokeDone { waiter, result } => CoreEvent::InvokeDone {
                    waiter,
                    answered: matches!(result, Ok(Some(_))),
                },
                Event::MetricsDue(_) => CoreEvent::MetricsDue,
                Event::Reconnect(why) => CoreEvent::Reconnect(why),
                Event::Close => CoreEvent::Close,
                Event::Registered { .. } => CoreEvent::Other("registered"),
                Event::Pending { .. } => CoreEvent::Other("pending"),
                Event::Rejected { .. } => CoreEvent::Other("rejected"),
                Event::CredentialRefused { .. } => CoreEvent::Other("credential_refused"),
                Event::RegisterFailed { .. } => CoreEvent::Other("register_failed"),
                Event::Unregistered(_) => CoreEvent::Other("unregistered"),
                Event::Approval { .. } => CoreEvent::Other("approval"),
                Event::Deliver { .. } => CoreEvent::Other("deliver"),
            })
        }
    }
}
