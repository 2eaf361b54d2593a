//! Python event objects back to core events: lets tests feed any event the Python pipeline made
//! through the Rust writers. Strict: a value the core cannot hold is an error, never a guess.

use crate::topy::{DECIMAL, PROBLEM, TIMESTAMP};
use amqpscope_core::event::{
    Accounting, Base, Connection, Dir, Event, Frame, Gap, Malformed, Message, ProtocolHeader,
    Resync, Tls,
};
use amqpscope_core::value::{Name, Table, Value};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// The core event of an `amqpscope.events` object (by its `kind`).
pub fn event(ev: &Bound<'_, PyAny>) -> PyResult<Event> {
    let kind: String = ev.getattr("kind")?.extract()?;
    let base = base(ev)?;
    Ok(match kind.as_str() {
        "protocol-header" => Event::ProtocolHeader(ProtocolHeader {
            base,
            version: attr(ev, "version")?,
            raw: raw8(&attr::<String>(ev, "raw")?)?,
        }),
        "frame" => Event::Frame(Box::new(frame(ev, base)?)),
        "message" => Event::Message(Box::new(message(ev, base)?)),
        "gap" => Event::Gap(Gap {
            base,
            size: attr(ev, "size")?,
            lost_frame: attr(ev, "lost_frame")?,
        }),
        "resync" => Event::Resync(Resync {
            base,
            skipped: attr(ev, "skipped")?,
            reason: attr(ev, "reason")?,
        }),
        "malformed" => Event::Malformed(Malformed {
            base,
            reason: attr(ev, "reason")?,
            offset: attr(ev, "offset")?,
        }),
        "connection" => Event::Connection(Box::new(connection(ev, base)?)),
        "accounting" => Event::Accounting(accounting(ev, base)?),
        "tls" => Event::Tls(Box::new(tls(ev, base)?)),
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

fn base(ev: &Bound<'_, PyAny>) -> PyResult<Base> {
    let dir = match attr::<Option<String>>(ev, "dir")?.as_deref() {
        None => None,
        Some("c2s") => Some(Dir::C2S),
        Some("s2c") => Some(Dir::S2C),
        Some(other) => return Err(PyValueError::new_err(format!("bad dir {other:?}"))),
    };
    Ok(Base {
        packet: attr(ev, "packet")?,
        ts_ns: ts_ns(attr(ev, "ts")?)?,
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

fn frame(ev: &Bound<'_, PyAny>, base: Base) -> PyResult<Frame> {
    Ok(Frame {
        base,
        ftype: attr(ev, "type")?,
        size: attr(ev, "size")?,
        class_id: attr(ev, "class_id")?,
        method_id: attr(ev, "method_id")?,
        method: attr(ev, "method")?,
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

fn message(ev: &Bound<'_, PyAny>, base: Base) -> PyResult<Message> {
    Ok(Message {
        base,
        method: attr(ev, "method")?,
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
    })
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
