//! The admin API's one failure shape, `{"error": reason, "message": …}` with its
//! status: what the sources' and the events' handlers answer when a parameter does not
//! parse, a source is unknown or the store fails. (The operations' own failures,
//! `OpError`, carry their status and code themselves.)

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::ingress::event_search::BadFilter;

/// An admin API failure, answered as `{"error": reason, "message": …}`.
pub(crate) struct ApiError {
    status: StatusCode,
    reason: &'static str,
    message: String,
}

impl ApiError {
    /// A failure with its status, stable reason and message.
    pub(crate) fn new(
        status: StatusCode,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            reason,
            message: message.into(),
        }
    }
}

impl From<crate::Error> for ApiError {
    /// A store failure: 503, so the caller retries.
    fn from(e: crate::Error) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            e.to_string(),
        )
    }
}

impl From<BadFilter> for ApiError {
    /// A query parameter that does not parse: 400 with its own reason.
    fn from(e: BadFilter) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, e.reason, e.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error": self.reason, "message": self.message})),
        )
            .into_response()
    }
}
