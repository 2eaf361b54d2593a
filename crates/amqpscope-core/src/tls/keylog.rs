//! NSS key log files (`SSLKEYLOGFILE`, tshark's `tls.keylog_file`, the pcapng Decryption Secrets
//! Block): `LABEL <client_random hex> <secret hex>` per line. Secrets stay in this value: nothing
//! here formats one into a message.

use std::collections::HashMap;

/// The labels the decryption uses; any other line is passed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Label {
    /// TLS 1.2 (and earlier) master secret.
    ClientRandom,
    ClientHandshake,
    ServerHandshake,
    ClientTraffic0,
    ServerTraffic0,
}

impl Label {
    fn parse(s: &str) -> Option<Label> {
        Some(match s {
            "CLIENT_RANDOM" => Label::ClientRandom,
            "CLIENT_HANDSHAKE_TRAFFIC_SECRET" => Label::ClientHandshake,
            "SERVER_HANDSHAKE_TRAFFIC_SECRET" => Label::ServerHandshake,
            "CLIENT_TRAFFIC_SECRET_0" => Label::ClientTraffic0,
            "SERVER_TRAFFIC_SECRET_0" => Label::ServerTraffic0,
            _ => return None,
        })
    }
}

/// Secrets by (label, client random), bounded in entries.
#[derive(Default, Clone)]
pub struct KeyLog {
    secrets: HashMap<(Label, [u8; 32]), Vec<u8>>,
    max_entries: usize,
    /// Bumped whenever a secret is added: connections waiting for keys look again.
    generation: u64,
    /// Lines not understood (never their text: it may hold a secret).
    pub bad_lines: u64,
}

impl std::fmt::Debug for KeyLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the secrets
        write!(f, "KeyLog({} secrets)", self.secrets.len())
    }
}

impl KeyLog {
    pub fn new(max_entries: usize) -> KeyLog {
        KeyLog {
            max_entries,
            ..KeyLog::default()
        }
    }

    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Add every line of a key log text; returns how many secrets were added. Comments (`#`),
    /// blank lines and unknown labels are passed over.
    pub fn add_text(&mut self, text: &str) -> usize {
        let mut added = 0;
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_ascii_whitespace();
            let (Some(label), Some(random), Some(secret), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                self.bad_lines += 1;
                continue;
            };
            let Some(label) = Label::parse(label) else {
                continue; // EARLY_TRAFFIC_SECRET, EXPORTER_SECRET, RSA, …
            };
            let (Some(random), Some(secret)) = (unhex(random), unhex(secret)) else {
                self.bad_lines += 1;
                continue;
            };
            let Ok(random) = <[u8; 32]>::try_from(random.as_slice()) else {
                self.bad_lines += 1;
                continue;
            };
            if secret.is_empty() || secret.len() > 64 {
                self.bad_lines += 1;
                continue;
            }
            if self.secrets.len() >= self.max_entries
                && !self.secrets.contains_key(&(label, random))
            {
                continue;
            }
            if self.secrets.insert((label, random), secret).is_none() {
                added += 1;
            }
        }
        if added > 0 {
            self.generation += 1;
        }
        added
    }

    pub fn get(&self, label: Label, client_random: &[u8; 32]) -> Option<&[u8]> {
        self.secrets
            .get(&(label, *client_random))
            .map(Vec::as_slice)
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 256 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nss_lines_and_skips_the_rest() {
        let r = "ab".repeat(32);
        let text = format!(
            "# comment\n\nCLIENT_RANDOM {r} {}\nSERVER_TRAFFIC_SECRET_0 {r} {}\r\nEXPORTER_SECRET {r} 00\nCLIENT_RANDOM zz 00\nCLIENT_RANDOM {r}\n",
            "01".repeat(48),
            "02".repeat(32)
        );
        let mut k = KeyLog::new(10);
        assert_eq!(k.add_text(&text), 2);
        assert_eq!(k.bad_lines, 2);
        let random = [0xab; 32];
        assert_eq!(k.get(Label::ClientRandom, &random).unwrap().len(), 48);
        assert_eq!(k.get(Label::ServerTraffic0, &random).unwrap(), &[2; 32]);
        assert!(k.get(Label::ClientTraffic0, &random).is_none());
        assert_eq!(k.generation(), 1);
        assert_eq!(k.add_text(&text), 0);
        assert_eq!(k.generation(), 1);
        assert!(!format!("{k:?}").contains("0101"));
    }

    #[test]
    fn entries_are_bounded() {
        let mut k = KeyLog::new(1);
        let a = format!("CLIENT_RANDOM {} {}\n", "aa".repeat(32), "01".repeat(48));
        let b = format!("CLIENT_RANDOM {} {}\n", "bb".repeat(32), "01".repeat(48));
        assert_eq!(k.add_text(&(a + &b)), 1);
        assert_eq!(k.len(), 1);
    }
}
