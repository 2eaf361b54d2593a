//! `_native.PacketReader`: the core's capture reader as a Python iterator of
//! amqpscope.packets.RawPacket (for `-w` copies, Spark planning and tools that want packets).

use std::sync::Mutex;

use amqpscope_core::capture::{CaptureError, PacketReader as CoreReader};
use amqpscope_core::limits::Limits;
use amqpscope_core::types::Packet;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList};

use crate::decoder::{capture_error, detached};

/// Packets read per trip into the core.
const BATCH_PACKETS: usize = 1024;

static RAW_PACKET: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

struct State {
    reader: CoreReader,
    /// A read error met after packets that were handed over first.
    error: Option<CaptureError>,
}

#[pyclass(frozen, module = "amqpscope._native")]
pub struct PacketReader {
    state: Mutex<State>,
}

#[pymethods]
impl PacketReader {
    /// Read `source`: a path ("-" for stdin) or a binary file object.
    #[new]
    fn new(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<PacketReader> {
        let reader = crate::source::open(py, source, &Limits::default())?;
        Ok(PacketReader {
            state: Mutex::new(State {
                reader,
                error: None,
            }),
        })
    }

    /// The next packets (up to 1024) as RawPacket objects; an empty list at the end. A read error
    /// is raised by the call after the one that returned the packets read before it.
    fn batch<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let got = detached(py, &self.state, |st| {
            if let Some(err) = st.error.take() {
                return Err(err);
            }
            let mut packets: Vec<Packet> = Vec::with_capacity(BATCH_PACKETS);
            while packets.len() < BATCH_PACKETS {
                match st.reader.next_packet() {
                    Ok(Some(p)) => packets.push(p),
                    Ok(None) => break,
                    Err(e) if packets.is_empty() => return Err(e),
                    Err(e) => {
                        st.error = Some(e);
                        break;
                    }
                }
            }
            Ok(packets)
        })?;
        py.check_signals()?;
        let packets = got.map_err(|e| capture_error(py, &e))?;
        let cls = RAW_PACKET.get_or_try_init(py, || {
            py.import("amqpscope.packets")?
                .getattr("RawPacket")
                .map(Bound::unbind)
        })?;
        let cls = cls.bind(py);
        let list = PyList::empty(py);
        for p in packets {
            let data = PyBytes::new(py, &p.data);
            list.append(cls.call1((p.index, p.ts_ns, p.linktype, data, p.wirelen))?)?;
        }
        Ok(list)
    }
}
