//! The console's two assets, embedded in the binary (`include_str!`): nothing to
//! install beside it, nothing fetched at run time. Pages link them with their content
//! hash as `?v=`, so they are served `immutable` for a year and a new build's assets
//! are new URLs; `ETag` answers a revalidation with 304.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: [Asset; 2] = [
    Asset {
        name: "console.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/console.js"),
    },
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/console.css"),
    },
];

/// FNV-1a of the content: a version tag, not a security check.
const fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

fn tag(a: &Asset) -> String {
    format!("{:016x}", fnv(a.body.as_bytes()))
}

/// The URL a page links an asset by, its version in the query.
pub(crate) fn href(name: &str) -> String {
    let v = find(name).map(tag).unwrap_or_default();
    format!("/console/assets/{name}?v={v}")
}

/// `GET /console/assets/{file}`.
pub(crate) async fn serve(Path(file): Path<String>, headers: HeaderMap) -> Response {
    let Some(a) = find(&file) else {
        return (StatusCode::NOT_FOUND, "no such asset\n").into_response();
    };
    let etag = format!("\"{}\"", tag(a));
    let cache = (
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    let etag_header = (
        header::ETAG,
        HeaderValue::from_str(&etag).expect("hex is a valid header"),
    );
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    if fresh {
        return (StatusCode::NOT_MODIFIED, [cache, etag_header]).into_response();
    }
    let ct = (
        header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    ([ct, cache, etag_header], a.body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_carry_the_content_hash() {
        let h = href("console.js");
        assert!(h.starts_with("/console/assets/console.js?v="));
        assert_eq!(h.len(), "/console/assets/console.js?v=".len() + 16);
        assert_ne!(href("console.js"), href("console.css").replace("css", "js"));
    }
}
