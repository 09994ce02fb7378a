//! Realistic webhook deliveries for the ingest benches.
//!
//! Bodies are shaped like GitHub's `issues.opened` payload: an issue, its author, the
//! repository and the sender, each with the API and HTML URLs GitHub sends, and an
//! issue text of mixed prose, numbers and hex digests drawn from a seeded generator.
//! A body of `x` padding would flatter anything that looks at bytes (compression, page
//! packing); this one compresses about as well as real deliveries do (zstd level 1:
//! 1.5–2× at 1 KiB, 3–4× at 5 KiB; the bench prints the figure it measured), so the
//! store's byte savings are the ones a real source would see.

use std::fmt::Write as _;

/// Words of the issue text: a few hundred of English and developer prose.
const WORDS: &str = "the a to of and in is it that for on with this as be are not when \
we but from at or by an was have error after before build test fails crash panic \
release version update upgrade config default option server client request response \
timeout retry connection socket webhook event delivery signature header body payload \
queue worker job runner deploy staging production rollback migration database index \
query slow fast memory leak cpu latency p99 throughput metric log trace span debug \
warning info expected actual steps reproduce environment linux macos windows docker \
kubernetes node pod container image tag branch main merge pull commit push review \
approve comment label milestone assignee issue bug feature docs example readme typo \
should would could might maybe always never sometimes only also still again please \
thanks hello hi team user customer account billing invoice payment subscription plan \
token secret key rotate expire refresh session login logout password reset email \
notification slack github linear notion stripe cron schedule daily hourly weekly \
json yaml toml file path directory permission denied not found unauthorized forbidden \
rate limit quota exceeded retrying backoff jitter exponential linear constant because \
then so if while until since however therefore although though whereas whether";

/// A small deterministic generator (xorshift), so every run posts the same bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A GitHub `issues.opened`-shaped JSON body of about `size` bytes (never less).
pub fn github_issue(size: usize) -> String {
    let words: Vec<&str> = WORDS.split_whitespace().collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ size as u64);
    let repo = "octo-org/hello-world";
    let api = format!("https://api.github.com/repos/{repo}");
    let number = 1347;
    let user = |login: &str, id: u64| {
        if size <= 2048 {
            return format!(r#"{{"login":"{login}","id":{id},"type":"User"}}"#);
        }
        format!(
            r#"{{"login":"{login}","id":{id},"node_id":"MDQ6VXNlcj{id}","avatar_url":"https://avatars.githubusercontent.com/u/{id}?v=4","url":"https://api.github.com/users/{login}","html_url":"https://github.com/{login}","type":"User","site_admin":false}}"#
        )
    };
    // The fixed part, trimmed for small bodies the way small providers' events are.
    let mut head = format!(
        r#"{{"action":"opened","issue":{{"url":"{api}/issues/{number}","html_url":"https://github.com/{repo}/issues/{number}","id":1987654321,"number":{number},"title":"Webhook deliveries time out after upgrade","state":"open","created_at":"2026-11-30T12:34:56Z","user":{}"#,
        user("octocat", 583231)
    );
    if size > 2048 {
        write!(
            head,
            r#","repository_url":"{api}","labels_url":"{api}/issues/{number}/labels{{/name}}","comments_url":"{api}/issues/{number}/comments","events_url":"{api}/issues/{number}/events","labels":[{{"id":208045946,"name":"bug","color":"f29513","default":true}}],"assignee":null,"comments":0,"author_association":"MEMBER""#
        )
        .unwrap();
    }
    let mut tail = format!(
        r#"}},"repository":{{"id":1296269,"full_name":"{repo}","private":false,"html_url":"https://github.com/{repo}","url":"{api}""#
    );
    if size > 2048 {
        write!(
            tail,
            r#","owner":{},"forks_url":"{api}/forks","hooks_url":"{api}/hooks","issues_url":"{api}/issues{{/number}}","pulls_url":"{api}/pulls{{/number}}","default_branch":"main""#,
            user("octo-org", 6811672)
        )
        .unwrap();
    }
    write!(tail, r#"}},"sender":{}}}"#, user("octocat", 583231)).unwrap();
    let mut text = String::new();
    while head.len() + text.len() + tail.len() + 12 < size {
        match rng.next() % 16 {
            0 => write!(text, "{:x} ", rng.next()).unwrap(),
            1 => write!(text, "{} ", rng.next() % 100_000).unwrap(),
            2 => text.push_str(".\\n\\n"),
            _ => {
                text.push_str(words[(rng.next() % words.len() as u64) as usize]);
                text.push(' ');
            }
        }
    }
    format!(r#"{head},"body":"{text}"{tail}"#)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bodies_are_json_of_about_the_size_asked() {
        for size in [1024, 5 * 1024] {
            let b = super::github_issue(size);
            assert!(b.len() >= size && b.len() < size + 64, "{}", b.len());
            serde_json::from_str::<serde_json::Value>(&b).unwrap();
        }
    }
}
