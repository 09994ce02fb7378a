//! Names on the wire: sanitised identity parts, the dot key and the ARN (PROTOCOL.md §1).
//!
//! The dot key `tenant.type.instance` is how a socket admits and addresses a
//! registration before the gateway has assigned an ARN; the ARN
//! `matrix:{tenant}:{type}:{instance}` is what the gateway addresses executes to.

use std::fmt;

/// Replaces the characters the protocol forbids in identity parts (`.` `:` space, tab,
/// CR, LF) with `-`, so that dot keys and ARNs split unambiguously.
pub(crate) fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| match c {
            '.' | ':' | ' ' | '\t' | '\r' | '\n' => '-',
            c => c,
        })
        .collect()
}

/// The `tenant.type.instance` key of one registration, built from sanitised parts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegistrationKey {
    tenant: String,
    connector_type: String,
    instance_id: String,
    dot: String,
}

impl RegistrationKey {
    /// Builds a key, sanitising each part.
    pub fn new(tenant: &str, connector_type: &str, instance_id: &str) -> Self {
        let (tenant, connector_type, instance_id) = (
            sanitize(tenant),
            sanitize(connector_type),
            sanitize(instance_id),
        );
        let dot = format!("{tenant}.{connector_type}.{instance_id}");
        RegistrationKey {
            tenant,
            connector_type,
            instance_id,
            dot,
        }
    }

    /// The sanitised tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The sanitised connector type.
    pub fn connector_type(&self) -> &str {
        &self.connector_type
    }

    /// The sanitised instance id.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The dot key, `tenant.type.instance`.
    pub fn dot_key(&self) -> &str {
        &self.dot
    }
}

impl fmt::Display for RegistrationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dot)
    }
}

/// A parsed `matrix:{tenant}:{type}:{instance}` ARN.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Arn {
    /// Tenant part.
    pub tenant: String,
    /// Connector type part (the gateway may have canonicalised it).
    pub connector_type: String,
    /// Instance part; keeps any further colons.
    pub instance_id: String,
}

/// Why an ARN string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed ARN {0:?}: expected matrix:{{tenant}}:{{type}}:{{instance}}")]
pub struct MalformedArn(pub String);

impl Arn {
    /// Parses with at most 4 splits on `:`, so extra colons stay in the instance part.
    pub fn parse(s: &str) -> Result<Self, MalformedArn> {
        let mut parts = s.splitn(4, ':');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("matrix"), Some(t), Some(ty), Some(i)) => Ok(Arn {
                tenant: t.to_owned(),
                connector_type: ty.to_owned(),
                instance_id: i.to_owned(),
            }),
            _ => Err(MalformedArn(s.to_owned())),
        }
    }

    /// Builds the ARN the gateway assigns to a registration key.
    pub fn for_key(key: &RegistrationKey) -> Self {
        Arn {
            tenant: key.tenant().to_owned(),
            connector_type: key.connector_type().to_owned(),
            instance_id: key.instance_id().to_owned(),
        }
    }

    /// The dot key rebuilt from the ARN's parts.
    pub fn dot_key(&self) -> String {
        format!(
            "{}.{}.{}",
            self.tenant, self.connector_type, self.instance_id
        )
    }
}

impl fmt::Display for Arn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "matrix:{}:{}:{}",
            self.tenant, self.connector_type, self.instance_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_replaces_every_forbidden_character() {
        assert_eq!(sanitize("a.b:c d\te\rf\ng"), "a-b-c-d-e-f-g");
        assert_eq!(sanitize("plain_id-1"), "plain_id-1");
    }

    #[test]
    fn dot_key_is_built_from_sanitised_parts() {
        let k = RegistrationKey::new("acme.io", "echo", "node 1");
        assert_eq!(k.dot_key(), "acme-io.echo.node-1");
        assert_eq!(k.tenant(), "acme-io");
    }

    #[test]
    fn arn_keeps_extra_colons_in_the_instance() {
        let a = Arn::parse("matrix:t:echo:a:b:c").unwrap();
        assert_eq!(a.instance_id, "a:b:c");
        assert_eq!(a.to_string(), "matrix:t:echo:a:b:c");
    }

    #[test]
    fn arn_without_prefix_or_with_too_few_parts_is_malformed() {
        assert!(Arn::parse("arn:t:echo:i").is_err());
        assert!(Arn::parse("matrix:t:echo").is_err());
        assert!(Arn::parse("").is_err());
    }

    #[test]
    fn arn_round_trips_to_the_dot_key() {
        let k = RegistrationKey::new("t", "echo", "i1");
        assert_eq!(Arn::for_key(&k).dot_key(), k.dot_key());
    }
}
