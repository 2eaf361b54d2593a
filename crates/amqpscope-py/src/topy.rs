//! Core events to the Python face's event objects (`amqpscope.events`), for `amqpscope.read()`,
//! the rich view and analytics. The classes are imported once per process, not per event.

use amqpscope_core::event::{
    seconds, Accounting, Base, Connection, Event, Finding, Frame, Gap, Ledger, Malformed, Message,
    ProtocolHeader, Resync, Tls,
};
use amqpscope_core::jsonl::{write_decimal, write_hex};
use amqpscope_core::value::{Table, Value};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyType};
use pyo3::{intern, IntoPyObjectExt};

const EVENTS: &str = "amqpscope.events";
const VALUES: &str = "amqpscope.dissect.values";

/// A class of the Python face, imported on first use and kept for the life of the process.
pub(crate) struct Class {
    cell: PyOnceLock<Py<PyType>>,
    module: &'static str,
    name: &'static str,
}

impl Class {
    const fn new(module: &'static str, name: &'static str) -> Class {
        Class {
            cell: PyOnceLock::new(),
            module,
            name,
        }
    }

    pub(crate) fn get<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyType>> {
        self.cell.import(py, self.module, self.name)
    }
}

static PROTOCOL_HEADER: Class = Class::new(EVENTS, "ProtocolHeader");
static FRAME: Class = Class::new(EVENTS, "Frame");
static MESSAGE: Class = Class::new(EVENTS, "Message");
static GAP: Class = Class::new(EVENTS, "Gap");
static RESYNC: Class = Class::new(EVENTS, "Resync");
static MALFORMED: Class = Class::new(EVENTS, "Malformed");
static CONNECTION: Class = Class::new(EVENTS, "Connection");
static ACCOUNTING: Class = Class::new(EVENTS, "Accounting");
static TLS: Class = Class::new(EVENTS, "Tls");
static FINDING: Class = Class::new(EVENTS, "Finding");
static LEDGER: Class = Class::new(EVENTS, "Ledger");
pub(crate) static TIMESTAMP: Class = Class::new(VALUES, "Timestamp");
pub(crate) static PROBLEM: Class = Class::new(VALUES, "Problem");
pub(crate) static DECIMAL: Class = Class::new("decimal", "Decimal");

/// The `amqpscope.events` object of `ev`, built with keyword arguments.
pub fn event<'py>(py: Python<'py>, ev: &Event) -> PyResult<Bound<'py, PyAny>> {
    let kw = PyDict::new(py);
    base(&kw, ev.base())?;
    let class = match ev {
        Event::ProtocolHeader(e) => protocol_header(&kw, e, &PROTOCOL_HEADER),
        Event::Frame(e) => frame(&kw, e, &FRAME),
        Event::Message(e) => message(&kw, e, &MESSAGE),
        Event::Gap(e) => gap(&kw, e, &GAP),
        Event::Resync(e) => resync(&kw, e, &RESYNC),
        Event::Malformed(e) => malformed(&kw, e, &MALFORMED),
        Event::Connection(e) => connection(&kw, e, &CONNECTION),
        Event::Accounting(e) => accounting(&kw, e, &ACCOUNTING),
        Event::Tls(e) => tls(&kw, e, &TLS),
        Event::Finding(e) => finding(&kw, e, &FINDING),
        Event::Ledger(e) => ledger(&kw, e, &LEDGER),
    }?;
    class.get(py)?.call((), Some(&kw))
}

type Kw<'py> = Bound<'py, PyDict>;

fn base(kw: &Kw<'_>, b: &Base) -> PyResult<()> {
    let py = kw.py();
    kw.set_item(intern!(py, "packet"), b.packet)?;
    kw.set_item(intern!(py, "ts"), b.ts())?;
    kw.set_item(intern!(py, "conn"), b.conn)?;
    kw.set_item(intern!(py, "dir"), b.dir.map(|d| d.as_str()))?;
    kw.set_item(intern!(py, "channel"), b.channel)
}

fn ledger<'c>(kw: &Kw<'_>, e: &Ledger, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "entry"), e.entry.as_str())?;
    kw.set_item(intern!(py, "method"), e.method.as_deref())?;
    kw.set_item(intern!(py, "request"), e.request.as_deref())?;
    kw.set_item(intern!(py, "tag"), e.tag)?;
    kw.set_item(intern!(py, "count"), e.count)?;
    kw.set_item(intern!(py, "multiple"), e.multiple)?;
    kw.set_item(intern!(py, "requeue"), e.requeue)?;
    kw.set_item(intern!(py, "redelivered"), e.redelivered)?;
    kw.set_item(intern!(py, "returned"), e.returned)?;
    kw.set_item(intern!(py, "outcome"), e.outcome)?;
    kw.set_item(intern!(py, "latency"), seconds(e.latency_ns))?;
    kw.set_item(intern!(py, "duration"), seconds(e.duration_ns))?;
    kw.set_item(intern!(py, "idle"), seconds(e.idle_ns))?;
    kw.set_item(intern!(py, "in_flight"), e.in_flight)?;
    kw.set_item(intern!(py, "limit"), e.limit)?;
    kw.set_item(intern!(py, "consumer_tag"), e.consumer_tag.as_deref())?;
    kw.set_item(intern!(py, "exchange"), e.exchange.as_deref())?;
    kw.set_item(intern!(py, "routing_key"), e.routing_key.as_deref())?;
    kw.set_item(intern!(py, "ref_packet"), e.ref_packet)?;
    kw.set_item(intern!(py, "ref_channel"), e.ref_channel)?;
    Ok(c)
}

fn protocol_header<'c>(kw: &Kw<'_>, e: &ProtocolHeader, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "version"), &e.version)?;
    let mut raw = Vec::with_capacity(16);
    write_hex(&mut raw, &e.raw);
    kw.set_item(intern!(py, "raw"), String::from_utf8_lossy(&raw))?;
    Ok(c)
}

fn frame<'c>(kw: &Kw<'_>, e: &Frame, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "type"), e.ftype.as_str())?;
    kw.set_item(intern!(py, "size"), e.size)?;
    kw.set_item(intern!(py, "class_id"), e.class_id)?;
    kw.set_item(intern!(py, "method_id"), e.method_id)?;
    kw.set_item(intern!(py, "method"), e.method.as_deref())?;
    kw.set_item(intern!(py, "args"), opt_table(py, e.args.as_ref())?)?;
    kw.set_item(intern!(py, "body_size"), e.body_size)?;
    kw.set_item(
        intern!(py, "properties"),
        opt_table(py, e.properties.as_ref())?,
    )?;
    kw.set_item(intern!(py, "resync"), e.resync)?;
    kw.set_item(intern!(py, "problem"), e.problem.as_deref())?;
    kw.set_item(intern!(py, "payload"), opt_bytes(py, e.payload.as_deref()))?;
    if let Some(t) = &e.tls {
        kw.set_item(intern!(py, "tls"), (t.version, t.suite, t.record))?;
    }
    Ok(c)
}

fn message<'c>(kw: &Kw<'_>, e: &Message, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "method"), e.method.as_str())?;
    kw.set_item(intern!(py, "args"), table(py, &e.args)?)?;
    kw.set_item(intern!(py, "properties"), table(py, &e.properties)?)?;
    kw.set_item(intern!(py, "body_size"), e.body_size)?;
    kw.set_item(intern!(py, "body_received"), e.body_received)?;
    kw.set_item(intern!(py, "complete"), e.complete)?;
    kw.set_item(intern!(py, "first_packet"), e.first_packet)?;
    kw.set_item(intern!(py, "frames"), e.frames)?;
    kw.set_item(intern!(py, "body_sha256"), e.body_sha256.as_deref())?;
    kw.set_item(intern!(py, "body"), opt_bytes(py, e.body.as_deref()))?;
    Ok(c)
}

fn gap<'c>(kw: &Kw<'_>, e: &Gap, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "size"), e.size)?;
    kw.set_item(intern!(py, "lost_frame"), e.lost_frame.as_deref())?;
    Ok(c)
}

fn resync<'c>(kw: &Kw<'_>, e: &Resync, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "skipped"), e.skipped)?;
    kw.set_item(intern!(py, "reason"), &e.reason)?;
    Ok(c)
}

fn malformed<'c>(kw: &Kw<'_>, e: &Malformed, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "reason"), &e.reason)?;
    kw.set_item(intern!(py, "offset"), e.offset)?;
    Ok(c)
}

fn connection<'c>(kw: &Kw<'_>, e: &Connection, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "state"), &e.state)?;
    kw.set_item(intern!(py, "client"), &e.client)?;
    kw.set_item(intern!(py, "server"), &e.server)?;
    kw.set_item(intern!(py, "syn_seen"), e.syn_seen)?;
    kw.set_item(intern!(py, "version"), e.version.as_deref())?;
    kw.set_item(intern!(py, "ended"), e.ended.as_deref())?;
    kw.set_item(intern!(py, "frame_max"), e.frame_max)?;
    kw.set_item(intern!(py, "channel_max"), e.channel_max)?;
    kw.set_item(intern!(py, "heartbeat"), e.heartbeat)?;
    kw.set_item(intern!(py, "mechanism"), e.mechanism.as_deref())?;
    kw.set_item(intern!(py, "user"), e.user.as_deref())?;
    kw.set_item(intern!(py, "password"), e.password.as_deref())?;
    kw.set_item(intern!(py, "vhost"), e.vhost.as_deref())?;
    kw.set_item(intern!(py, "client_product"), e.client_product.as_deref())?;
    kw.set_item(intern!(py, "client_version"), e.client_version.as_deref())?;
    kw.set_item(intern!(py, "client_platform"), e.client_platform.as_deref())?;
    kw.set_item(intern!(py, "server_product"), e.server_product.as_deref())?;
    kw.set_item(intern!(py, "server_version"), e.server_version.as_deref())?;
    kw.set_item(intern!(py, "close_code"), e.close_code)?;
    kw.set_item(intern!(py, "close_text"), e.close_text.as_deref())?;
    kw.set_item(intern!(py, "close_by"), e.close_by.as_deref())?;
    kw.set_item(intern!(py, "frames_c2s"), e.frames_c2s)?;
    kw.set_item(intern!(py, "frames_s2c"), e.frames_s2c)?;
    kw.set_item(intern!(py, "bytes_c2s"), e.bytes_c2s)?;
    kw.set_item(intern!(py, "bytes_s2c"), e.bytes_s2c)?;
    let client_properties = opt_table(py, e.client_properties.as_ref())?;
    kw.set_item(intern!(py, "client_properties"), client_properties)?;
    let server_properties = opt_table(py, e.server_properties.as_ref())?;
    kw.set_item(intern!(py, "server_properties"), server_properties)?;
    kw.set_item(intern!(py, "tls_version"), e.tls_version.as_deref())?;
    kw.set_item(intern!(py, "tls_suite"), e.tls_suite.as_deref())?;
    kw.set_item(intern!(py, "tls_resumed"), e.tls_resumed)?;
    kw.set_item(intern!(py, "fin_by"), e.fin_by.as_deref())?;
    kw.set_item(intern!(py, "fin_packet"), e.fin_packet)?;
    kw.set_item(intern!(py, "rst_by"), e.rst_by.as_deref())?;
    kw.set_item(intern!(py, "rst_packet"), e.rst_packet)?;
    kw.set_item(intern!(py, "opening"), e.opening)?;
    Ok(c)
}

fn tls<'c>(kw: &Kw<'_>, e: &Tls, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "client"), &e.client)?;
    kw.set_item(intern!(py, "server"), &e.server)?;
    kw.set_item(intern!(py, "version"), e.version.as_deref())?;
    kw.set_item(intern!(py, "suite"), e.suite.as_deref())?;
    kw.set_item(intern!(py, "sni"), e.sni.as_deref())?;
    kw.set_item(intern!(py, "alpn"), e.alpn.as_deref())?;
    kw.set_item(intern!(py, "resumed"), e.resumed)?;
    kw.set_item(intern!(py, "decrypted"), e.decrypted)?;
    kw.set_item(intern!(py, "reason"), e.reason.as_deref())?;
    kw.set_item(intern!(py, "records"), e.records)?;
    kw.set_item(intern!(py, "records_decrypted"), e.records_decrypted)?;
    kw.set_item(intern!(py, "records_failed"), e.records_failed)?;
    kw.set_item(intern!(py, "records_lost"), e.records_lost)?;
    kw.set_item(intern!(py, "bytes_c2s"), e.bytes_c2s)?;
    kw.set_item(intern!(py, "bytes_s2c"), e.bytes_s2c)?;
    Ok(c)
}

fn finding<'c>(kw: &Kw<'_>, e: &Finding, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "rule"), &e.rule)?;
    kw.set_item(intern!(py, "severity"), e.severity)?;
    kw.set_item(intern!(py, "code"), e.code)?;
    kw.set_item(intern!(py, "rabbitmq_code"), e.rabbitmq_code)?;
    kw.set_item(intern!(py, "message"), &e.message)?;
    kw.set_item(
        intern!(py, "packets"),
        pyo3::types::PyTuple::new(py, &e.packets)?,
    )?;
    kw.set_item(intern!(py, "peer_reaction"), e.peer_reaction.as_deref())?;
    Ok(c)
}

fn accounting<'c>(kw: &Kw<'_>, e: &Accounting, c: &'c Class) -> PyResult<&'c Class> {
    let py = kw.py();
    kw.set_item(intern!(py, "stream_bytes"), e.stream_bytes)?;
    kw.set_item(intern!(py, "frame_bytes"), e.frame_bytes)?;
    kw.set_item(intern!(py, "header_bytes"), e.header_bytes)?;
    kw.set_item(intern!(py, "gap_bytes"), e.gap_bytes)?;
    kw.set_item(intern!(py, "skipped_bytes"), e.skipped_bytes)?;
    kw.set_item(intern!(py, "pending_bytes"), e.pending_bytes)?;
    kw.set_item(intern!(py, "frames"), e.frames)?;
    kw.set_item(intern!(py, "packets"), e.packets)?;
    kw.set_item(intern!(py, "tcp_packets"), e.tcp_packets)?;
    kw.set_item(intern!(py, "tls_bytes"), e.tls_bytes)?;
    kw.set_item(intern!(py, "tls_opaque_bytes"), e.tls_opaque_bytes)?;
    Ok(c)
}

fn opt_bytes<'py>(py: Python<'py>, raw: Option<&[u8]>) -> Option<Bound<'py, PyBytes>> {
    raw.map(|b| PyBytes::new(py, b))
}

fn opt_table<'py>(py: Python<'py>, t: Option<&Table>) -> PyResult<Option<Bound<'py, PyDict>>> {
    t.map(|t| table(py, t)).transpose()
}

/// A table as a dict in wire order (a repeated name keeps its first position, its last value).
pub fn table<'py>(py: Python<'py>, t: &Table) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, v) in t {
        dict.set_item(PyString::new(py, name), value(py, v)?)?;
    }
    Ok(dict)
}

/// One value as the Python decoder gives it (`amqpscope.dissect.values`).
pub fn value<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    match v {
        Value::Null => Ok(py.None().into_bound(py)),
        Value::Bool(b) => b.into_bound_py_any(py),
        Value::Int(i) => i.into_bound_py_any(py),
        Value::UInt(u) => u.into_bound_py_any(py),
        Value::Float(f) => f.into_bound_py_any(py),
        Value::Decimal { scale, digits } => decimal(py, *scale, *digits),
        Value::Str(s) => s.into_bound_py_any(py),
        Value::Bytes(b) => PyBytes::new(py, b).into_bound_py_any(py),
        Value::Timestamp(t) => TIMESTAMP.get(py)?.call1((*t,)),
        Value::Table(t) => table(py, t)?.into_bound_py_any(py),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(value(py, item)?)?;
            }
            list.into_bound_py_any(py)
        }
        Value::Problem(s) => PROBLEM.get(py)?.call1((s,)),
    }
}

/// `Decimal(digits).scaleb(-scale)`: made from its text, which keeps coefficient and exponent.
fn decimal<'py>(py: Python<'py>, scale: u8, digits: i32) -> PyResult<Bound<'py, PyAny>> {
    let mut text = Vec::with_capacity(16);
    write_decimal(&mut text, scale, digits);
    let text = String::from_utf8_lossy(&text);
    DECIMAL.get(py)?.call1((text,))
}
