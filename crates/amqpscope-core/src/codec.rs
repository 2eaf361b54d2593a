//! Method and content-header decoding, executed from the spec tables.
//!
//! The results (values, names, problem texts) are those of amqpscope.dissect.codec with its
//! generated decoders: a fixed-width run that does not fit fails as one read, a string whose
//! declared length runs past the payload reads short (Python slices clamp) and leaves the offset
//! past the end, which the caller then reports.

use crate::fieldtable::{byte_at, bytes_at, clamped, table_body, u32_at, ReadError};
use crate::frames::MethodInfo;
use crate::limits::Limits;
use crate::tables::{FixedKind, MethodSpec, PropKind, Property, Read, SpecTables};
use crate::value::{Name, Table, Value};

/// A decoded method frame payload.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedMethod {
    /// -1 when the payload is too short to hold ids.
    pub class_id: i32,
    pub method_id: i32,
    /// "basic.publish", or "40.51" for ids the spec does not know, "?" without ids.
    pub name: Name,
    /// The spec knows this method.
    pub known: bool,
    /// The method carries content (a header and body frames follow).
    pub content: bool,
    pub args: Table,
    pub problem: Option<String>,
}

/// A decoded content header payload.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedHeader {
    pub class_id: i32,
    pub weight: u16,
    pub body_size: u64,
    pub properties: Table,
    pub problem: Option<String>,
}

/// Who may send a method, from the spec's chassis (the peer opposite each implementing chassis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Senders {
    pub client: bool,
    pub server: bool,
}

/// Decoders for every method and content class of one spec.
pub struct Codec {
    tables: SpecTables,
    limits: Limits,
}

/// Where the content properties start: class, weight, body size, first flag word.
const PROPS_AT: usize = 14;

impl Codec {
    pub fn new(tables: SpecTables, limits: &Limits) -> Codec {
        Codec {
            tables,
            limits: limits.clone(),
        }
    }

    pub fn tables(&self) -> &SpecTables {
        &self.tables
    }

    pub fn method_known(&self, class_id: u16, method_id: u16) -> bool {
        self.tables.method(class_id, method_id).is_some()
    }

    /// Who may send (class, method), if the spec knows it.
    pub fn sent_by(&self, class_id: u16, method_id: u16) -> Option<Senders> {
        self.tables.method(class_id, method_id).map(|m| Senders {
            client: m.sent_by_client,
            server: m.sent_by_server,
        })
    }

    pub fn decode_method(&self, payload: &[u8]) -> DecodedMethod {
        let (Ok(c), Ok(m)) = (bytes_at::<2>(payload, 0), bytes_at::<2>(payload, 2)) else {
            return DecodedMethod {
                class_id: -1,
                method_id: -1,
                name: Name::Spec("?"),
                known: false,
                content: false,
                args: Table::new(),
                problem: Some(format!(
                    "method payload of {} bytes has no class and method id",
                    payload.len()
                )),
            };
        };
        let (c, m) = (u16::from_be_bytes(c), u16::from_be_bytes(m));
        let Some(spec) = self.tables.method(c, m) else {
            return DecodedMethod {
                class_id: c.into(),
                method_id: m.into(),
                name: Name::from(format!("{c}.{m}")),
                known: false,
                content: false,
                args: Table::new(),
                problem: Some(format!("unknown method {c}/{m}")),
            };
        };
        let (args, problem) = match self.method_args(spec, payload) {
            Err(e) => (Table::new(), Some(format!("truncated arguments ({e})"))),
            Ok((args, end)) => (args, trailing(end, payload.len())),
        };
        DecodedMethod {
            class_id: c.into(),
            method_id: m.into(),
            name: spec.name.clone(),
            known: true,
            content: spec.content,
            args,
            problem,
        }
    }

    fn method_args(&self, spec: &MethodSpec, p: &[u8]) -> Result<(Table, usize), ReadError> {
        let mut args = Table::with_capacity(spec.slots);
        let mut o = 4;
        for read in &spec.reads {
            match read {
                Read::Fixed { size, items } => {
                    check_run(p, o, *size)?;
                    for it in items {
                        put(&mut args, it.slot, &it.name, fixed(p, o + it.at, it.kind)?);
                    }
                    o += size;
                }
                Read::ShortStr { name, slot } => {
                    let (v, next) = shortstr(p, o)?;
                    put(&mut args, *slot, name, v);
                    o = next;
                }
                Read::LongStr { name, slot } => {
                    let (v, next) = longstr(p, o)?;
                    put(&mut args, *slot, name, v);
                    o = next;
                }
                Read::Table { name, slot } => {
                    let (v, next) = self.table(p, o)?;
                    put(&mut args, *slot, name, v);
                    o = next;
                }
            }
        }
        Ok((args, o))
    }

    fn table(&self, p: &[u8], o: usize) -> Result<(Value, usize), ReadError> {
        let size = u32_at(p, o)? as usize;
        let start = o + 4;
        let end = start.saturating_add(size);
        if end > p.len() {
            return Err(ReadError::Truncated(format!(
                "field table of {size} bytes runs past the end"
            )));
        }
        let t = table_body(p, start, end, 0, &self.limits);
        Ok((Value::Table(t), end))
    }

    pub fn decode_header(&self, payload: &[u8]) -> DecodedHeader {
        let Ok(head) = bytes_at::<PROPS_AT>(payload, 0) else {
            return DecodedHeader {
                class_id: -1,
                weight: 0,
                body_size: 0,
                properties: Table::new(),
                problem: Some(format!(
                    "content header of {} bytes is too short",
                    payload.len()
                )),
            };
        };
        let class_id = u16::from_be_bytes([head[0], head[1]]);
        let weight = u16::from_be_bytes([head[2], head[3]]);
        let mut size = [0u8; 8];
        size.copy_from_slice(&head[4..12]);
        let word = u16::from_be_bytes([head[12], head[13]]);
        let (properties, problem) = self.properties(payload, class_id, word);
        DecodedHeader {
            class_id: class_id.into(),
            weight,
            body_size: u64::from_be_bytes(size),
            properties,
            problem,
        }
    }

    fn properties(&self, p: &[u8], class_id: u16, word: u16) -> (Table, Option<String>) {
        let props = self
            .tables
            .class(class_id)
            .map(|c| c.properties.as_slice())
            .filter(|props| !props.is_empty());
        // One flag word with only defined bits: nearly every header. Python reads it with a
        // decoder compiled for that word, whose fixed-width neighbours fail as one read.
        if let Some(props) = props {
            if word & 1 == 0 && word & !allowed_bits(props.len(), 0) == 0 {
                match self.decode_props(p, props, &[word], PROPS_AT, true) {
                    Err(e) => return (Table::new(), Some(format!("truncated properties ({e})"))),
                    Ok((t, end)) if end == p.len() => return (t, None),
                    Ok(_) => {}
                }
            }
        }
        // several flag words, undefined bits or trailing bytes: the generic path says what is wrong
        let mut off = PROPS_AT;
        let mut last = word;
        while last & 1 != 0 {
            match bytes_at::<2>(p, off) {
                Ok(w) => last = u16::from_be_bytes(w),
                Err(_) => {
                    return (
                        Table::new(),
                        Some("property flags run past the end".to_owned()),
                    )
                }
            }
            off += 2;
        }
        let words = FlagWords(clamped(p, PROPS_AT - 2, off));
        let Some(props) = props else {
            let problem = (words.count() != 1 || word != 0)
                .then(|| format!("no content properties are defined for class {class_id}"));
            return (Table::new(), problem);
        };
        let mut problem = unknown_flags(&words, props.len());
        match self.decode_props(p, props, &words, off, false) {
            Err(e) => (Table::new(), Some(format!("truncated properties ({e})"))),
            Ok((t, end)) => {
                if problem.is_none() && end != p.len() {
                    problem = Some(if end > p.len() {
                        "properties run past the end of the frame".to_owned()
                    } else {
                        format!("{} trailing bytes after the properties", p.len() - end)
                    });
                }
                (t, problem)
            }
        }
    }

    /// The properties the flag words announce. `grouped`: fixed-width properties that follow one
    /// another (bit properties take no bytes) are read as one run.
    fn decode_props(
        &self,
        p: &[u8],
        props: &[Property],
        words: &dyn Words,
        mut o: usize,
        grouped: bool,
    ) -> Result<(Table, usize), ReadError> {
        let mut out = Table::new();
        let mut run_left = 0usize; // bytes of the current run already checked
        for (i, prop) in props.iter().enumerate() {
            if words.word(i / 15) & (1 << (15 - i % 15)) == 0 {
                continue;
            }
            let value = match prop.kind {
                PropKind::Bit => Value::Bool(true),
                PropKind::Fixed(kind) => {
                    if run_left == 0 {
                        let size = if grouped {
                            run_size(props, words, i)
                        } else {
                            kind.width()
                        };
                        check_run(p, o, size)?;
                        run_left = size;
                    }
                    let v = fixed(p, o, kind)?;
                    o += kind.width();
                    run_left = run_left.saturating_sub(kind.width());
                    v
                }
                PropKind::ShortStr => shortstr(p, o).map(|(v, next)| {
                    o = next;
                    v
                })?,
                PropKind::LongStr => longstr(p, o).map(|(v, next)| {
                    o = next;
                    v
                })?,
                PropKind::Table => self.table(p, o).map(|(v, next)| {
                    o = next;
                    v
                })?,
            };
            put(&mut out, prop.slot, &prop.name, value);
        }
        Ok((out, o))
    }

    /// The entries of a field table body (without its length prefix), e.g. a SASL AMQPLAIN response.
    pub fn decode_table_body(&self, buf: &[u8]) -> Table {
        table_body(buf, 0, buf.len(), 0, &self.limits)
    }
}

/// Flag words as the generic path sees them: word `i`, 0 beyond those present.
trait Words {
    fn word(&self, i: usize) -> u16;
}

impl Words for [u16; 1] {
    fn word(&self, i: usize) -> u16 {
        if i == 0 {
            self[0]
        } else {
            0
        }
    }
}

/// The flag words as they sit in the payload (no copy).
struct FlagWords<'a>(&'a [u8]);

impl FlagWords<'_> {
    fn count(&self) -> usize {
        self.0.len() / 2
    }
}

impl Words for FlagWords<'_> {
    fn word(&self, i: usize) -> u16 {
        match self.0.get(2 * i..2 * i + 2) {
            Some(w) => u16::from_be_bytes([w[0], w[1]]),
            None => 0,
        }
    }
}

/// The flag bits word `index` may set for a class of `known` properties (plus continuation).
fn allowed_bits(known: usize, index: usize) -> u16 {
    let usable = known.saturating_sub(15 * index).min(15);
    let props = (0..usable).fold(0u16, |acc, b| acc | (1 << (15 - b)));
    props | 1
}

fn unknown_flags(words: &FlagWords<'_>, known: usize) -> Option<String> {
    (0..words.count()).find_map(|i| {
        let extra = words.word(i) & !allowed_bits(known, i);
        (extra != 0).then(|| {
            format!("property flag word {i} sets bits 0x{extra:04x} for properties the spec does not define")
        })
    })
}

/// Bytes of the fixed-width properties read as one run from property `first` on.
fn run_size(props: &[Property], words: &dyn Words, first: usize) -> usize {
    let mut size = 0;
    for (i, prop) in props.iter().enumerate().skip(first) {
        if words.word(i / 15) & (1 << (15 - i % 15)) == 0 {
            continue;
        }
        match prop.kind {
            PropKind::Fixed(kind) => size += kind.width(),
            PropKind::Bit => {}
            _ => break,
        }
    }
    size
}

/// A run of `size` bytes at `o` must fit: a run of one octet (an octet, or up to 8 packed bits)
/// is indexed in Python (IndexError), longer runs are unpacked (struct.error).
fn check_run(p: &[u8], o: usize, size: usize) -> Result<(), ReadError> {
    if o.saturating_add(size) <= p.len() {
        return Ok(());
    }
    if size == 1 {
        return Err(ReadError::Index);
    }
    Err(ReadError::Short {
        size,
        at: o,
        len: p.len(),
    })
}

/// A fixed-width value at `at` (its run was checked to fit).
fn fixed(p: &[u8], at: usize, kind: FixedKind) -> Result<Value, ReadError> {
    Ok(match kind {
        FixedKind::Octet => Value::Int(byte_at(p, at)?.into()),
        FixedKind::Bit(bit) => Value::Bool(byte_at(p, at)? & (1 << bit) != 0),
        FixedKind::Short => Value::Int(u16::from_be_bytes(bytes_at(p, at)?).into()),
        FixedKind::Long => Value::Int(u32::from_be_bytes(bytes_at(p, at)?).into()),
        FixedKind::LongLong => Value::from_u64(u64::from_be_bytes(bytes_at(p, at)?)),
        FixedKind::Timestamp => Value::Timestamp(u64::from_be_bytes(bytes_at(p, at)?)),
    })
}

/// A short string; a length past the end reads short and returns an offset past the end.
fn shortstr(p: &[u8], o: usize) -> Result<(Value, usize), ReadError> {
    let next = o + 1 + usize::from(byte_at(p, o)?);
    Ok((Value::text(clamped(p, o + 1, next)), next))
}

fn longstr(p: &[u8], o: usize) -> Result<(Value, usize), ReadError> {
    let n = u32_at(p, o)? as usize;
    let next = (o + 4).saturating_add(n);
    Ok((Value::text(clamped(p, o + 4, next)), next))
}

/// Store a value in its slot: a name the spec repeats keeps its first position, last value.
fn put(out: &mut Table, slot: usize, name: &Name, value: Value) {
    match out.get_mut(slot) {
        Some(e) => e.1 = value,
        None => out.push((name.clone(), value)),
    }
}

fn trailing(end: usize, len: usize) -> Option<String> {
    match end.cmp(&len) {
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Greater => Some("arguments run past the end of the frame".to_owned()),
        std::cmp::Ordering::Less => Some(format!("{} trailing bytes", len - end)),
    }
}

impl MethodInfo for Codec {
    fn known(&self, class_id: u16, method_id: u16) -> bool {
        self.method_known(class_id, method_id)
    }

    fn opens_stream(&self, class_id: u16, method_id: u16) -> bool {
        self.tables
            .method(class_id, method_id)
            .is_some_and(|m| m.opens_stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{"version":"t","methods":[
        {"class":60,"method":40,"name":"basic.publish","content":true,"reads":[
            {"fixed":2,"items":[["ticket","short",0,0]]},{"var":"shortstr","name":"exchange"},
            {"var":"shortstr","name":"routing_key"},
            {"fixed":1,"items":[["mandatory","bit",0,0],["immediate","bit",0,1]]}]},
        {"class":10,"method":30,"name":"connection.tune","content":false,"reads":[
            {"fixed":8,"items":[["channel_max","short",0,0],["frame_max","long",2,0],["heartbeat","short",6,0]]}]}],
        "classes":[{"class":60,"properties":[
            ["p0","shortstr"],["p1","octet"],["p2","octet"],["p3","octet"],["p4","octet"],
            ["p5","octet"],["p6","octet"],["p7","octet"],["p8","octet"],["p9","octet"],
            ["p10","octet"],["p11","octet"],["p12","octet"],["p13","bit"],["p14","octet"],
            ["p15","short"],["p16","timestamp"]]},
            {"class":10,"properties":[]}]}"#;

    fn codec() -> Codec {
        Codec::new(SpecTables::from_json(DOC).unwrap(), &Limits::default())
    }

    #[test]
    fn methods_and_bit_packing() {
        let c = codec();
        let p = [0, 60, 0, 40, 0, 1, 1, b'x', 0, 0b10];
        let m = c.decode_method(&p);
        assert_eq!(&*m.name, "basic.publish");
        assert!(m.known && m.content && m.problem.is_none());
        assert_eq!(m.args[1].1, Value::Str("x".into()));
        assert_eq!(m.args[3], ("mandatory".into(), Value::Bool(false)));
        assert_eq!(m.args[4], ("immediate".into(), Value::Bool(true)));
        let m = c.decode_method(&[0, 60, 0, 41]);
        assert_eq!(
            (&*m.name, m.problem.as_deref()),
            ("60.41", Some("unknown method 60/41"))
        );
        let m = c.decode_method(&[0, 60]);
        assert_eq!(&*m.name, "?");
        let m = c.decode_method(&[0, 10, 0, 30, 0, 1, 0, 0]);
        assert_eq!(m.problem.as_deref(), Some("truncated arguments (unpack_from requires a buffer of at least 12 bytes for unpacking 8 bytes at offset 4 (actual buffer size is 8))"));
        // a short string running past the end reads short; the bit octet is then past the end
        let m = c.decode_method(&[0, 60, 0, 40, 0, 1, 5, b'a']);
        assert_eq!(
            m.problem.as_deref(),
            Some("truncated arguments (index out of range)")
        );
        let m = c.decode_method(&[0, 60, 0, 40, 0, 1, 0, 0, 0, 9]);
        assert_eq!(m.problem.as_deref(), Some("1 trailing bytes"));
    }

    fn header(class: u16, words: &[u16], props: &[u8]) -> Vec<u8> {
        let mut v = class.to_be_bytes().to_vec();
        v.extend([0, 0, 0, 0, 0, 0, 0, 0, 0, 5]);
        for w in words {
            v.extend(w.to_be_bytes());
        }
        v.extend(props);
        v
    }

    #[test]
    fn header_flags_and_continuation() {
        let c = codec();
        let h = c.decode_header(&header(60, &[0x8000], &[1, b'a']));
        assert_eq!((h.class_id, h.body_size), (60, 5));
        assert_eq!(h.properties, vec![("p0".into(), Value::Str("a".into()))]);
        assert!(h.problem.is_none());
        // p13 (bit) and p15/p16 in the second word, after the continuation bit
        let h = c.decode_header(&header(60, &[0x0007, 0x4000], &[0, 0, 0, 0, 0, 0, 0, 0, 9]));
        assert!(h.problem.is_none(), "{h:?}");
        assert_eq!(h.properties[0], ("p13".into(), Value::Bool(true)));
        assert_eq!(h.properties[1], ("p14".into(), Value::Int(0)));
        assert_eq!(h.properties[2], ("p16".into(), Value::Timestamp(9)));
        let h = c.decode_header(&header(60, &[0x0001], &[]));
        assert_eq!(
            h.problem.as_deref(),
            Some("property flags run past the end")
        );
        let h = c.decode_header(&header(60, &[0x0001, 0x2000], &[]));
        assert_eq!(
            h.problem.as_deref(),
            Some("property flag word 1 sets bits 0x2000 for properties the spec does not define")
        );
        let h = c.decode_header(&header(10, &[0], &[]));
        assert!(h.problem.is_none());
        let h = c.decode_header(&header(10, &[0x8000], &[]));
        assert_eq!(
            h.problem.as_deref(),
            Some("no content properties are defined for class 10")
        );
        let h = c.decode_header(&[0; 13]);
        assert_eq!(
            h.problem.as_deref(),
            Some("content header of 13 bytes is too short")
        );
    }

    #[test]
    fn header_runs_and_trailing_bytes() {
        let c = codec();
        // one flag word: p1 and p2 are one run, cut short
        let h = c.decode_header(&header(60, &[0x6000], &[7]));
        assert_eq!(h.problem.as_deref(), Some("truncated properties (unpack_from requires a buffer of at least 16 bytes for unpacking 2 bytes at offset 14 (actual buffer size is 15))"));
        // the generic path (continuation bit) reads them one by one
        let h = c.decode_header(&header(60, &[0x6001, 0], &[7]));
        assert_eq!(
            h.problem.as_deref(),
            Some("truncated properties (index out of range)")
        );
        let h = c.decode_header(&header(60, &[0x4000], &[7, 8]));
        assert_eq!(h.properties, vec![("p1".into(), Value::Int(7))]);
        assert_eq!(
            h.problem.as_deref(),
            Some("1 trailing bytes after the properties")
        );
        let h = c.decode_header(&header(60, &[0x8000], &[3, b'a']));
        assert_eq!(
            h.problem.as_deref(),
            Some("properties run past the end of the frame")
        );
    }
}
