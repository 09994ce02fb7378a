//! The credential chain on its own: which credential a register presents, and which
//! refusals drop it.

use crate::mux::core::credentials::Credentials;
use crate::mux::core::Credential;
use crate::proto::RegisterConnectorRequest;

/// What a register presents now, as (session token, jwt).
fn present(c: &mut Credentials) -> (String, String) {
    let mut req = RegisterConnectorRequest {
        jwt_token: "stale".into(),
        session_token: "stale".into(),
        ..Default::default()
    };
    c.present(&mut req);
    (req.session_token, req.jwt_token)
}

fn pair(session_token: &str, jwt: &str) -> (String, String) {
    (session_token.into(), jwt.into())
}

#[test]
fn each_credential_refusal_falls_back_to_the_next_until_a_bare_register() {
    let mut c = Credentials::new(Some("s".into()), Some("j".into()), "cfg", false);
    assert_eq!(present(&mut c), pair("s", ""));
    assert_eq!(
        c.refused("invalid_session_token: gone"),
        Some(Credential::SessionToken)
    );
    assert_eq!(present(&mut c), pair("", "j"));
    assert_eq!(c.refused("expired_token: old"), Some(Credential::Jwt));
    assert_eq!(present(&mut c), pair("", "cfg"));
    assert_eq!(
        c.refused("untrusted_issuer: who"),
        Some(Credential::Configured)
    );
    assert_eq!(present(&mut c), pair("", ""));
    assert_eq!(c.refused("invalid_token: nothing"), None, "nothing to drop");
    assert_eq!(present(&mut c), pair("", ""));
}

#[test]
fn a_refusal_without_a_credential_code_drops_nothing() {
    let mut c = Credentials::new(None, Some("j".into()), "", false);
    present(&mut c);
    for error in [
        "unauthorized",
        "overloaded: later",
        " invalid_token: not a prefix",
    ] {
        assert_eq!(c.refused(error), None, "{error}");
        assert_eq!(present(&mut c), pair("", "j"));
    }
}

#[test]
fn an_empty_configured_token_is_no_credential() {
    let mut c = Credentials::new(None, None, "", false);
    assert_eq!(present(&mut c), pair("", ""));
    assert_eq!(c.refused("invalid_token: x"), None);
}

#[test]
fn only_a_new_session_token_is_reported_and_it_is_presented_next() {
    let mut c = Credentials::new(None, Some("j".into()), "", false);
    assert_eq!(c.issued(String::new()), None);
    assert_eq!(c.issued("t".into()), Some("t".into()));
    assert_eq!(c.issued("t".into()), None);
    assert_eq!(present(&mut c), pair("t", ""));
    c.forget_session_token();
    assert_eq!(present(&mut c), pair("", "j"));
}

#[test]
fn a_register_waits_for_a_jwt_only_with_nothing_better_to_present() {
    let c = Credentials::new(None, None, "cfg", true);
    assert!(c.must_wait(), "a configured token does not end the wait");
    let c = Credentials::new(Some("s".into()), None, "", true);
    assert!(!c.must_wait());
    let mut c = Credentials::new(None, None, "", true);
    c.set_jwt("j".into());
    assert!(!c.must_wait() && c.awaiting_jwt());
    let mut c = Credentials::new(None, None, "", true);
    c.stop_waiting();
    assert!(!c.must_wait() && !c.awaiting_jwt());
}

#[test]
fn a_jwt_is_unpresented_until_a_register_presents_it() {
    let mut c = Credentials::new(None, None, "cfg", false);
    present(&mut c);
    assert!(!c.unpresented_jwt());
    c.set_jwt("j".into());
    assert!(c.unpresented_jwt());
    assert_eq!(present(&mut c), pair("", "j"));
    assert!(!c.unpresented_jwt());
}
