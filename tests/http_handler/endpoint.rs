//! A local HTTP endpoint for the `http` handler's tests: an axum server on
//! `127.0.0.1:0` that records every request and answers from a script.
//!
//! Paths: `/loop/a` and `/loop/b` redirect to each other; `/chain/N` redirects to
//! `/chain/N-1` and `/chain/0` answers; `/to/<rest>` answers 307 to `http://<rest>`;
//! `/big` answers 200 with a body that never ends; every other path answers the next
//! scripted [`Answer`] (or the default).
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::Response;

/// One request the endpoint received.
#[derive(Debug, Clone)]
pub struct Hit {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// When it arrived (unix ms).
    pub at_ms: i64,
}

impl Hit {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

/// What the endpoint answers.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

impl Answer {
    pub fn status(status: u16) -> Answer {
        Answer {
            status,
            headers: vec![],
            body: String::new(),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: &str) -> Answer {
        self.headers.push((name, value.to_owned()));
        self
    }

    pub fn with_body(mut self, body: &str) -> Answer {
        self.body = body.to_owned();
        self
    }
}

struct Inner {
    hits: Mutex<Vec<Hit>>,
    script: Mutex<VecDeque<Answer>>,
    default: Mutex<Answer>,
}

/// The running endpoint.
pub struct Endpoint {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
}

impl Endpoint {
    /// Starts an endpoint answering 200 by default.
    pub async fn start() -> Endpoint {
        let inner = Arc::new(Inner {
            hits: Mutex::default(),
            script: Mutex::default(),
            default: Mutex::new(Answer::status(200).with_body("{\"ok\":true}")),
        });
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Endpoint { addr, inner }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `http://localhost:PORT{path}`: the same endpoint through a DNS name.
    pub fn localhost_url(&self, path: &str) -> String {
        format!("http://localhost:{}{path}", self.addr.port())
    }

    /// Answers these, in order, before the default.
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.inner.script.lock().unwrap().extend(answers);
    }

    /// What to answer once the script is used up.
    pub fn by_default(&self, answer: Answer) {
        *self.inner.default.lock().unwrap() = answer;
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.inner.hits.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.inner.hits.lock().unwrap().len()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn redirect(to: String) -> Response {
    redirect_with(302, to)
}

fn redirect_with(status: u16, to: String) -> Response {
    Response::builder()
        .status(status)
        .header("location", to)
        .body(Body::empty())
        .unwrap()
}

async fn answer(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    let at_ms = now_ms();
    let path = req.uri().path().to_owned();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = axum::body::to_bytes(req.into_body(), 16 << 20)
        .await
        .unwrap()
        .to_vec();
    inner.hits.lock().unwrap().push(Hit {
        path: path.clone(),
        headers,
        body,
        at_ms,
    });
    match path.as_str() {
        "/loop/a" => return redirect("/loop/b".into()),
        "/loop/b" => return redirect("/loop/a".into()),
        "/big" => {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let endless = futures_util::stream::repeat(Ok::<_, Infallible>(chunk));
            return Response::builder()
                .status(200)
                .body(Body::from_stream(endless))
                .unwrap();
        }
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/to/") {
        return redirect_with(307, format!("http://{rest}"));
    }
    if let Some(n) = path.strip_prefix("/chain/") {
        let n: u32 = n.parse().unwrap();
        if n > 0 {
            return redirect(format!("/chain/{}", n - 1));
        }
    }
    let a = inner
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or_else(|| inner.default.lock().unwrap().clone());
    let mut resp = Response::builder().status(a.status);
    for (k, v) in &a.headers {
        resp = resp.header(*k, v);
    }
    resp.body(Body::from(a.body)).unwrap()
}
