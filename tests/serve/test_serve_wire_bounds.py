"""Issue 55: one message must never stall the server. Whatever a client sends, `wire.unpackb` must decode it or refuse
it with `WireError` (never another exception) at a cost bounded by the decoding limits (`wire.Limits`), checked before
any work proportional to what the message claims.

Measured (`time.process_time` of one `wire.unpackb(msg, 8 MiB + 64)`, best of 5, with the messages these tests
build; a 2-core x86_64 CPU shared with other jobs, load average 8; today's = HEAD's wire.py, one run each):

| message | size | today's wire.py | bounded wire.py |
| --- | --- | --- | --- |
| shape bomb: an array map's `shape` = [2**63] x 60k | 540 KB | 31.8 s, then a WireError | 0.07 ms, refused: array length |
| the same, [2**63] x 932k | 8 MB | over 120 s (stopped) | 1.2 ms, refused: array length |
| array of 8M empty maps | 8 MB | 2.2 s, peak RSS +562 MB, accepted | 1.2 ms, refused: array length |
| array of 8M empty arrays | 8 MB | 4.5 s, accepted | 1.3 ms, refused: array length |
| map of 1.4M int keys | 8 MB | 0.38 s, accepted | 1.3 ms, refused: map length |
| 8M-deep arrays / 1000-deep maps | 8 MB / 3 KB | refused (msgpack's stack) / accepted | 1.3 / 0.08 ms, refused: depth |
| 2k arrays of 4096 fixints | 8 MB | 188 ms, accepted | 4.2 ms, refused: object budget |
| 1000 nested arrays, 4095 ints each | 4 MB | 69 ms, accepted | 4.8 ms, refused: object budget |
| 4096 x [{}, {}, {}, {}] | 20 KB | 5.8 ms, accepted | 2.7 ms, refused: container budget |
| 1800 small array maps (shape [1]) | 80 KB | 11.6 ms, accepted | 8.2 ms, refused: container budget |
| 500 small array maps (1000 containers) | 20 KB | | 8.0 ms, decoded |
| 2800 numpy-scalar maps | 120 KB | 7.4 ms, accepted | 8.5 ms, refused: container budget |
| 9 maps of 1024 str keys; 4 x 4096 floats; 4 x 4096 strs | 70-150 KB | | 8.5 / 5.2 / 5.6 ms, decoded |
| one 8 MB bin / ASCII string / non-ASCII string | 8 MB | | 2.5 / 3.4 / 16 ms, decoded |

The bound these tests assert for one call is 50 ms of CPU (`BOUND_S`): the issue's target for an 8 MB message of any
shape; 3x the slowest figure above (the 8 MB non-ASCII string: Python's UTF-8 decoder, linear in the size) and 40x the
attacks' ~1 ms, so that a loaded 2-core CI machine passes it. The garbage collector is paused around the timed call: a
collection that earlier allocations trigger is not the message's cost. Run against today's wire.py (HEAD), every
regression test of section (2) fails: it stalls (over 120 s), accepts the message, or refuses it without the field.
"""
from __future__ import annotations

import gc
import math
import struct
import time

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxygen_gym.serve import wire

pytest.importorskip("openpi_client")
from openpi_client import msgpack_numpy  # noqa: E402

from oxygen_gym.eval.bench.serve_load import openpi_observation  # noqa: E402

BOUND_S = 0.050
CAP = 8 * 2**20  # the server's default --max-message-mb


def _timed(data: bytes, **kwargs):
    """(result or WireError, CPU seconds) of one `wire.unpackb`; any other exception propagates: that is a bug."""
    gc.disable()
    start = time.process_time()
    try:
        result = wire.unpackb(data, CAP + 64, **kwargs)
    except wire.WireError as e:
        result = e
    finally:
        elapsed = time.process_time() - start
        gc.enable()
    return result, elapsed


def _refused_fast(data: bytes, *needles: str) -> wire.WireError:
    """Assert `data` is refused with a WireError naming every needle, within BOUND_S of CPU (best of 3 runs)."""
    runs = [_timed(data) for _ in range(3)]
    error, elapsed = runs[0][0], min(t for _, t in runs)
    assert isinstance(error, wire.WireError), f"accepted: {type(error).__name__}"
    for needle in needles:
        assert needle in str(error), str(error)
    assert elapsed < BOUND_S, f"{1e3 * elapsed:.1f} ms of CPU for {len(data)} bytes: {error}"
    return error


def _arr(data=b"", dtype="|u1", shape=(0,), drop=(), **keys) -> dict:
    """An array's map as openpi packs it, less the keys in `drop`, with `keys` (by their str names) replaced."""
    obj = {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": list(shape) if isinstance(shape, tuple) else shape}
    obj.update({name.encode(): value for name, value in keys.items()})
    return {k: v for k, v in obj.items() if k.decode() not in drop}


def _array_header(n: int) -> bytes:
    return b"\xdd" + struct.pack(">I", n)


def _shape_bomb(size: int) -> bytes:
    """The issue's attack: an array map whose `shape` lists 2**63 until the message is `size` bytes."""
    dims = [2**63] * ((size - 80) // 9)
    bomb = {b"__ndarray__": True, b"data": b"x", b"dtype": "|u1", b"shape": dims}
    return msgpack.packb({"observation/image": bomb}, use_bin_type=True)


# --- (2) the attacks, each refused in well under 50 ms of CPU -----------------------------------------------

def test_shape_bomb_540kb_is_refused_fast():
    data = _shape_bomb(540_000)
    assert 530_000 < len(data) <= 540_000
    _refused_fast(data, "observation/image", "4096")


def test_shape_bomb_8mb_is_refused_fast():
    _refused_fast(_shape_bomb(CAP), "observation/image")


def test_a_shape_within_the_array_length_but_of_high_rank_names_the_field_and_the_limit():
    msg = msgpack_numpy.packb({"observation/image": _arr(b"x", shape=[1] * 40)})
    assert str(_refused_fast(msg)) == "observation/image: array rank 40 over the limit of 8"


@pytest.mark.parametrize(
    "dims, data, needle",
    [
        ([2**63] * 8, b"abcd", "has more elements than the message has bytes"),
        ([2**64 - 1, 1], b"abcd", "has more elements than the message has bytes"),
        ([0, 2**63], b"", "has more elements than the message has bytes"),  # empty, yet numpy could not make it
        ([0] + [2**22] * 7, b"", "has more elements than the message has bytes"),
        ([1, 2, 3], b"abcd", "needs 6 bytes, got 4"),
        ([0, 5], b"abcd", "needs 0 bytes, got 4"),
    ],
    ids=["huge", "uint64-max", "zero-and-huge", "zero-and-many", "too-few-bytes", "empty-with-data"],
)
def test_shapes_are_checked_against_the_data_without_multiplying_unbounded_dims(dims, data, needle):
    msg = msgpack.packb({"x": _arr(data, shape=dims)}, use_bin_type=True)
    _refused_fast(msg, "x: array", needle)


def test_8mb_array_of_empty_maps_is_refused_fast():
    n = CAP - 5
    _refused_fast(_array_header(n) + b"\x80" * n, f"array of {n} elements", "limit of 4096")


def test_8mb_array_of_empty_arrays_is_refused_fast():
    n = CAP - 5
    _refused_fast(_array_header(n) + b"\x90" * n, f"array of {n} elements")


def test_map_of_1_4m_int_keys_is_refused_fast():
    data = msgpack.packb({i: 0 for i in range(1_400_000)})
    _refused_fast(data, "map of 1400000 entries", "limit of 1024")


def test_deep_nesting_is_refused_fast():
    _refused_fast(b"\x81\xa1k" * 1000 + b"\xc0", "k/k/k/k", "nesting deeper than the limit of 16")
    _refused_fast(b"\x91" * (CAP - 1) + b"\xc0", "nesting deeper")


def test_many_containers_inside_each_length_limit_are_refused_by_the_budgets():
    """Shapes that pass every per-container limit: the object and container budgets stop them early."""
    inner = b"\xdc" + struct.pack(">H", 4096) + b"\x01" * 4096
    _refused_fast(_array_header(CAP // len(inner)) + inner * (CAP // len(inner)), "more than 20000 msgpack objects")
    level = b"\xdc" + struct.pack(">H", 4096) + b"\x01" * 4095  # 4095 ints, then the next level opens
    _refused_fast(level * 1000 + b"\x90", "more than 20000 msgpack objects")
    _refused_fast(_array_header(4096) + (b"\x94" + b"\x80" * 4) * 4096, "more than 1024 maps and arrays")
    small = wire.packb(np.zeros(1, np.float32))
    _refused_fast(_array_header(1800) + small * 1800, "more than 1024 maps and arrays")
    scalar = wire.packb(np.float32(1.5))  # (np.float64 is a Python float: msgpack sends it as a plain float)
    _refused_fast(_array_header(2800) + scalar * 2800, "more than 1024 maps and arrays")


def test_the_largest_messages_inside_every_limit_decode_fast():
    small = wire.packb(np.zeros(1, np.float32))
    for msg in (
        msgpack.packb([{f"k{i}": i for i in range(1024)} for _ in range(9)]),
        msgpack.packb([[1.5] * 4096] * 4),
        msgpack.packb([["ab"] * 4096] * 4),
        _array_header(500) + small * 500,
        msgpack.packb(b"a" * (CAP - 10)),
        msgpack.packb("\u20ac" * ((CAP - 10) // 3)),  # non-ASCII: the slowest string to decode, ~16 ms
    ):
        runs = [_timed(msg) for _ in range(3)]
        result, elapsed = runs[0][0], min(t for _, t in runs)
        assert not isinstance(result, wire.WireError), result
        assert elapsed < BOUND_S, f"{1e3 * elapsed:.1f} ms"


@pytest.mark.parametrize(
    "obj, needles",
    [
        ({"images": {"cam_high": _arr(dtype="<c8")}}, ["images/cam_high", "dtype '<c8'"]),
        ({"a": _arr(dtype="|O")}, ["a: dtype '|O'"]),
        ({"a": _arr(b"\0" * 4, ">f4", (1,))}, ["dtype '>f4'"]),
        ({"a": _arr(b"\0" * 8, "<M8[ns]", (1,))}, ["dtype"]),
        ({"a": _arr(b"\0" * 8, "(1,)f8", (1,))}, ["dtype"]),
        ({"a": _arr(b"\2", "|b1", (1,))}, ["a: a bool array"]),
        ({"a": _arr(shape=[-1])}, ["a: array 'shape'", "-1"]),
        ({"a": _arr(shape=[[1]])}, ["a: array 'shape'"]),
        ({"a": _arr(shape=[True])}, ["a: array 'shape'"]),
        ({"a": _arr("text", shape=(4,))}, ["a: array 'data' must be bytes"]),
        ({"a": _arr(drop=("shape",))}, ["a: an array's map must have exactly the keys"]),
        ({"a": _arr(__ndarray__=1)}, ["a: an array's map must have exactly the keys"]),
        ({"a": {b"__npgeneric__": True, b"data": 300, b"dtype": "|u1"}}, ["a: scalar 300 is not a valid uint8"]),
        ({"a": {b"__npgeneric__": True, b"data": 1e300, b"dtype": "<f4"}}, ["not a valid float32"]),
        ({"a": {b"__npgeneric__": True, b"data": "7", b"dtype": "<i8"}}, ["not a valid int64"]),
        ({"a": {b"__npgeneric__": True, b"data": 1, b"dtype": "|b1"}}, ["not a valid bool"]),
        ({"images": {7: b"x"}}, ["images: map keys must be strings, got 7"]),
        ({"images": {b"cam": b"x"}}, ["images: map keys must be strings"]),
        ({"a": {**_arr(drop=("data",)), "data": b""}}, ["a: map keys must be strings"]),
        ({"a": [0, {"b": msgpack.ExtType(5, b"x")}]}, ["a[1]/b: msgpack extension types are not accepted"]),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_refusals_name_the_field_and_what_was_expected(obj, needles):
    _refused_fast(msgpack.packb(obj, use_bin_type=True), *needles)


def test_keys_that_are_maps_or_arrays_and_truncated_or_padded_messages_are_refused():
    assert "map keys must be strings" in str(_refused_fast(b"\x81\x90\x01"))
    good = msgpack_numpy.packb(openpi_observation("libero", np.random.default_rng(0), "pick"))
    for cut in (0, 1, 2, 40, len(good) // 2, len(good) - 1):
        _refused_fast(good[:cut], "ends early")
    _refused_fast(good + b"\x00", "1 bytes of extra data")


def test_max_bytes_and_custom_limits():
    data = wire.packb({"state": [[1.0, 2.0]] * 3})
    with pytest.raises(wire.WireError, match="exceeds the limit of 10"):
        wire.unpackb(data, 10)
    assert wire.unpackb(memoryview(data), len(data)) == {"state": [[1.0, 2.0]] * 3}
    with pytest.raises(wire.WireError, match=r"state\[0\]: nesting deeper than the limit of 2"):
        wire.unpackb(data, limits=wire.Limits(max_depth=2))
    with pytest.raises(wire.WireError, match="more than 5 msgpack objects"):
        wire.unpackb(data, limits=wire.Limits(max_objects=5))
    with pytest.raises(wire.WireError, match=r"^prompt: 9 exceeds max_str_len\(8\), over the decoding limit$"):
        wire.unpackb(wire.packb({"prompt": "x" * 9}), limits=wire.Limits(max_str_len=8))
    assert wire.unpackb(wire.packb({"prompt": "x" * (6 * 2**20)}))["prompt"] == "x" * (6 * 2**20)  # the server names it
    with pytest.raises(wire.WireError, match=r"^prompt: a string that is not UTF-8$"):
        wire.unpackb(wire.packb({"prompt": "ab"}).replace(b"ab", b"\xff\xfe"))
    with pytest.raises(wire.WireError, match=r"^images: a string that is not UTF-8$"):  # an array names itself
        wire.unpackb(wire.packb({"images": ["ok", "ab"]}).replace(b"ab", b"\xff\xfe"))
    with pytest.raises(ValueError, match="max_rank"):
        wire.Limits(max_rank=0)
    with pytest.raises(wire.WireError, match="expected a binary msgpack message"):
        wire.unpackb("text")


# --- (1) property: anything a client can send returns or raises WireError, within the bound -------------------------

# The grammar: each choice is valid, or with a small probability a fault, so that a message often holds exactly one
# fault and some hold none: then the decoder's output is reached and `_well_formed` checks it.
_ODD_DTYPES = ["|O", "<c8", ">f4", ">i8", "V8", "<M8[ns]", "S10", "<U3", "(3,)f8", "f8,f8", "float32", "bool", "",
               "<f16", "=f4"]
_fault = st.integers(0, 11).map(lambda n: n == 0)
_dims = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([2**63, 2**64 - 1, -1, 2**31, 0]),
    st.lists(st.integers(0, 3), max_size=3),
    st.text(max_size=3),
    st.floats(allow_nan=True),
    st.booleans(),
)
_good_shapes = st.one_of(st.lists(st.integers(0, 4), max_size=4), st.lists(st.sampled_from([0, 1, 1, 2]), max_size=8))
_bad_shapes = st.one_of(
    st.lists(st.sampled_from([0, 1, 1, 2]), min_size=9, max_size=12),  # over the rank limit
    st.lists(st.one_of(st.integers(0, 4), _dims), max_size=12),
    st.builds(lambda d, n: [d] * n, _dims, st.integers(0, 70_000)),  # shape bombs up to ~630 KB
    st.integers(-(2**63), 2**64 - 1),
    st.text(max_size=5),
)
_bad_dtypes = st.one_of(st.sampled_from(_ODD_DTYPES), st.text(max_size=12), st.binary(max_size=12))
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=20), st.binary(max_size=64)
)


def _itemsize(dtype) -> int:
    try:
        return np.dtype(dtype).itemsize or 1
    except (TypeError, ValueError, SyntaxError):
        return 1


_ARRAY_FAULTS = ["rank", "shape", "dtype", "data", "bool", "marker", "missing key", "extra key"]


@st.composite
def _array_maps(draw):
    """An array's map with at most one fault, so that each fault is met alone (a decoder that missed it would return)."""
    fault = draw(st.sampled_from([None] * 2 * len(_ARRAY_FAULTS) + _ARRAY_FAULTS))
    shape = draw(_good_shapes)
    if fault == "rank":
        shape = draw(st.lists(st.sampled_from([1, 1, 1, 2, 0]), min_size=9, max_size=12))
    elif fault == "shape":
        shape = draw(_bad_shapes)
    dtype = draw(st.sampled_from(sorted(wire._DTYPES)))
    if fault == "dtype":
        dtype = draw(st.one_of(st.sampled_from(_ODD_DTYPES), st.sampled_from(_ODD_DTYPES), _bad_dtypes))
    elif fault == "bool":
        dtype, shape = "|b1", draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    if isinstance(shape, list) and all(type(n) is int and 0 <= n <= 6 for n in shape) and math.prod(shape) <= 64:
        size = math.prod(shape) * _itemsize(dtype)  # data that fits the shape
        data = draw(st.binary(min_size=size, max_size=size))
        if dtype == "|b1":
            data = bytes(b & 1 for b in data)
            if fault == "bool" and data:
                data = data[:-1] + bytes([draw(st.integers(2, 255))])
    else:
        data = draw(st.binary(max_size=64))
    if fault == "data":
        data = draw(st.one_of(st.binary(max_size=64), _scalars).filter(lambda d: d != data))
    obj = {b"__ndarray__": draw(st.sampled_from([1, None, False])) if fault == "marker" else True,
           b"data": data, b"dtype": dtype, b"shape": shape}
    if fault == "missing key":
        obj.pop(draw(st.sampled_from(sorted(obj))))
    elif fault == "extra key":
        obj[draw(st.sampled_from([b"extra", "data", 5]))] = 1
    return obj


@st.composite
def _generics(draw):
    dtype = draw(_bad_dtypes if draw(_fault) else st.sampled_from(sorted(wire._DTYPES)))
    if draw(_fault) or dtype not in wire._DTYPES:
        value = draw(_scalars)
    else:
        dt, low, high = wire._DTYPES[dtype]
        value = (draw(st.booleans()) if dt.kind == "b" else draw(st.integers(low, high)) if dt.kind in "iu"
                 else draw(st.floats(width=8 * dt.itemsize)))
    return {b"__npgeneric__": True, b"data": value, b"dtype": dtype}


_bad_keys = st.one_of(st.binary(max_size=8), st.integers(-(2**63), 2**64 - 1),
                      st.sampled_from([b"__ndarray__", b"data"]))
_keys = _fault.flatmap(lambda bad: _bad_keys if bad else st.text(max_size=8))
_values = st.recursive(
    st.one_of(_scalars, _array_maps(), _generics()),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(_keys, inner, max_size=5)),
    max_leaves=12,
)


@st.composite
def _messages(draw) -> bytes:
    """A message from the wire grammar, then perhaps damaged: cut, a byte changed, bytes spliced in, a huge header."""
    observation = st.fixed_dictionaries(
        {"observation/image": _array_maps(), "observation/state": _array_maps(), "step": _generics(),
         "prompt": st.text(max_size=20)},
        optional={"images": st.one_of(st.dictionaries(_keys, _array_maps(), max_size=2),
                                      st.dictionaries(_bad_keys, st.none(), max_size=1))},
    )
    data = msgpack.packb(draw(st.one_of(_values, observation)), use_bin_type=True)
    how = draw(st.integers(0, 14))  # 0-4 damage it, 5-14 leave it as packed
    if how == 0 and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == 1 and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    elif how == 2:
        i = draw(st.integers(0, len(data)))
        data = data[:i] + draw(st.binary(min_size=1, max_size=16)) + data[i:]
    elif how == 3:
        head = draw(st.sampled_from([b"\xdd", b"\xdf", b"\xdc", b"\xde", b"\xc6", b"\xdb", b"\xc9"]))
        width = 2 if head in (b"\xdc", b"\xde") else 4
        count = draw(st.integers(0, 2 ** (8 * width) - 1))
        data = head + count.to_bytes(width, "big") + data * draw(st.integers(1, 4))
    elif how == 4:
        data = draw(st.binary(max_size=256))
    return data


def _well_formed(value, depth: int = 1) -> None:
    """What a decoded message may hold: str-keyed maps, lists, scalars, accepted numpy arrays and scalars."""
    assert depth <= wire.DEFAULT_LIMITS.max_depth
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str
            _well_formed(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _well_formed(item, depth + 1)
    elif isinstance(value, np.ndarray | np.generic):
        assert value.dtype.str in wire._DTYPES and value.ndim <= wire.DEFAULT_LIMITS.max_rank
        assert value.dtype.kind != "b" or np.asarray(value).view(np.uint8).max(initial=0) <= 1  # bools are 0 or 1
    else:
        assert value is None or type(value) in (bool, int, float, str, bytes), type(value)


@settings(max_examples=600, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_messages())
def test_any_message_decodes_or_raises_wire_error_within_the_bound(data):
    result, elapsed = _timed(data)
    assert elapsed < BOUND_S, f"{1e3 * elapsed:.1f} ms of CPU for {len(data)} bytes"
    if not isinstance(result, wire.WireError):
        _well_formed(result)


# --- (3) round trip with openpi's client -----------------------------------------------------------------------------

def _assert_same(a, b) -> None:
    """`a` decoded equals `b` sent: same types, dtypes, shapes and values; an np.float64 scalar arrives as a float (it
    is one, and msgpack packs it natively, in openpi's client as in ours)."""
    if type(b) is np.float64:
        b = float(b)
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and (a == b or (np.isnan(a) and np.isnan(b)))
    elif isinstance(a, float):
        assert a == b or (a != a and b != b)
    else:
        assert a == b


def _observation() -> dict:
    rng = np.random.default_rng(0)
    obs = {
        "observation/image": rng.integers(0, 256, (256, 256, 3), dtype=np.uint8),
        "observation/wrist_image": rng.integers(0, 256, (256, 256, 3), dtype=np.uint8),
        "observation/state": rng.standard_normal(8).astype(np.float32),
        "prompt": "put the bowl on the plate",
        "prev_actions": rng.standard_normal((7, 7)),  # float64
        "empty": np.zeros((0, 7), np.float32),
        "zero_d": np.array(3.5, np.float32),
        "strided": rng.standard_normal((6, 4))[::2, ::-1],  # not contiguous: sent in C order
        "inference_delay": 2,
    }
    for dt, _, _ in wire._DTYPES.values():
        name = dt.name
        obs[f"array_{name}"] = np.arange(6).reshape(2, 3).astype(name)
        obs[f"scalar_{name}"] = np.array(1).astype(name)[()]
    obs["scalar_uint64_max"], obs["scalar_nan"] = np.uint64(2**64 - 1), np.float32("nan")
    return obs


def test_what_openpi_client_sends_decodes_unchanged():
    obs = _observation()
    _assert_same(wire.unpackb(msgpack_numpy.packb(obs), CAP), obs)
    rng = np.random.default_rng(1)
    for robot in ("libero", "droid", "aloha"):
        obs = openpi_observation(robot, rng, "stack the blocks")
        _assert_same(wire.unpackb(msgpack_numpy.packb(obs), CAP), obs)


def test_four_640x480_cameras_fit_the_cap_and_decode_fast():
    rng = np.random.default_rng(2)
    obs = {"images": {cam: rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
                      for cam in ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")},
           "state": rng.standard_normal(14), "prompt": "fold the towel"}
    data = msgpack_numpy.packb(obs)
    assert len(data) < CAP
    result, elapsed = _timed(data)
    _assert_same(result, obs)
    assert elapsed < BOUND_S


def test_our_packb_decodes_with_openpi_client():
    obs = _observation()
    _assert_same(msgpack_numpy.unpackb(wire.packb(obs)), {**obs, "strided": np.ascontiguousarray(obs["strided"])})
    swapped = np.arange(4, dtype=">f4")  # sent in native byte order, which openpi's peers read
    _assert_same(msgpack_numpy.unpackb(wire.packb({"x": swapped})), {"x": swapped.astype("<f4")})
    with pytest.raises(TypeError, match="complex64"):
        wire.packb(np.zeros(2, np.complex64))


_valid_arrays = st.builds(
    lambda dtype, shape, seed: np.random.default_rng(seed).integers(0, 2, shape).astype(dtype),
    st.sampled_from([d.name for d, _, _ in wire._DTYPES.values()]),
    st.lists(st.integers(0, 4), max_size=4).map(tuple),
    st.integers(0, 2**32 - 1),
)
_valid_leaves = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False),
                          st.text(max_size=20), st.binary(max_size=20), _valid_arrays)


def _valid_values(depth: int = 4):
    """Values nested at most `depth` maps or lists deep (an array adds two: its map and its shape), inside the limits."""
    if depth == 0:
        return _valid_leaves
    inner = st.deferred(lambda: _valid_values(depth - 1))
    return st.one_of(_valid_leaves, st.lists(inner, max_size=4),
                     st.dictionaries(st.text(max_size=8), inner, max_size=4))


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(max_size=10), _valid_values(), max_size=6))
def test_any_valid_openpi_message_round_trips(obs):
    _assert_same(wire.unpackb(msgpack_numpy.packb(obs), CAP), obs)
    _assert_same(msgpack_numpy.unpackb(wire.packb(obs)), obs)
