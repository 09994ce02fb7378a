//! A registration's key pair: P-256 (ES256), made by `p256` from the operating
//! system's randomness. The private key is kept as PKCS#8 PEM (what `jsonwebtoken`
//! signs the client assertion with); the public key goes to the gateway as SPKI PEM
//! (what the contract's key registration expects). No cryptography is done here
//! beyond calling the crate.

use p256::ecdsa::{SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey, LineEnding};
use rand_core::OsRng;

use crate::error::{Error, Result};

/// A registration's P-256 key pair.
#[derive(Clone)]
pub(crate) struct KeyPair {
    signing: SigningKey,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPair(<private>)")
    }
}

impl KeyPair {
    /// A fresh key pair from the operating system's randomness.
    pub(crate) fn generate() -> Self {
        KeyPair {
            signing: SigningKey::random(&mut OsRng),
        }
    }

    /// Reads a PKCS#8 PEM private key (as [`KeyPair::private_key_pem`] writes it).
    pub(crate) fn from_pkcs8_pem(pem: &str) -> Result<Self> {
        let signing = SigningKey::from_pkcs8_pem(pem).map_err(|e| {
            Error::Config(format!(
                "the stored private key is not a PKCS#8 PEM P-256 key ({e}); delete the \
                 registration's credential directory to request a fresh approval"
            ))
        })?;
        Ok(KeyPair { signing })
    }

    /// The private key as PKCS#8 PEM; the buffer is wiped when dropped.
    pub(crate) fn private_key_pem(
        &self,
    ) -> Result<p256::elliptic_curve::zeroize::Zeroizing<String>> {
        self.signing
            .to_pkcs8_pem(LineEnding::LF)
            .map_err(|e| Error::Config(format!("cannot encode the private key as PKCS#8: {e}")))
    }

    /// The public key as SubjectPublicKeyInfo PEM.
    pub(crate) fn public_key_pem(&self) -> Result<String> {
        VerifyingKey::from(&self.signing)
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| Error::Config(format!("cannot encode the public key as SPKI: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::pkcs8::DecodePublicKey;

    #[test]
    fn the_private_key_round_trips_through_pkcs8_pem() {
        let key = KeyPair::generate();
        let pem = key.private_key_pem().unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{}", &*pem);
        let back = KeyPair::from_pkcs8_pem(&pem).unwrap();
        assert_eq!(
            back.public_key_pem().unwrap(),
            key.public_key_pem().unwrap()
        );
    }

    #[test]
    fn the_public_key_is_spki_pem_of_p256() {
        let pem = KeyPair::generate().public_key_pem().unwrap();
        assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----"), "{pem}");
        assert!(p256::PublicKey::from_public_key_pem(&pem).is_ok());
    }

    #[test]
    fn two_generated_keys_differ() {
        let (a, b) = (KeyPair::generate(), KeyPair::generate());
        assert_ne!(a.public_key_pem().unwrap(), b.public_key_pem().unwrap());
    }

    #[test]
    fn a_malformed_private_key_is_a_config_error_that_says_what_to_do() {
        let e = KeyPair::from_pkcs8_pem("not a key").unwrap_err();
        assert!(e.to_string().contains("credential directory"), "{e}");
    }
}
