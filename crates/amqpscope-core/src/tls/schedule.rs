//! Key schedules: TLS 1.3 HKDF-Expand-Label (RFC 8446 §7.1, §7.3) and KeyUpdate; the TLS 1.2 PRF
//! (RFC 5246 §5) key block from a master secret. RustCrypto's `hkdf`/`hmac`/`sha2` do the
//! cryptography.

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha384};

/// The hash of a cipher suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlg {
    Sha256,
    Sha384,
}

impl HashAlg {
    pub fn output_len(self) -> usize {
        match self {
            HashAlg::Sha256 => 32,
            HashAlg::Sha384 => 48,
        }
    }
}

/// HKDF-Expand-Label(secret, label, context, len) with the "tls13 " prefix. None: a secret of the
/// wrong size (a damaged key log line).
pub fn expand_label(
    hash: HashAlg,
    secret: &[u8],
    label: &str,
    context: &[u8],
    len: usize,
) -> Option<Vec<u8>> {
    let full = 6 + label.len();
    if len > u16::MAX as usize || full > 255 || context.len() > 255 {
        return None;
    }
    let mut info = Vec::with_capacity(4 + full + context.len());
    info.extend_from_slice(&(len as u16).to_be_bytes());
    info.push(full as u8);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label.as_bytes());
    info.push(context.len() as u8);
    info.extend_from_slice(context);
    let mut out = vec![0; len];
    match hash {
        HashAlg::Sha256 => Hkdf::<Sha256>::from_prk(secret)
            .ok()?
            .expand(&info, &mut out)
            .ok()?,
        HashAlg::Sha384 => Hkdf::<Sha384>::from_prk(secret)
            .ok()?
            .expand(&info, &mut out)
            .ok()?,
    }
    Some(out)
}

/// The write key and IV of a TLS 1.3 traffic secret.
pub fn traffic_keys(hash: HashAlg, secret: &[u8], key_len: usize) -> Option<(Vec<u8>, Vec<u8>)> {
    if secret.len() != hash.output_len() {
        return None;
    }
    let key = expand_label(hash, secret, "key", &[], key_len)?;
    let iv = expand_label(hash, secret, "iv", &[], 12)?;
    Some((key, iv))
}

/// The next application traffic secret after a KeyUpdate.
pub fn next_secret(hash: HashAlg, secret: &[u8]) -> Option<Vec<u8>> {
    expand_label(hash, secret, "traffic upd", &[], hash.output_len())
}

fn p_hash<M: Mac + hmac::digest::KeyInit + Clone>(secret: &[u8], seed: &[u8], out: &mut [u8]) {
    let Ok(mac) = <M as hmac::digest::KeyInit>::new_from_slice(secret) else {
        return;
    };
    // A(1) = HMAC(secret, seed); output block i = HMAC(secret, A(i) + seed)
    let mut a = {
        let mut m = mac.clone();
        m.update(seed);
        m.finalize().into_bytes().to_vec()
    };
    let mut done = 0;
    while done < out.len() {
        let mut m = mac.clone();
        m.update(&a);
        m.update(seed);
        let block = m.finalize().into_bytes();
        let n = block.len().min(out.len() - done);
        out[done..done + n].copy_from_slice(&block[..n]);
        done += n;
        let mut m = mac.clone();
        m.update(&a);
        a = m.finalize().into_bytes().to_vec();
    }
}

/// TLS 1.2 PRF(secret, label, seed) with the suite's hash.
pub fn prf12(hash: HashAlg, secret: &[u8], label: &[u8], seed: &[u8], len: usize) -> Vec<u8> {
    let mut full = Vec::with_capacity(label.len() + seed.len());
    full.extend_from_slice(label);
    full.extend_from_slice(seed);
    let mut out = vec![0; len];
    match hash {
        HashAlg::Sha256 => p_hash::<Hmac<Sha256>>(secret, &full, &mut out),
        HashAlg::Sha384 => p_hash::<Hmac<Sha384>>(secret, &full, &mut out),
    }
    out
}

/// TLS 1.2 AEAD keys: (client key, server key, client IV, server IV) from the key block
/// (`key expansion`, server random then client random; no MAC keys for AEAD suites).
pub fn key_block12(
    hash: HashAlg,
    master: &[u8],
    client_random: &[u8; 32],
    server_random: &[u8; 32],
    key_len: usize,
    iv_len: usize,
) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut seed = Vec::with_capacity(64);
    seed.extend_from_slice(server_random);
    seed.extend_from_slice(client_random);
    let block = prf12(
        hash,
        master,
        b"key expansion",
        &seed,
        2 * (key_len + iv_len),
    );
    let (ck, rest) = block.split_at(key_len);
    let (sk, rest) = rest.split_at(key_len);
    let (civ, siv) = rest.split_at(iv_len);
    (ck.to_vec(), sk.to_vec(), civ.to_vec(), siv.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Vec<u8> {
        let s: String = s.split_ascii_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // RFC 8448 §3 (Simple 1-RTT Handshake), TLS_AES_128_GCM_SHA256.
    #[test]
    fn rfc8448_server_handshake_keys() {
        let secret = h("b6 7b 7d 69 0c c1 6c 4e 75 e5 42 13 cb 2d 37 b4 e9 c9 12 bc de d9 10 5d 42 be fd 59 d3 91 ad 38");
        let (key, iv) = traffic_keys(HashAlg::Sha256, &secret, 16).unwrap();
        assert_eq!(key, h("3f ce 51 60 09 c2 17 27 d0 f2 e4 e8 6e e4 03 bc"));
        assert_eq!(iv, h("5d 31 3e b2 67 12 76 ee 13 00 0b 30"));
    }

    #[test]
    fn rfc8448_client_handshake_keys() {
        let secret = h("b3 ed db 12 6e 06 7f 35 a7 80 b3 ab f4 5e 2d 8f 3b 1a 95 07 38 f5 2e 96 00 74 6a 0e 27 a5 5a 21");
        let (key, iv) = traffic_keys(HashAlg::Sha256, &secret, 16).unwrap();
        assert_eq!(key, h("db fa a6 93 d1 76 2c 5b 66 6a f5 d9 50 25 8d 01"));
        assert_eq!(iv, h("5b d3 c7 1b 83 6e 0b 76 bb 73 26 5f"));
    }

    #[test]
    fn rfc8448_application_keys() {
        let server = h("a1 1a f9 f0 55 31 f8 56 ad 47 11 6b 45 a9 50 32 82 04 b4 f4 4b fb 6b 3a 4b 4f 1f 3f cb 63 16 43");
        let (key, iv) = traffic_keys(HashAlg::Sha256, &server, 16).unwrap();
        assert_eq!(key, h("9f 02 28 3b 6c 9c 07 ef c2 6b b9 f2 ac 92 e3 56"));
        assert_eq!(iv, h("cf 78 2b 88 dd 83 54 9a ad f1 e9 84"));
        let client = h("9e 40 64 6c e7 9a 7f 9d c0 5a f8 88 9b ce 65 52 87 5a fa 0b 06 df 00 87 f7 92 eb b7 c1 75 04 a5");
        let (key, iv) = traffic_keys(HashAlg::Sha256, &client, 16).unwrap();
        assert_eq!(key, h("17 42 2d da 59 6e d5 d9 ac d8 90 e3 c6 3f 50 51"));
        assert_eq!(iv, h("5b 78 92 3d ee 08 57 90 33 e5 23 d9"));
    }

    #[test]
    fn wrong_secret_sizes_give_no_keys() {
        assert!(traffic_keys(HashAlg::Sha384, &[0; 32], 32).is_none());
        assert_eq!(next_secret(HashAlg::Sha256, &[7; 32]).unwrap().len(), 32);
    }

    // The TLS 1.2 PRF test vector for SHA-256 posted to the IETF TLS list (Thomson), also used by
    // Go's and OpenSSL's tests: 100 bytes of output.
    #[test]
    fn tls12_prf_sha256_vector() {
        let secret = h("9b be 43 6b a9 40 f0 17 b1 76 52 84 9a 71 db 35");
        let seed = h("a0 ba 9f 93 6c da 31 18 27 a6 f7 96 ff d5 19 8c");
        let out = prf12(HashAlg::Sha256, &secret, b"test label", &seed, 100);
        assert_eq!(
            out,
            h("e3 f2 29 ba 72 7b e1 7b 8d 12 26 20 55 7c d4 53 c2 aa b2 1d 07 c3 d4 95 32 9b 52 d4 e6 1e db 5a
               6b 30 17 91 e9 0d 35 c9 c9 a4 6b 4e 14 ba f9 af 0f a0 22 f7 07 7d ef 17 ab fd 37 97 c0 56 4b ab
               4f bc 91 66 6e 9d ef 9b 97 fc e3 4f 79 67 89 ba a4 80 82 d1 22 ee 42 c5 a7 2e 5a 51 10 ff f7 01
               87 34 7b 66")
        );
    }
}
