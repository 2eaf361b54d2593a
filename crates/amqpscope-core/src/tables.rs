//! The spec as data: what Python (`amqpscope.dissect.tables`) compiles out of the XML and the codec
//! executes. Domains are resolved and bits packed on the Python side; this module only checks the
//! document's shape and lays it out for O(1) lookups.

use crate::value::Name;
use serde_json::Value as Json;

/// A fixed-width wire type (read inside a run of fixed-width fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixedKind {
    Octet,
    Short,
    Long,
    LongLong,
    Timestamp,
    /// One bit of a packed octet: the bit number (0 = least significant).
    Bit(u8),
}

impl FixedKind {
    /// Bytes the type takes on the wire (a bit shares its octet with up to seven others).
    pub fn width(self) -> usize {
        match self {
            FixedKind::Octet | FixedKind::Bit(_) => 1,
            FixedKind::Short => 2,
            FixedKind::Long => 4,
            FixedKind::LongLong | FixedKind::Timestamp => 8,
        }
    }
}

/// One field of a fixed run: where in the run it sits, and which output slot it fills.
#[derive(Debug, Clone)]
pub struct FixedItem {
    pub name: Name,
    pub kind: FixedKind,
    pub at: usize,
    pub slot: usize,
}

/// One read of a method's arguments. A fixed run is read (and fails) as one unit, as the
/// Python decoders read it with one struct; the variable-width fields are read one by one.
#[derive(Debug, Clone)]
pub enum Read {
    Fixed { size: usize, items: Vec<FixedItem> },
    ShortStr { name: Name, slot: usize },
    LongStr { name: Name, slot: usize },
    Table { name: Name, slot: usize },
}

/// What a content property is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropKind {
    /// A flag only: present means true, no bytes.
    Bit,
    Fixed(FixedKind),
    ShortStr,
    LongStr,
    Table,
}

#[derive(Debug, Clone)]
pub struct Property {
    pub name: Name,
    pub kind: PropKind,
    /// Output position: a name repeated in the spec keeps its first position, as a dict does.
    pub slot: usize,
}

#[derive(Debug, Clone)]
pub struct MethodSpec {
    pub class_id: u16,
    pub method_id: u16,
    /// "basic.publish"
    pub name: Name,
    pub content: bool,
    /// Who may send it (the spec's chassis): tells a mid-stream flow's direction.
    pub sent_by_client: bool,
    pub sent_by_server: bool,
    /// The server's side of a connection begins with it (the connection grammar's first `S:` step).
    pub opens_stream: bool,
    pub reads: Vec<Read>,
    /// Distinct argument names (the size of the args table).
    pub slots: usize,
    /// A request that expects a reply (the spec's `synchronous`, errata applied in Python).
    pub synchronous: bool,
    /// The full names of the methods that answer it (`<response>`, errata applied in Python).
    pub responses: Vec<Name>,
    /// The argument that tells the peer not to answer (`no_wait`, `nowait`), if it has one.
    pub no_wait: Option<Name>,
}

#[derive(Debug, Clone, Default)]
pub struct ClassSpec {
    pub class_id: u16,
    /// In flag order (15 per flag word).
    pub properties: Vec<Property>,
}

/// Methods, properties and domains of one spec, resolved to wire types.
#[derive(Debug, Clone, Default)]
pub struct SpecTables {
    pub version: String,
    methods: Vec<MethodSpec>,
    /// class id → method id → index + 1 into `methods` (0: none): two array reads per lookup.
    method_index: Vec<Vec<u32>>,
    classes: Vec<ClassSpec>,
    /// class id → index + 1 into `classes` (0: none).
    class_index: Vec<u32>,
}

impl SpecTables {
    pub fn from_json(text: &str) -> Result<SpecTables, String> {
        let doc: Json = serde_json::from_str(text).map_err(|e| format!("spec tables: {e}"))?;
        let mut t = SpecTables {
            version: str_of(&doc, "version")?.to_owned(),
            ..SpecTables::default()
        };
        for m in array_of(&doc, "methods")? {
            t.add_method(parse_method(m)?);
        }
        for c in array_of(&doc, "classes")? {
            t.add_class(parse_class(c)?);
        }
        Ok(t)
    }

    /// A later definition of the same ids replaces the earlier one (as the Python dicts do).
    fn add_method(&mut self, m: MethodSpec) {
        let (c, id) = (usize::from(m.class_id), usize::from(m.method_id));
        if self.method_index.len() <= c {
            self.method_index.resize(c + 1, Vec::new());
        }
        let row = &mut self.method_index[c];
        if row.len() <= id {
            row.resize(id + 1, 0);
        }
        if row[id] != 0 {
            let at = row[id] as usize - 1;
            self.methods[at] = m;
            return;
        }
        self.methods.push(m);
        row[id] = self.methods.len() as u32;
    }

    fn add_class(&mut self, c: ClassSpec) {
        let id = usize::from(c.class_id);
        if self.class_index.len() <= id {
            self.class_index.resize(id + 1, 0);
        }
        if self.class_index[id] != 0 {
            let at = self.class_index[id] as usize - 1;
            self.classes[at] = c;
            return;
        }
        self.classes.push(c);
        self.class_index[id] = self.classes.len() as u32;
    }

    pub fn method(&self, class_id: u16, method_id: u16) -> Option<&MethodSpec> {
        let row = self.method_index.get(usize::from(class_id))?;
        let i = *row.get(usize::from(method_id))?;
        self.methods.get((i as usize).checked_sub(1)?)
    }

    pub fn class(&self, class_id: u16) -> Option<&ClassSpec> {
        let i = *self.class_index.get(usize::from(class_id))?;
        self.classes.get((i as usize).checked_sub(1)?)
    }

    pub fn methods(&self) -> &[MethodSpec] {
        &self.methods
    }
}

fn str_of<'a>(v: &'a Json, key: &str) -> Result<&'a str, String> {
    v.get(key)
        .and_then(Json::as_str)
        .ok_or_else(|| format!("spec tables: missing string {key:?}"))
}

fn array_of<'a>(v: &'a Json, key: &str) -> Result<&'a [Json], String> {
    v.get(key)
        .and_then(Json::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| format!("spec tables: missing list {key:?}"))
}

fn u16_of(v: &Json, key: &str) -> Result<u16, String> {
    v.get(key)
        .and_then(Json::as_u64)
        .and_then(|n| u16::try_from(n).ok())
        .ok_or_else(|| format!("spec tables: {key:?} is not a 16-bit id"))
}

fn usize_at(v: &Json, i: usize) -> Result<usize, String> {
    v.get(i)
        .and_then(Json::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("spec tables: item {i} of {v} is not a count"))
}

fn str_at(v: &Json, i: usize) -> Result<&str, String> {
    v.get(i)
        .and_then(Json::as_str)
        .ok_or_else(|| format!("spec tables: item {i} of {v} is not a string"))
}

/// Output slots: each distinct name gets the next position the first time it appears.
#[derive(Default)]
struct Slots(Vec<Name>);

impl Slots {
    fn of(&mut self, name: &str) -> (Name, usize) {
        if let Some(i) = self.0.iter().position(|n| &**n == name) {
            return (self.0[i].clone(), i);
        }
        let n = Name::interned(name);
        self.0.push(n.clone());
        (n, self.0.len() - 1)
    }
}

fn fixed_kind(ty: &str, bit: usize) -> Result<FixedKind, String> {
    Ok(match ty {
        "octet" => FixedKind::Octet,
        "short" => FixedKind::Short,
        "long" => FixedKind::Long,
        "longlong" => FixedKind::LongLong,
        "timestamp" => FixedKind::Timestamp,
        "bit" if bit < 8 => FixedKind::Bit(bit as u8),
        _ => return Err(format!("spec tables: unknown fixed type {ty:?}")),
    })
}

fn parse_method(m: &Json) -> Result<MethodSpec, String> {
    let mut slots = Slots::default();
    let mut reads = Vec::new();
    for r in array_of(m, "reads")? {
        reads.push(parse_read(r, &mut slots)?);
    }
    Ok(MethodSpec {
        class_id: u16_of(m, "class")?,
        method_id: u16_of(m, "method")?,
        name: Name::interned(str_of(m, "name")?),
        content: m.get("content").and_then(Json::as_bool).unwrap_or(false),
        sent_by_client: sent_by(m, "client"),
        sent_by_server: sent_by(m, "server"),
        opens_stream: m
            .get("opens_stream")
            .and_then(Json::as_bool)
            .unwrap_or(false),
        reads,
        slots: slots.0.len(),
        synchronous: m
            .get("synchronous")
            .and_then(Json::as_bool)
            .unwrap_or(false),
        responses: match m.get("responses").and_then(Json::as_array) {
            Some(names) => names
                .iter()
                .map(|n| {
                    n.as_str()
                        .map(Name::interned)
                        .ok_or("spec tables: a response is not a name")
                })
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        },
        no_wait: m.get("no_wait").and_then(Json::as_str).map(Name::interned),
    })
}

fn sent_by(m: &Json, peer: &str) -> bool {
    m.get("sent_by")
        .and_then(Json::as_array)
        .is_some_and(|a| a.iter().any(|p| p.as_str() == Some(peer)))
}

fn parse_read(r: &Json, slots: &mut Slots) -> Result<Read, String> {
    if let Some(size) = r.get("fixed").and_then(Json::as_u64) {
        let size = usize::try_from(size).map_err(|e| e.to_string())?;
        let mut items = Vec::new();
        for it in array_of(r, "items")? {
            let (name, slot) = slots.of(str_at(it, 0)?);
            let kind = fixed_kind(str_at(it, 1)?, usize_at(it, 3)?)?;
            let at = usize_at(it, 2)?;
            if at + kind.width() > size {
                return Err(format!("spec tables: {name} lies outside its run"));
            }
            items.push(FixedItem {
                name,
                kind,
                at,
                slot,
            });
        }
        return Ok(Read::Fixed { size, items });
    }
    let (name, slot) = slots.of(str_of(r, "name")?);
    match str_of(r, "var")? {
        "shortstr" => Ok(Read::ShortStr { name, slot }),
        "longstr" => Ok(Read::LongStr { name, slot }),
        "table" => Ok(Read::Table { name, slot }),
        other => Err(format!("spec tables: unknown field type {other:?}")),
    }
}

fn parse_class(c: &Json) -> Result<ClassSpec, String> {
    let mut slots = Slots::default();
    let mut properties = Vec::new();
    for p in array_of(c, "properties")? {
        let (name, slot) = slots.of(str_at(p, 0)?);
        let kind = match str_at(p, 1)? {
            "bit" => PropKind::Bit,
            "shortstr" => PropKind::ShortStr,
            "longstr" => PropKind::LongStr,
            "table" => PropKind::Table,
            other => PropKind::Fixed(fixed_kind(other, 0)?),
        };
        properties.push(Property { name, kind, slot });
    }
    Ok(ClassSpec {
        class_id: u16_of(c, "class")?,
        properties,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{"version":"x","methods":[
        {"class":60,"method":40,"name":"basic.publish","content":true,"reads":[
            {"fixed":2,"items":[["ticket","short",0,0]]},{"var":"shortstr","name":"exchange"},
            {"fixed":1,"items":[["mandatory","bit",0,0],["immediate","bit",0,1]]}]}],
        "classes":[{"class":60,"properties":[["content_type","shortstr"],["priority","octet"]]}]}"#;

    #[test]
    fn lookups() {
        let t = SpecTables::from_json(DOC).unwrap();
        let m = t.method(60, 40).unwrap();
        assert_eq!(&*m.name, "basic.publish");
        assert!(m.content);
        assert_eq!(m.slots, 4);
        assert!(t.method(60, 41).is_none());
        assert!(t.method(61, 40).is_none());
        assert!(t.method(65535, 65535).is_none());
        assert_eq!(t.class(60).unwrap().properties.len(), 2);
        assert!(t.class(10).is_none());
        assert!(!m.synchronous && m.responses.is_empty() && m.no_wait.is_none());
    }

    #[test]
    fn responses() {
        let doc = DOC.replace(
            r#""content":true,"#,
            r#""content":true,"synchronous":true,"responses":["basic.x-ok"],"no_wait":"nowait","#,
        );
        let t = SpecTables::from_json(&doc).unwrap();
        let m = t.method(60, 40).unwrap();
        assert!(m.synchronous);
        assert_eq!(&*m.responses[0], "basic.x-ok");
        assert_eq!(m.no_wait.as_deref(), Some("nowait"));
        let bad = DOC.replace(r#""content":true,"#, r#""content":true,"responses":[1],"#);
        assert!(SpecTables::from_json(&bad).is_err());
    }

    #[test]
    fn bad_documents() {
        assert!(SpecTables::from_json("[]").is_err());
        assert!(SpecTables::from_json("{").is_err());
        let bad = DOC.replace("\"bit\",0,1", "\"bit\",0,9");
        assert!(SpecTables::from_json(&bad).is_err());
    }
}
