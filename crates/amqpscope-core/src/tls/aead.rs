//! The AEAD ciphers of the decryptable suites (RustCrypto `aes-gcm`, `chacha20poly1305`), and the
//! suites themselves.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes128Gcm, Aes256Gcm, Nonce, Tag};
use chacha20poly1305::ChaCha20Poly1305;

use super::schedule::HashAlg;

/// The bulk cipher of a suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bulk {
    Aes128Gcm,
    Aes256Gcm,
    ChaCha20Poly1305,
}

impl Bulk {
    pub fn key_len(self) -> usize {
        match self {
            Bulk::Aes128Gcm => 16,
            Bulk::Aes256Gcm | Bulk::ChaCha20Poly1305 => 32,
        }
    }

    /// TLS 1.2 implicit IV length: the 4-byte salt of GCM, the whole 12-byte nonce of ChaCha20.
    pub fn iv_len12(self) -> usize {
        match self {
            Bulk::ChaCha20Poly1305 => 12,
            _ => 4,
        }
    }
}

/// A cipher suite this core can decrypt: (bulk cipher, PRF/HKDF hash).
pub fn suite(id: u16) -> Option<(Bulk, HashAlg)> {
    use Bulk::*;
    use HashAlg::*;
    Some(match id {
        // TLS 1.3
        0x1301 => (Aes128Gcm, Sha256),
        0x1302 => (Aes256Gcm, Sha384),
        0x1303 => (ChaCha20Poly1305, Sha256),
        // TLS 1.2: RSA, DHE, ECDHE (RSA and ECDSA) AES-GCM
        0x009c | 0x009e | 0x00a2 | 0xc02b | 0xc02f | 0xc02d | 0xc031 | 0x00a0 | 0x00a4 => {
            (Aes128Gcm, Sha256)
        }
        0x009d | 0x009f | 0x00a3 | 0xc02c | 0xc030 | 0xc02e | 0xc032 | 0x00a1 | 0x00a5 => {
            (Aes256Gcm, Sha384)
        }
        // TLS 1.2 ChaCha20-Poly1305 (RFC 7905)
        0xcca8..=0xccaa => (ChaCha20Poly1305, Sha256),
        _ => return None,
    })
}

/// The IANA name of a suite, or its number.
pub fn suite_name(id: u16) -> String {
    match tls_parser::TlsCipherSuite::from_id(id) {
        Some(s) => s.name.to_string(),
        None => format!("0x{id:04x}"),
    }
}

/// The IANA name of a suite the parser knows ("" otherwise): no allocation per frame.
pub fn static_suite_name(id: u16) -> &'static str {
    tls_parser::TlsCipherSuite::from_id(id).map_or("", |s| s.name)
}

/// A keyed AEAD.
#[derive(Clone)]
pub enum Aead {
    A128(Box<Aes128Gcm>),
    A256(Box<Aes256Gcm>),
    ChaCha(Box<ChaCha20Poly1305>),
}

impl Aead {
    pub fn new(bulk: Bulk, key: &[u8]) -> Option<Aead> {
        Some(match bulk {
            Bulk::Aes128Gcm => Aead::A128(Box::new(Aes128Gcm::new_from_slice(key).ok()?)),
            Bulk::Aes256Gcm => Aead::A256(Box::new(Aes256Gcm::new_from_slice(key).ok()?)),
            Bulk::ChaCha20Poly1305 => {
                Aead::ChaCha(Box::new(ChaCha20Poly1305::new_from_slice(key).ok()?))
            }
        })
    }

    /// Open `buf` (ciphertext then the 16-byte tag) in place; on success `buf` is the plaintext.
    /// On failure `buf` is left as it was.
    pub fn open(&self, nonce: &[u8; 12], aad: &[u8], buf: &mut Vec<u8>) -> bool {
        if buf.len() < 16 {
            return false;
        }
        let n = buf.len() - 16;
        let (msg, tag) = buf.split_at_mut(n);
        let tag = *Tag::from_slice(tag);
        let nonce = Nonce::from_slice(nonce);
        let ok = match self {
            Aead::A128(c) => c.decrypt_in_place_detached(nonce, aad, msg, &tag),
            Aead::A256(c) => c.decrypt_in_place_detached(nonce, aad, msg, &tag),
            Aead::ChaCha(c) => c.decrypt_in_place_detached(nonce, aad, msg, &tag),
        }
        .is_ok();
        if ok {
            buf.truncate(n);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_each_bulk_cipher() {
        for bulk in [Bulk::Aes128Gcm, Bulk::Aes256Gcm, Bulk::ChaCha20Poly1305] {
            let key = vec![7; bulk.key_len()];
            let nonce = [3; 12];
            let mut buf = b"hello".to_vec();
            let sealed = match Aead::new(bulk, &key).unwrap() {
                Aead::A128(c) => c.encrypt_in_place(Nonce::from_slice(&nonce), b"ad", &mut buf),
                Aead::A256(c) => c.encrypt_in_place(Nonce::from_slice(&nonce), b"ad", &mut buf),
                Aead::ChaCha(c) => c.encrypt_in_place(Nonce::from_slice(&nonce), b"ad", &mut buf),
            };
            sealed.unwrap();
            let a = Aead::new(bulk, &key).unwrap();
            let mut bad = buf.clone();
            assert!(!a.open(&nonce, b"xx", &mut bad));
            assert_eq!(bad, buf);
            assert!(a.open(&nonce, b"ad", &mut buf));
            assert_eq!(buf, b"hello");
        }
    }
}
