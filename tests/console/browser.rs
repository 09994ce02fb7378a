//! A headless Chromium for the console's tests, driven over WebDriver (`fantoccini`)
//! through the distribution's `chromedriver` (Debian: `chromium` and
//! `chromium-driver`; `.ci/run` installs them). No test downloads a browser.
//!
//! Each test gets its own chromedriver on a free port and its own browser session,
//! both ended when the [`Browser`] drops. Without a browser on this machine the
//! tests say SKIPPED, unless `SWITCHBOARD_REQUIRE_BROWSER` is set (CI sets it), when
//! they fail.
//!
//! Every wait is on the page's state with a deadline ([`Browser::wait_text`] and
//! friends poll the DOM), never a sleep.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// How long a wait on the page gives up after.
pub const PAGE_DEADLINE: Duration = Duration::from_secs(15);

/// One browser session and the chromedriver serving it.
pub struct Browser {
    pub client: Client,
    driver: Child,
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

impl Browser {
    /// A fresh headless browser, or `None` (with a SKIPPED line) when this machine has
    /// none and the run does not require one.
    pub async fn start(test: &str) -> Option<Browser> {
        let driver = find_program(&["chromedriver"]);
        let chrome = std::env::var_os("SWITCHBOARD_CHROMIUM")
            .map(PathBuf::from)
            .or_else(|| find_program(&["chromium", "chromium-browser", "google-chrome"]));
        let (Some(driver), Some(chrome)) = (driver, chrome) else {
            let why = "no chromium/chromedriver on PATH (apt-get install chromium chromium-driver)";
            if std::env::var_os("SWITCHBOARD_REQUIRE_BROWSER").is_some() {
                panic!("{test}: {why}, and SWITCHBOARD_REQUIRE_BROWSER is set");
            }
            eprintln!("SKIPPED {test}: {why}");
            return None;
        };
        let port = free_port();
        use std::os::unix::process::CommandExt as _;
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            // Its own process group, so dropping the Browser ends the browser too.
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let caps = json!({
            "goog:chromeOptions": {
                "binary": chrome,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--window-size=1400,1000",
                    "--no-first-run", "--disable-extensions"
                ]
            }
        });
        let caps = caps.as_object().expect("object").clone();
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let client = loop {
            // chromedriver takes a moment to listen: retry the session until it does.
            let attempt =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(caps.clone())
                    .connect(&url)
                    .await;
            match attempt {
                Ok(c) => break c,
                Err(e) if started.elapsed() < PAGE_DEADLINE => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{test}: no WebDriver session on {url}: {e}"),
            }
        };
        Some(Browser {
            client,
            driver: child,
        })
    }

    /// Navigates to `url`.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    /// The current URL.
    pub async fn url(&self) -> String {
        self.client.current_url().await.expect("url").to_string()
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .expect("script runs")
    }

    /// Waits until the element at `css` exists and its text contains `text`; returns
    /// the text.
    pub async fn wait_text(&self, css: &str, text: &str) -> String {
        let deadline = Instant::now() + PAGE_DEADLINE;
        let mut last = String::new();
        loop {
            if let Ok(el) = self.client.find(Locator::Css(css)).await {
                if let Ok(t) = el.text().await {
                    if t.contains(text) {
                        return t;
                    }
                    last = t;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{css} never showed {text:?} (last text: {last:?}; url {})",
                self.url().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until no element matches `css`.
    pub async fn wait_gone(&self, css: &str) {
        let deadline = Instant::now() + PAGE_DEADLINE;
        while !self
            .client
            .find_all(Locator::Css(css))
            .await
            .expect("query")
            .is_empty()
        {
            assert!(Instant::now() < deadline, "{css} never went away");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `script` (a function body) returns `true`.
    pub async fn wait_js(&self, what: &str, script: &str) {
        let deadline = Instant::now() + PAGE_DEADLINE;
        while self.js(script, vec![]).await != Value::Bool(true) {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Clicks the element at `css`. A live update may replace the element between
    /// finding and clicking it (a stale reference): found again and retried until
    /// the deadline.
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + PAGE_DEADLINE;
        loop {
            let attempt = match self.client.find(Locator::Css(css)).await {
                Ok(el) => el.click().await,
                Err(e) => Err(e),
            };
            match attempt {
                Ok(()) => return,
                Err(e) => assert!(Instant::now() < deadline, "cannot click {css}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Types `text` into the field at `css` (sign-in and filter fields, which live
    /// updates never replace while focused).
    pub async fn type_into(&self, css: &str, text: &str) {
        let el = self
            .client
            .wait()
            .at_most(PAGE_DEADLINE)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} to type into: {e}"));
        el.send_keys(text).await.expect("type");
    }

    /// Signs in at `base` with `token` and waits for the console's overview.
    pub async fn sign_in(&self, base: &str, token: &str) {
        self.goto(&format!("{base}/console")).await;
        self.type_into("#token", token).await;
        self.click("section.login button").await;
        self.wait_js(
            "signed in",
            "return location.pathname === '/console' && !!document.querySelector('main h1');",
        )
        .await;
    }

    /// Asserts that markup shown on this page ran nothing: after a live update has
    /// swapped the regions at least once, no global the injected script or handler
    /// would set exists, and no element was injected into the page.
    pub async fn assert_nothing_injected(&self) {
        self.wait_js(
            "a live update arrived",
            "return window.switchboardConsole.updates > 0;",
        )
        .await;
        let pwned = self.js("return typeof window.__pwned;", vec![]).await;
        assert_eq!(
            pwned,
            json!("undefined"),
            "no injected script or handler ran"
        );
        let imgs = self
            .js(
                "return document.querySelectorAll('main img').length;",
                vec![],
            )
            .await;
        assert_eq!(imgs, json!(0), "no element was injected");
    }

    /// Saves a screenshot as `<target>/console-screenshots/<name>.png` (gitignored).
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("target dir")
            .join("console-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver and the browser it started share a process group: end both.
        let group = -(self.driver.id() as i32);
        kill_group(group);
        let _ = self.driver.wait();
    }
}

/// Sends SIGKILL to a process group.
fn kill_group(group: i32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &group.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
