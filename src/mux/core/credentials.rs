//! Which credential a registration's register presents, and what a refusal of it
//! does (contract "Register decisions"). Owned by each registration in the
//! registrations table; no timers, no I/O.
//!
//! A register presents ONE credential, in this order: the session token of an
//! earlier approved register, else the JWT from the approval exchange, else the
//! configured `auth_token`, else nothing (which a manual-mode gateway answers
//! PENDING). A refusal that names the presented credential invalid
//! (`invalid_session_token:`, `invalid_token:`, `expired_token:`, `untrusted_issuer:`)
//! drops it, so the next register presents the next one and the chain ends, at
//! worst, in a bare register and a fresh approval.

use crate::proto::RegisterConnectorRequest;

/// Which credential a register presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    SessionToken,
    Jwt,
    /// The configured `auth_token`.
    Configured,
    None,
}

/// Refusal codes (contract, "Register decisions" 3) that void the presented
/// credential, so the next register tries the next one at once.
const CREDENTIAL_CODES: [&str; 4] = [
    "invalid_session_token:",
    "invalid_token:",
    "expired_token:",
    "untrusted_issuer:",
];

/// One registration's credentials and what its last register presented.
#[derive(Debug)]
pub(super) struct Credentials {
    session_token: Option<String>,
    jwt: Option<String>,
    /// The configured `auth_token`, until a gateway calls it invalid.
    configured: Option<String>,
    /// What the last register presented.
    presented: Credential,
    /// Hold the first register for a JWT being minted from stored keys.
    await_jwt: bool,
}

impl Credentials {
    /// The credentials a registration starts with: a stored session token and JWT, the
    /// configured `auth_token` (empty for none), and whether to wait for a JWT.
    pub(super) fn new(
        session_token: Option<String>,
        jwt: Option<String>,
        configured: &str,
        await_jwt: bool,
    ) -> Self {
        Credentials {
            session_token,
            jwt,
            configured: Some(configured.to_owned()).filter(|t| !t.is_empty()),
            presented: Credential::None,
            await_jwt,
        }
    }

    /// Whether the registration still waits for a JWT from stored keys.
    pub(super) fn awaiting_jwt(&self) -> bool {
        self.await_jwt
    }

    /// Whether the next register must wait for that JWT: it waits, and there is
    /// neither a session token nor a JWT to present instead.
    pub(super) fn must_wait(&self) -> bool {
        self.await_jwt && self.session_token.is_none() && self.jwt.is_none()
    }

    /// Stops waiting for a JWT: one arrived, minting gave up, or the wait timed out.
    pub(super) fn stop_waiting(&mut self) {
        self.await_jwt = false;
    }

    /// Fills `req`'s credential fields with the best credential (a session token goes
    /// in `session_token`, anything else in `jwt_token`) and remembers which it was.
    pub(super) fn present(&mut self, req: &mut RegisterConnectorRequest) {
        let (presented, token) = if let Some(t) = &self.session_token {
            (Credential::SessionToken, t.clone())
        } else if let Some(t) = &self.jwt {
            (Credential::Jwt, t.clone())
        } else if let Some(t) = &self.configured {
            (Credential::Configured, t.clone())
        } else {
            (Credential::None, String::new())
        };
        self.presented = presented;
        (req.session_token, req.jwt_token) = match presented {
            Credential::SessionToken => (token, String::new()),
            _ => (String::new(), token),
        };
    }

    /// A register was refused with `error`: when the code voids the presented
    /// credential, forgets it and returns which it was.
    pub(super) fn refused(&mut self, error: &str) -> Option<Credential> {
        let presented = self.presented;
        if presented == Credential::None || !CREDENTIAL_CODES.iter().any(|c| error.starts_with(c)) {
            return None;
        }
        match presented {
            Credential::SessionToken => self.session_token = None,
            Credential::Jwt => self.jwt = None,
            Credential::Configured => self.configured = None,
            Credential::None => {}
        }
        Some(presented)
    }

    /// Forgets the session token (a refusal for another reason, whose common cause is
    /// a stale token, or an approval that makes the JWT the one to present).
    pub(super) fn forget_session_token(&mut self) {
        self.session_token = None;
    }

    /// Keeps a JWT from the approval exchange for the next register.
    pub(super) fn set_jwt(&mut self, jwt: String) {
        self.jwt = Some(jwt);
    }

    /// Whether a JWT arrived that the last register did not present.
    pub(super) fn unpresented_jwt(&self) -> bool {
        self.jwt.is_some() && self.presented != Credential::Jwt
    }

    /// Keeps the session token a successful register issued; returns it when it is
    /// new, so the driver persists each token once.
    pub(super) fn issued(&mut self, token: String) -> Option<String> {
        if token.is_empty() || self.session_token.as_ref() == Some(&token) {
            return None;
        }
        self.session_token = Some(token.clone());
        Some(token)
    }
}
