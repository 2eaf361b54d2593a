"""Every method and content class of both shipped specs (0-9-1 with RabbitMQ's extensions, 0-9),
built by the Scapy layer from hypothesis values and read back by the native core's decoders; the
layer's own dissection gives the same values and the same bytes; and for every method pamqp knows,
the layer's bytes equal pamqp's for the same arguments (table values written with the type codes
pamqp picks, through ``Typed``).
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from codec_strategies import method_args, property_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame, header
from test_codec_pamqp import PAMQP, PAMQP_PROPS, _pamqp_properties, pamqp_value

from amqpscope.dissect.codec import get_codec
from amqpscope.dissect.spec import bundled_spec_path
from amqpscope.dissect.values import Timestamp
from amqpscope.scapy import Typed
from amqpscope.scapy.layers import FrameLayer, Layers

pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated in AMQP 0-9-1:DeprecationWarning")

CODECS = {"0-9-1": get_codec(), "0-9": get_codec(bundled_spec_path("amqp0-9.xml"))}
ALL_METHODS = [(v, m.full_name) for v, c in CODECS.items() for m in c.spec.methods()]
CONTENT_CLASSES = [(v, c.index) for v, codec in CODECS.items() for c in codec.spec.classes if c.properties]
FEW = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def layers(version: str) -> Layers:
    return CODECS[version].layers


def _fields(layer: Any, names: Any) -> dict[str, Any]:
    return {n: layer.getfieldval(n) for n in names}


@pytest.mark.parametrize(("version", "name"), ALL_METHODS, ids=[f"{v}:{n}" for v, n in ALL_METHODS])
@FEW
@given(data=st.data(), channel=st.integers(0, 2**16 - 1))
def test_every_method_built_by_scapy_decodes_in_the_core(version: str, name: str, data: st.DataObject,
                                                         channel: int) -> None:  # fmt: skip
    codec, lay = CODECS[version], layers(version)
    method = codec.spec.find_method(name)
    args = data.draw(method_args(method.fields))
    raw = bytes(lay.frame(channel=channel) / lay.method(name)(**args))
    d = codec.decode_method(raw[7:-1])
    assert (d.name, d.problem, d.args) == (name, None, args)
    # the layer dissects its own bytes to the same values, and builds them again unchanged
    pkt = lay.frame(raw)
    assert isinstance(pkt, FrameLayer) and pkt.channel == channel and pkt.size == len(raw) - 8
    assert type(pkt.payload) is lay.method(name)
    assert _fields(pkt.payload, args) == args
    assert bytes(pkt) == raw


@pytest.mark.parametrize(("version", "class_id"), CONTENT_CLASSES, ids=[f"{v}:{c}" for v, c in CONTENT_CLASSES])
@FEW
@given(data=st.data(), body_size=st.integers(0, 2**64 - 1), weight=st.integers(0, 2**16 - 1))
def test_every_content_header_built_by_scapy_decodes_in_the_core(version: str, class_id: int, data: st.DataObject,
                                                                 body_size: int, weight: int) -> None:  # fmt: skip
    codec, lay = CODECS[version], layers(version)
    props = data.draw(property_values(codec.spec.find_class(class_id).properties))
    raw = bytes(lay.frame(channel=1) / lay.header(class_id)(body_size=body_size, weight=weight, **props))
    h = codec.decode_header(raw[7:-1])
    assert (h.class_id, h.weight, h.body_size, h.properties, h.problem) == (class_id, weight, body_size, props, None)
    pkt = lay.frame(raw)
    header_layer = pkt.payload
    present = {f.name: header_layer.getfieldval(f.name) for f in header_layer.fields_desc[4:]}
    assert {k: v for k, v in present.items() if v is not None} == props
    assert bytes(pkt) == raw


# --- byte for byte against pamqp ---------------------------------------------------------------------------


def pamqp_typed(value: Any) -> Any:
    """A value pamqp was given, as the Scapy layer is told to write it: with pamqp's type code."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        for code, lo, hi in (("b", -128, 127), ("s", -(2**15), 2**15 - 1), ("u", 0, 2**16 - 1),
                             ("I", -(2**31), 2**31 - 1), ("i", 0, 2**32 - 1)):  # fmt: skip
            if lo <= value <= hi:
                return Typed(code, value)
        return Typed("l", value)
    if isinstance(value, float):
        return Typed("f", value)
    if isinstance(value, datetime.datetime):
        return Timestamp(int(value.timestamp()))
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dict):
        return {k: pamqp_typed(v) for k, v in sorted(value.items())}  # pamqp writes keys sorted
    if isinstance(value, list):
        return [pamqp_typed(v) for v in value]
    return value


PAMQP_KEYS = list(PAMQP)


@pytest.mark.parametrize(
    "key", PAMQP_KEYS, ids=[get_codec().spec.method_by_ids()[(k >> 16, k & 0xFFFF)].full_name for k in PAMQP_KEYS]
)
@FEW
@given(data=st.data(), channel=st.integers(0, 2**16 - 1))
def test_scapy_writes_the_bytes_pamqp_writes(key: int, data: st.DataObject, channel: int) -> None:
    cls = PAMQP[key]
    lay = layers("0-9-1")
    ours = lay.method((key >> 16, key & 0xFFFF))
    kwargs = {s: data.draw(pamqp_value(s, cls.amqp_type(s)), label=s) for s in cls.__slots__}
    expected = frame.marshal(cls(**kwargs), channel)
    names = [f.name for f in ours.fields_desc[2:]]
    args = {n: pamqp_typed(kwargs[s]) if cls.amqp_type(s) == "table" else kwargs[s]
            for n, s in zip(names, cls.__slots__, strict=True)}  # fmt: skip
    assert bytes(lay.frame(channel=channel) / ours(**args)) == expected
    assert bytes(lay.frame(expected)) == expected


@FEW
@given(data=st.data(), body_size=st.integers(0, 2**63 - 1), channel=st.integers(1, 2**16 - 1))
def test_scapy_writes_the_content_header_pamqp_writes(data: st.DataObject, body_size: int, channel: int) -> None:
    props = _pamqp_properties(data)
    expected = frame.marshal(header.ContentHeader(0, body_size, props), channel)
    lay = layers("0-9-1")
    values = {}
    for slot, f in zip(PAMQP_PROPS, lay.header(60).fields_desc[4:], strict=True):
        value = getattr(props, slot)
        if isinstance(value, (dict, datetime.datetime)):
            value = pamqp_typed(value)
        values[f.name] = None if value in (None, "") else value  # pamqp leaves out ''
    assert bytes(lay.frame(channel=channel) / lay.header(60)(body_size=body_size, **values)) == expected


def test_pamqp_and_the_layer_know_the_same_methods() -> None:
    assert {(k >> 16, k & 0xFFFF) for k in PAMQP} == set(layers("0-9-1").by_ids)
    assert len(commands.Basic.Properties.__slots__) == len(layers("0-9-1").header(60).fields_desc[4:])
