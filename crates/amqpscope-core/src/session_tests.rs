//! How a connection ended on TCP, what a connection that never spoke AMQP 0-9-1 began with, and
//! the TCP acknowledgements that prove a connection.close arrived.

use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::tables::SpecTables;

const SPEC: &str = r#"{"version":"t","classes":[{"class":10,"properties":[]}],"methods":[
    {"class":10,"method":50,"name":"connection.close","content":false,"reads":[
        {"fixed":2,"items":[["reply_code","short",0,0]]},{"var":"shortstr","name":"reply_text"},
        {"fixed":4,"items":[["class_id","short",0,0],["method_id","short",2,0]]}]}]}"#;

fn ep(port: u16) -> Endpoint {
    Endpoint {
        addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port,
    }
}

const CLIENT: u16 = 40000;
const SERVER: u16 = 5672;

/// One flow of one session: packets numbered 1, 2, … as they are fed.
struct Flow {
    session: Session,
    packet: u64,
    out: Vec<Event>,
}

impl Flow {
    fn new() -> Flow {
        let codec = Codec::new(SpecTables::from_json(SPEC).unwrap(), &Limits::default());
        let mut session = Session::new(codec, Options::default(), &Limits::default());
        let mut out = Vec::new();
        session.handle(
            TcpEvent::Open {
                flow: 0,
                client: ep(CLIENT),
                server: ep(SERVER),
                syn_seen: true,
                packet: 1,
                ts_ns: 0,
            },
            &mut out,
        );
        Flow {
            session,
            packet: 1,
            out,
        }
    }

    fn data(&mut self, from_client: bool, data: &[u8], acked: Option<u32>) {
        self.packet += 1;
        let (src, dst) = if from_client {
            (ep(CLIENT), ep(SERVER))
        } else {
            (ep(SERVER), ep(CLIENT))
        };
        let ev = TcpEvent::Data {
            flow: 0,
            src,
            dst,
            data: data.to_vec(),
            packet: self.packet,
            ts_ns: self.packet as i64,
            acked,
        };
        self.session.handle(ev, &mut self.out);
    }

    fn close(&mut self, how: CloseHow, fin: Option<TcpMark>, rst: Option<TcpMark>) -> Connection {
        self.packet += 1;
        let ev = TcpEvent::Close {
            flow: 0,
            how,
            packet: self.packet,
            ts_ns: 0,
            fin,
            rst,
        };
        self.session.handle(ev, &mut self.out);
        self.out
            .iter()
            .find_map(|e| match e {
                Event::Connection(c) if c.state == "close" => Some((**c).clone()),
                _ => None,
            })
            .expect("a close event")
    }
}

fn opening_of(client_bytes: &[u8]) -> Option<&'static str> {
    let mut flow = Flow::new();
    if !client_bytes.is_empty() {
        flow.data(true, client_bytes, None);
    }
    flow.close(CloseHow::Fin, None, None).opening
}

#[test]
fn a_connection_that_never_spoke_amqp_0_9_1_is_named_by_its_first_bytes() {
    assert_eq!(opening_of(b"AMQP\x00\x00\x09\x01"), None);
    assert_eq!(opening_of(b"AMQP\x01\x01\x00\x09"), None);
    assert_eq!(opening_of(b"AMQP\x00\x01\x00\x00"), Some("amqp-1.0"));
    assert_eq!(opening_of(b"AMQP\x03\x01\x00\x00"), Some("amqp-1.0"));
    assert_eq!(opening_of(b"AMQP\x01\x01\x00\x0a"), Some("amqp-0-10"));
    assert_eq!(opening_of(b"AMQP\x01\x01\x08\x00"), Some("amqp-other"));
    assert_eq!(
        opening_of(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        Some("http")
    );
    assert_eq!(
        opening_of(b"\x16\x03\x01\x00\x30\x01\x00\x00\x2c\x03\x03"),
        Some("tls")
    );
    assert_eq!(opening_of(b"SSH-2.0-OpenSSH_9.6\r\n"), Some("other"));
    assert_eq!(opening_of(b""), Some("nothing"));
}

#[test]
fn a_flow_on_the_amqp_port_that_never_spoke_amqp_still_opens_and_closes() {
    let mut flow = Flow::new();
    flow.data(true, b"GET / HTTP/1.1\r\n\r\n", None);
    let close = flow.close(CloseHow::Rst, None, None);
    let states: Vec<&str> = flow
        .out
        .iter()
        .filter_map(|e| match e {
            Event::Connection(c) => Some(c.state.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(states, ["open", "close"]);
    assert_eq!(close.ended.as_deref(), Some("rst"));
}

#[test]
fn the_first_fin_and_rst_are_told_by_side() {
    let mut flow = Flow::new();
    flow.data(true, b"AMQP\x00\x00\x09\x01", None);
    let fin = TcpMark {
        by: ep(CLIENT),
        packet: 7,
    };
    let rst = TcpMark {
        by: ep(SERVER),
        packet: 8,
    };
    let close = flow.close(CloseHow::Rst, Some(fin), Some(rst));
    assert_eq!(close.fin_by.as_deref(), Some("client"));
    assert_eq!(close.fin_packet, Some(7));
    assert_eq!(close.rst_by.as_deref(), Some("server"));
    assert_eq!(close.rst_packet, Some(8));
    assert_eq!(close.opening, None);
}

/// A connection.close frame of 320 "not found" on channel 0.
fn close_frame() -> Vec<u8> {
    let text = b"NOT_FOUND";
    let mut payload = vec![0, 10, 0, 50, 0x01, 0x40, text.len() as u8];
    payload.extend_from_slice(text);
    payload.extend_from_slice(&[0, 0, 0, 0]);
    let mut f = vec![1, 0, 0];
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(&payload);
    f.push(0xce);
    f
}

#[test]
fn the_clients_ack_past_the_servers_close_proves_it_arrived() {
    let mut flow = Flow::new();
    flow.data(true, b"AMQP\x00\x00\x09\x01", None); // packet 2
    let close = close_frame();
    let end = close.len() as u32;
    flow.data(false, &close, Some(8)); // packet 3: the server's close
    assert_eq!(flow.session.take_close_arrivals().count(), 0);
    flow.data(true, &[8, 0, 0, 0, 0, 0, 0, 0xce], Some(end - 1)); // 4: not all of it yet
    assert_eq!(flow.session.take_close_arrivals().count(), 0);
    flow.data(true, &[8, 0, 0, 0, 0, 0, 0, 0xce], Some(end)); // 5: all of it
    let arrived: Vec<CloseArrived> = flow.session.take_close_arrivals().collect();
    assert_eq!(
        arrived,
        [CloseArrived {
            conn: 0,
            closer: Dir::S2C,
            packet: 5
        }]
    );
    flow.data(true, &[8, 0, 0, 0, 0, 0, 0, 0xce], Some(end + 1)); // once per close
    assert_eq!(flow.session.take_close_arrivals().count(), 0);
}
