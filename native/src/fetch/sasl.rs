//! SASL for the native fetcher: PLAIN and SCRAM-SHA-256/512 (RFC 5802, 7677) over Kafka's
//! SaslHandshake v1 and SaslAuthenticate v1. The password never leaves this module except
//! as the broker's protocol needs it, and no error text contains it.

use openssl::base64::{decode_block, encode_block};
use openssl::hash::{hash, MessageDigest};
use openssl::pkey::PKey;
use openssl::sign::Signer;

/// The mechanisms this module speaks, by librdkafka's `sasl.mechanism` names.
pub const MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

pub struct Credentials {
    pub mechanism: String,
    pub username: String,
    pub password: String,
}

/// One side of a SASL exchange: the next message to send for the broker's last answer.
pub enum Exchange {
    Plain,
    Scram(Scram),
}

pub struct Scram {
    digest: MessageDigest,
    client_first_bare: String,
    nonce: String,
    server_signature: Option<Vec<u8>>,
}

fn hmac(digest: MessageDigest, key: &[u8], data: &[u8]) -> Result<Vec<u8>, String> {
    let key = PKey::hmac(key).map_err(|e| e.to_string())?;
    let mut signer = Signer::new(digest, &key).map_err(|e| e.to_string())?;
    signer.update(data).map_err(|e| e.to_string())?;
    signer.sign_to_vec().map_err(|e| e.to_string())
}

fn sasl_name(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

impl Exchange {
    /// The first message.
    pub fn start(c: &Credentials) -> Result<(Exchange, Vec<u8>), String> {
        if c.mechanism == "PLAIN" {
            let msg = format!("\0{}\0{}", c.username, c.password);
            return Ok((Exchange::Plain, msg.into_bytes()));
        }
        let digest = match c.mechanism.as_str() {
            "SCRAM-SHA-256" => MessageDigest::sha256(),
            "SCRAM-SHA-512" => MessageDigest::sha512(),
            other => return Err(format!("sasl.mechanism {other} is not supported natively")),
        };
        let mut raw = [0u8; 24];
        openssl::rand::rand_bytes(&mut raw).map_err(|e| e.to_string())?;
        let nonce = encode_block(&raw);
        let client_first_bare = format!("n={},r={nonce}", sasl_name(&c.username));
        let first = format!("n,,{client_first_bare}").into_bytes();
        let scram = Scram {
            digest,
            client_first_bare,
            nonce,
            server_signature: None,
        };
        Ok((Exchange::Scram(scram), first))
    }

    /// The answer to the broker's `challenge`: Some(message), or None when done.
    pub fn step(&mut self, c: &Credentials, challenge: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let Exchange::Scram(s) = self else {
            return Ok(None);
        };
        let text = std::str::from_utf8(challenge).map_err(|_| "a non-UTF-8 SCRAM message")?;
        let field = |name: char| -> Option<&str> {
            text.split(',')
                .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
        };
        if let Some(expected) = s.server_signature.take() {
            if let Some(e) = field('e') {
                return Err(format!("the broker refused the SCRAM proof: {e}"));
            }
            let got = field('v').and_then(|v| decode_block(v).ok());
            return if got.as_deref() == Some(&expected[..]) {
                Ok(None)
            } else {
                Err("the broker's SCRAM signature does not match: not the broker we trust".into())
            };
        }
        let nonce = field('r').ok_or("a SCRAM challenge without a nonce")?;
        if !nonce.starts_with(&s.nonce) {
            return Err("the broker's SCRAM nonce does not extend ours".into());
        }
        let salt = field('s')
            .and_then(|v| decode_block(v).ok())
            .ok_or("a SCRAM challenge without a salt")?;
        let iterations: usize = field('i')
            .and_then(|v| v.parse().ok())
            .ok_or("a SCRAM challenge without iterations")?;
        let mut salted = vec![0u8; s.digest.size()];
        openssl::pkcs5::pbkdf2_hmac(
            c.password.as_bytes(),
            &salt,
            iterations,
            s.digest,
            &mut salted,
        )
        .map_err(|e| e.to_string())?;
        let client_key = hmac(s.digest, &salted, b"Client Key")?;
        let stored_key = hash(s.digest, &client_key).map_err(|e| e.to_string())?;
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", s.client_first_bare);
        let signature = hmac(s.digest, &stored_key, auth_message.as_bytes())?;
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac(s.digest, &salted, b"Server Key")?;
        s.server_signature = Some(hmac(s.digest, &server_key, auth_message.as_bytes())?);
        Ok(Some(
            format!("{without_proof},p={}", encode_block(&proof)).into_bytes(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, with its client nonce.
    #[test]
    fn scram_sha_256_matches_the_rfc_example() {
        let c = Credentials {
            mechanism: "SCRAM-SHA-256".into(),
            username: "user".into(),
            password: "pencil".into(),
        };
        let mut ex = Exchange::Scram(Scram {
            digest: MessageDigest::sha256(),
            client_first_bare: "n=user,r=rOprNGfwEbeRWgbNEkqO".into(),
            nonce: "rOprNGfwEbeRWgbNEkqO".into(),
            server_signature: None,
        });
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let last = ex.step(&c, server_first).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(last).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            ex.step(&c, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .unwrap(),
            None
        );
        let (_, first) = Exchange::start(&c).unwrap();
        assert!(first.starts_with(b"n,,n=user,r="));
    }

    #[test]
    fn a_wrong_server_signature_is_refused() {
        let c = Credentials {
            mechanism: "SCRAM-SHA-512".into(),
            username: "u,=".into(),
            password: "p".into(),
        };
        let (mut ex, first) = Exchange::start(&c).unwrap();
        assert!(String::from_utf8(first.clone())
            .unwrap()
            .starts_with("n,,n=u=2C=3D,r="));
        let nonce = String::from_utf8(first)
            .unwrap()
            .rsplit("r=")
            .next()
            .unwrap()
            .to_owned();
        let challenge = format!("r={nonce}xyz,s=c2FsdA==,i=4096");
        ex.step(&c, challenge.as_bytes()).unwrap().unwrap();
        let err = ex.step(&c, b"v=AAAA").err().unwrap();
        assert!(err.contains("signature"), "{err}");
    }
}
