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
    pub use crate::store::{
        now_ms, open_backend, redact_url, Appended, Backend, EventQuery, Store, StoreOptions,
    };
}

#[cfg(feature = "runtime")]
pub mod outbox {
    pub mod model {
        pub use crate::outbox::model::{
            AttemptError, ClaimRequest, ClaimedRow, DeadLetterQuery, Destination, Enqueue, Finish,
            ReceiveRequest, RunRecord,
        };
    }
    pub mod deliver {
        pub use crate::outbox::deliver::{AttemptInput, Deliver};
    }
    pub mod dispatcher {
        pub use crate::outbox::dispatcher::{
            Dispatcher, DispatcherOptions, Permits, DEFAULT_MAX_IN_FLIGHT,
        };
    }
    pub mod metrics {
        pub use crate::outbox::metrics::DispatchMetrics;
    }
    pub mod outcome {
        pub use crate::outbox::outcome::Failure;
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
}

#[cfg(feature = "runtime")]
pub mod webhooks {
    pub use crate::webhooks::LAST_FIRE_KEY;
    pub mod signature {
        pub use crate::webhooks::signature::{github, standard_webhooks, Rejection};
    }
}

#[cfg(feature = "runtime")]
pub mod runtime {
    pub mod ops {
        pub use crate::runtime::ops::OpError;
    }
}
