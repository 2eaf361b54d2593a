//! Python event objects back to core events: lets tests feed any event the Python pipeline made
//! through the Rust writers. Strict: a value the core cannot hold is an error, never a guess.

use crate::topy::{DECIMAL, PROBLEM, TIMESTAMP};
use amqpscope_core::event::{
    Accounting, Base, Connection, Dir, Entry, Event, Finding, Frame, Gap, Ledger, Malformed,
    Message, ProtocolHeader, Resync, Tls,
};
use amqpscope_core::value::{Name, Table, Value};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// The core event of an `amqpscope.events` object (by its `kind`).
pub fn event(ev: &Bound<'_, PyAny>) -> PyResult<Event> {
    event_in(ev, true)
}

/// What the ledger reads of an event: `ts` rounded to the nearest nanosecond (events made by hand
/// need not hold exact nanoseconds, and nothing writes these back), frames without their payload
/// and content properties (never read by it, and a body frame's payload may be megabytes).
pub fn ledger_input(ev: &Bound<'_, PyAny>) -> PyResult<Event> {
    event_in(ev, false)
}

/// `exact`: every field as it is (else as [`ledger_input`] says).
fn event_in(ev: &Bound<'_, PyAny>, exact: bool) -> PyResult<Event> {
    let kind: String = ev.getattr("kind")?.extract()?;
    let base = base(ev, exact)?;
    Ok(match kind.as_str() {
        "protocol-header" => Event::ProtocolHeader(Box::new(ProtocolHeader {
            base,
            version: attr(ev, "version")?,
            raw: raw8(&attr::<String>(ev, "raw")?)?,
        })),
        "frame" => Event::Frame(Box::new(frame(ev, base, exact)?)),
        "message" => Event::Message(Box::new(message(ev, base)?)),
        "gap" => Event::Gap(Box::new(Gap {
            base,
            size: attr(ev, "size")?,
            lost_frame: attr(ev, "lost_frame")?,
        })),
        "resync" => Event::Resync(Box::new(Resync {
            base,
            skipped: attr(ev, "skipped")?,
            reason: attr(ev, "reason")?,
        })),
        "malformed" => Event::Malformed(Box::new(Malformed {
            base,
            reason: attr(ev, "reason")?,
            offset: attr(ev, "offset")?,
        })),
        "connection" => Event::Connection(Box::new(connection(ev, base)?)),
        "accounting" => Event::Accounting(Box::new(accounting(ev, base)?)),
        "tls" => Event::Tls(Box::new(tls(ev, base)?)),
        "finding" => Event::Finding(Box::new(finding(ev, base)?)),
        "ledger" => Event::Ledger(Box::new(ledger(ev, base)?)),
        other => {
            return Err(PyValueError::new_err(format!(
                "no core event for kind {other:?}"
            )))
        }
    })
}

fn attr<'py, T: FromPyObjectOwned<'py>>(ev: &Bound<'py, PyAny>, name: &str) -> PyResult<T> {
    ev.getattr(name)?.extract().map_err(Into::into)
}

fn base(ev: &Bound<'_, PyAny>, exact_ts: bool) -> PyResult<Base> {
    let dir = match attr::<Option<String>>(ev, "dir")?.as_deref() {
        None => None,
        Some("c2s") => Some(Dir::C2S),
        Some("s2c") => Some(Dir::S2C),
        Some(other) => return Err(PyValueError::new_err(format!("bad dir {other:?}"))),
    };
    Ok(Base {
        packet: attr(ev, "packet")?,
        ts_ns: if exact_ts {
            ts_ns(attr(ev, "ts")?)?
        } else {
            (attr::<f64>(ev, "ts")? * 1e9).round() as i64
        },
        conn: attr(ev, "conn")?,
        dir,
        channel: attr(ev, "channel")?,
    })
}

/// Integer nanoseconds whose `ns / 1e9` is exactly `ts` (the core keeps ns, outputs ts).
fn ts_ns(ts: f64) -> PyResult<i64> {
    let guess = (ts * 1e9).round();
    // Near 2^60 ns the f64 steps are coarser than 1 ns: try neighbours one step apart.
    let step = (guess.abs() * f64::EPSILON).max(1.0);
    for k in [0.0, -1.0, 1.0, -2.0, 2.0, -3.0, 3.0] {
        let candidate = guess + k * step;
        if candidate.abs() < 9.2e18 {
            let ns = candidate as i64;
            if ns as f64 / 1e9 == ts {
                return Ok(ns);
            }
        }
    }
    Err(PyValueError::new_err(format!(
        "ts {ts} is not ns / 1e9 of any integer ns"
    )))
}

fn raw8(hex: &str) -> PyResult<[u8; 8]> {
    let bad = || PyValueError::new_err(format!("raw must be 16 hex digits, not {hex:?}"));
    let mut raw = [0u8; 8];
    if hex.len() != 16 || !hex.is_ascii() {
        return Err(bad());
    }
    for (slot, i) in raw.iter_mut().zip((0..16).step_by(2)) {
        let pair = hex.get(i..i + 2).ok_or_else(bad)?;
        *slot = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
    }
    Ok(raw)
}

fn frame(ev: &Bound<'_, PyAny>, base: Base, whole: bool) -> PyResult<Frame> {
    if !whole {
        let ftype: String = attr(ev, "type")?;
        let method = ftype == "method";
        let ftype = Name::from(ftype);
        return Ok(Frame {
            base,
            size: attr(ev, "size")?,
            class_id: None,
            method_id: None,
            method: if method {
                opt_name(ev, "method")?
            } else {
                None
            },
            args: if method {
                opt_table(&ev.getattr("args")?)?
            } else {
                None
            },
            body_size: None,
            properties: None,
            resync: false,
            problem: None,
            payload: None,
            tls: None,
            ftype,
        });
    }
    Ok(Frame {
        base,
        ftype: Name::from(attr::<String>(ev, "type")?),
        size: attr(ev, "size")?,
        class_id: attr(ev, "class_id")?,
        method_id: attr(ev, "method_id")?,
        method: opt_name(ev, "method")?,
        args: opt_table(&ev.getattr("args")?)?,
        body_size: attr(ev, "body_size")?,
        properties: opt_table(&ev.getattr("properties")?)?,
        resync: attr(ev, "resync")?,
        problem: attr(ev, "problem")?,
        payload: attr(ev, "payload")?,
        tls: attr::<Option<(String, String, u64)>>(ev, "tls")?
            .and_then(|(v, s, r)| amqpscope_core::tls::layer_from_names(&v, &s, r)),
    })
}

/// An optional text attribute as a `Name`.
fn opt_name(ev: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<Name>> {
    Ok(attr::<Option<String>>(ev, name)?.map(Name::from))
}

fn message(ev: &Bound<'_, PyAny>, base: Base) -> PyResult<Message> {
    Ok(Message {
        base,
        method: Name::from(attr::<String>(ev, "method")?),
        args: table(&ev.getattr("args")?)?,
        properties: table(&ev.getattr("properties")?)?,
        body_size: attr(ev, "body_size")?,
        body_received: attr(ev, "body_received")?,
        complete: attr(ev, "complete")?,
        first_packet: attr(ev, "first_packet")?,
        frames: attr(ev, "frames")?,
        body_sha256: attr(ev, "body_sha256")?,
        body: attr(ev, "body")?,
    })
}

fn connection(ev: &Bound<'_, PyAny>, base: Base) -> PyResult<Connection> {
    Ok(Connection {
        base,
        state: attr(ev, "state")?,
        client: attr(ev, "client")?,
        server: attr(ev, "server")?,
        syn_seen: attr(ev, "syn_seen")?,
        version: attr(ev, "version")?,
        ended: attr(ev, "ended")?,
        frame_max: attr(ev, "frame_max")?,
        channel_max: attr(ev, "channel_max")?,
        heartbeat: attr(ev, "heartbeat")?,
        mechanism: attr(ev, "mechanism")?,
        user: attr(ev, "user")?,
        password: attr(ev, "password")?,
        vhost: attr(ev, "vhost")?,
        client_product: attr(ev, "client_product")?,
        client_version: attr(ev, "client_version")?,
        client_platform: attr(ev, "client_platform")?,
        server_product: attr(ev, "server_product")?,
        server_version: attr(ev, "server_version")?,
        close_code: attr(ev, "close_code")?,
        close_text: attr(ev, "close_text")?,
        close_by: attr(ev, "close_by")?,
        frames_c2s: attr(ev, "frames_c2s")?,
        frames_s2c: attr(ev, "frames_s2c")?,
        bytes_c2s: attr(ev, "bytes_c2s")?,
        bytes_s2c: attr(ev, "bytes_s2c")?,
        client_properties: opt_table(&ev.getattr("client_properties")?)?,
        server_properties: opt_table(&ev.getattr("server_properties")?)?,
        tls_version: attr(ev, "tls_version")?,
        tls_suite: attr(ev, "tls_suite")?,
        tls_resumed: attr(ev, "tls_resumed")?,
        fin_by: attr(ev, "fin_by")?,
        fin_packet: attr(ev, "fin_packet")?,
        rst_by: attr(ev, "rst_by")?,
        rst_packet: attr(ev, "rst_packet")?,
        opening: opening(attr(ev, "opening")?)?,
    })
}

/// The core's name for a connection's opening (its values are a closed set).
fn opening(v: Option<String>) -> PyResult<Option<&'static str>> {
    const OPENINGS: [&str; 7] = [
        "amqp-1.0",
        "amqp-0-10",
        "amqp-other",
        "tls",
        "http",
        "other",
        "nothing",
    ];
    match v {
        None => Ok(None),
        Some(s) => match OPENINGS.iter().find(|o| **o == s) {
            Some(o) => Ok(Some(o)),
            None => Err(PyValueError::new_err(format!("bad opening {s:?}"))),
        },
    }
}

fn tls(ev: &Bound<'_, PyAny>, base: Base) -> PyResult<Tls> {
    Ok(Tls {
        base,
        client: attr(ev, "client")?,
        server: attr(ev, "server")?,
        version: attr(ev, "version")?,
        suite: attr(ev, "suite")?,
        sni: attr(ev, "sni")?,
        alpn: attr(ev, "alpn")?,
        resumed: attr(ev, "resumed")?,
        decrypted: attr(ev, "decrypted")?,
        reason: attr(ev, "reason")?,
        records: attr(ev, "records")?,
        records_decrypted: attr(ev, "records_decrypted")?,
        records_failed: attr(ev, "records_failed")?,
        records_lost: attr(ev, "records_lost")?,
        bytes_c2s: attr(ev, "bytes_c2s")?,
        bytes_s2c: attr(ev, "bytes_s2c")?,
    })
}

fn finding(ev: &Bound<'_, PyAny>, base: Base) -> PyResult<Finding> {
    let severity: String = attr(ev, "severity")?;
    let severity = match severity.as_str() {
        "violation" => "violation",
        "deviation" => "deviation",
        "warning" => "warning",
        "info" => "info",
        other => return Err(PyValueError::new_err(format!("bad severity {other:?}"))),
    };
    Ok(Finding {
        base,
        rule: attr(ev, "rule")?,
        severity,
        code: attr(ev, "code")?,
        rabbitmq_code: attr(ev, "rabbitmq_code")?,
        message: attr(ev, "message")?,
        packets: attr(ev, "packets")?,
        peer_reaction: attr(ev, "peer_reaction")?,
    })
}

fn ledger(ev: &Bound<'_, PyAny>, base: Base) -> PyResult<Ledger> {
    let entry: String = attr(ev, "entry")?;
    let entry = Entry::parse(&entry)
        .ok_or_else(|| PyValueError::new_err(format!("no ledger entry {entry:?}")))?;
    let outcome = match attr::<Option<String>>(ev, "outcome")? {
        None => None,
        Some(o) => Some(
            amqpscope_core::ledger::outcome(&o)
                .ok_or_else(|| PyValueError::new_err(format!("no ledger outcome {o:?}")))?,
        ),
    };
    let name = |n: &str| -> PyResult<Option<Name>> {
        Ok(attr::<Option<String>>(ev, n)?.map(|s| Name::from(s.as_str())))
    };
    let ns = |n: &str| -> PyResult<Option<i64>> {
        Ok(attr::<Option<f64>>(ev, n)?.map(|s| (s * 1e9).round() as i64))
    };
    Ok(Ledger {
        base,
        entry,
        method: name("method")?,
        request: name("request")?,
        tag: attr(ev, "tag")?,
        count: attr(ev, "count")?,
        multiple: attr(ev, "multiple")?,
        requeue: attr(ev, "requeue")?,
        redelivered: attr(ev, "redelivered")?,
        returned: attr(ev, "returned")?,
        outcome,
        latency_ns: ns("latency")?,
        duration_ns: ns("duration")?,
        idle_ns: ns("idle")?,
        in_flight: attr(ev, "in_flight")?,
        limit: attr(ev, "limit")?,
        consumer_tag: name("consumer_tag")?,
        exchange: name("exchange")?,
        routing_key: name("routing_key")?,
        ref_packet: attr(ev, "ref_packet")?,
        ref_channel: attr(ev, "ref_channel")?,
    })
}

fn accounting(ev: &Bound<'_, PyAny>, base: Base) -> PyResult<Accounting> {
    Ok(Accounting {
        base,
        stream_bytes: attr(ev, "stream_bytes")?,
        frame_bytes: attr(ev, "frame_bytes")?,
        header_bytes: attr(ev, "header_bytes")?,
        gap_bytes: attr(ev, "gap_bytes")?,
        skipped_bytes: attr(ev, "skipped_bytes")?,
        pending_bytes: attr(ev, "pending_bytes")?,
        frames: attr(ev, "frames")?,
        packets: attr(ev, "packets")?,
        tcp_packets: attr(ev, "tcp_packets")?,
        tls_bytes: attr(ev, "tls_bytes")?,
        tls_opaque_bytes: attr(ev, "tls_opaque_bytes")?,
    })
}

fn opt_table(obj: &Bound<'_, PyAny>) -> PyResult<Option<Table>> {
    if obj.is_none() {
        return Ok(None);
    }
    table(obj).map(Some)
}

fn table(obj: &Bound<'_, PyAny>) -> PyResult<Table> {
    let dict = obj.cast::<PyDict>()?;
    let mut t = Table::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        let name: Name = k.cast::<PyString>()?.to_str()?.into();
        t.push((name, value(&v)?));
    }
    Ok(t)
}

/// A decoded value; the subclasses (Timestamp of int, Problem of str) are checked first.
fn value(v: &Bound<'_, PyAny>) -> PyResult<Value> {
    let py = v.py();
    if v.is_none() {
        Ok(Value::Null)
    } else if let Ok(b) = v.cast::<PyBool>() {
        Ok(Value::Bool(b.is_true()))
    } else if v.is_instance(TIMESTAMP.get(py)?)? {
        Ok(Value::Timestamp(v.extract()?))
    } else if v.is_instance_of::<PyInt>() {
        match v.extract::<i64>() {
            Ok(i) => Ok(Value::Int(i)),
            Err(_) => Ok(Value::UInt(v.extract()?)),
        }
    } else if let Ok(f) = v.cast::<PyFloat>() {
        Ok(Value::Float(f.value()))
    } else if v.is_instance(DECIMAL.get(py)?)? {
        decimal(v)
    } else if v.is_instance(PROBLEM.get(py)?)? {
        Ok(Value::Problem(v.extract()?))
    } else if let Ok(s) = v.cast::<PyString>() {
        Ok(Value::Str(s.to_str()?.to_owned()))
    } else if let Ok(b) = v.cast::<PyBytes>() {
        Ok(Value::Bytes(b.as_bytes().to_vec()))
    } else if v.is_instance_of::<PyDict>() {
        Ok(Value::Table(table(v)?))
    } else if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        v.try_iter()?
            .map(|item| value(&item?))
            .collect::<PyResult<_>>()
            .map(Value::Array)
    } else {
        let ty = v.get_type().name()?;
        Err(PyTypeError::new_err(format!("no core value for a {ty}")))
    }
}

/// A Decimal the wire can carry: an i32 coefficient and an exponent in -255..=0.
fn decimal(v: &Bound<'_, PyAny>) -> PyResult<Value> {
    let (sign, digits, exponent): (u8, Vec<u8>, Bound<'_, PyAny>) =
        v.call_method0("as_tuple")?.extract()?;
    let bad =
        || PyValueError::new_err("Decimal out of the wire's range (i32 digits, scale 0..=255)");
    let exponent: i64 = exponent.extract().map_err(|_| bad())?;
    let scale = u8::try_from(-exponent).map_err(|_| bad())?;
    let magnitude = digits
        .iter()
        .try_fold(0i64, |acc, &d| {
            acc.checked_mul(10)?.checked_add(i64::from(d))
        })
        .ok_or_else(bad)?;
    let signed = if sign == 1 { -magnitude } else { magnitude };
    let digits = i32::try_from(signed).map_err(|_| bad())?;
    if sign == 1 && digits == 0 {
        return Err(bad()); // -0 has no wire form
    }
    Ok(Value::Decimal { scale, digits })
}
