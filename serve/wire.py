"""openpi's wire format: msgpack with numpy arrays as maps of bytes keys (`__ndarray__`, `data`, `dtype`, `shape`) and
numpy scalars as (`__npgeneric__`, `data`, `dtype`). This is what `openpi_client.msgpack_numpy` packs and unpacks
(openpi: packages/openpi-client/src/openpi_client/msgpack_numpy.py); written here from the format, and strict on
input: a malformed array names its field instead of crashing the connection.

One message must never stall the server (issue 55: a 540 KB array shape once froze it for 29 s, an 8 MB array of empty
maps for 3 s; decoding is Python work that holds the GIL, on the event loop or off it), so the cost of decoding is
bounded by the limits below whatever the message claims, and each is checked before the work it guards. `unpackb`
therefore walks the message with msgpack's own streaming `Unpacker` (headers read in C, every scalar decoded in C),
checks each container's length against the limits below from its header, before reading a single element (msgpack's
header readers do not apply its own `max_array_len`/`max_map_len`, which cover `unpack()` only; they are passed too),
and charges every element against one object budget; nested containers are only entered while the depth allows.
msgpack's C `unpackb` with an `object_hook` cannot do this: it builds a container's elements (and every open container's
elements above it) before Python sees any of it, so a budget there can only be charged after the work was done.

Limits (`Limits`, all per message; openpi's real messages use well under a tenth of each): a LIBERO, DROID or ALOHA
observation is 20-80 msgpack objects, nesting depth 4 (message, `images`, the array map, its shape), and four
640x480x3 uint8 cameras are 3.7 MB of `bin`, inside the server's 8 MB cap:

| limit | default | why |
| --- | --- | --- |
| `max_depth` | 16 | nesting of maps and arrays; openpi messages nest 4 deep |
| `max_objects` | 20000 | every map key, map value and array element counts one; the walk's CPU cost is proportional to it |
| `max_containers` | 1024 | maps and arrays (an array's map and its shape are two); each costs a Python call |
| `max_array_len` | 4096 | elements in one msgpack array, checked from its header |
| `max_map_len` | 1024 | entries in one map, checked from its header |
| `max_str_len` | the message size | bytes in one string; the server checks prompts later, in characters and tokens, naming the field |
| `max_rank` | 8 | dimensions of one array |
| bin length | the message size | array data; an array can never be larger than the message carrying it |

Map keys must be strings; only an array's or scalar's own map has bytes keys (`b"__ndarray__"`, `b"data"`, ...).
Array and scalar dtypes are the little-endian (native) bool, (u)int8-64 and float16/32/64 that openpi sends; object,
void, complex, datetime, string and byte-swapped dtypes are refused. An array's element count is checked against its
data without multiplying unbounded numbers: the product of its non-zero dims is built one dim at a time and the check
stops as soon as it passes the message size. msgpack extension types (including timestamps) are refused. Anything
outside these rules raises `WireError` naming the field's path (e.g. `observation/image: array rank 40 over the limit
of 8`) or the limit. Measured costs of the worst messages: tests/serve/test_serve_wire_bounds.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import msgpack
import numpy as np

_ARRAY, _GENERIC = b"__ndarray__", b"__npgeneric__"
_ARRAY_KEYS = frozenset((_ARRAY, b"data", b"dtype", b"shape"))
_GENERIC_KEYS = frozenset((_GENERIC, b"data", b"dtype"))


def _bounds(dt: np.dtype) -> tuple[int | float, int | float]:
    """The values one scalar of `dt` can hold: a scalar outside them would overflow or wrap, so it is refused."""
    if dt.kind in "iu":
        return int(np.iinfo(dt).min), int(np.iinfo(dt).max)
    if dt.kind == "f":
        return -float(np.finfo(dt).max), float(np.finfo(dt).max)
    return False, True


# The dtypes openpi sends, as `dtype.str` spells them on this (little-endian) machine: "|b1", "|u1", "<f4", ...
_DTYPES: dict[str, tuple[np.dtype, int | float, int | float]] = {
    dt.str: (dt, *_bounds(dt))
    for dt in map(np.dtype, ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
                             "float16", "float32", "float64"))
}

# What the first byte of a msgpack object says it is (msgpack spec, "formats"): a map, an array, an extension, or a
# scalar (nil, bool, int, float, str, bin) that `Unpacker.unpack` decodes in C at a cost bounded by its length.
_SCALAR, _MAP, _LIST, _EXT = 0, 1, 2, 3
_KIND = [_SCALAR] * 256
for _b in [*range(0x80, 0x90), 0xDE, 0xDF]:
    _KIND[_b] = _MAP
for _b in [*range(0x90, 0xA0), 0xDC, 0xDD]:
    _KIND[_b] = _LIST
for _b in (0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8):
    _KIND[_b] = _EXT
_KIND = tuple(_KIND)


class WireError(ValueError):
    """A message that is not valid openpi msgpack, or one over a decoding limit."""


@dataclass(frozen=True)
class Limits:
    """Per-message decoding limits; the defaults pass every openpi observation (see the module docstring)."""

    max_depth: int = 16
    max_objects: int = 20_000
    max_containers: int = 1024
    max_array_len: int = 4096
    max_map_len: int = 1024
    max_str_len: int | None = None  # None: the message size (a 6 MB prompt must reach the prompt check that names it)
    max_rank: int = 8

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not (value is None and name == "max_str_len") and (type(value) is not int or value < 1):
                raise ValueError(f"wire.Limits.{name} must be a positive int, got {value!r}")


DEFAULT_LIMITS = Limits()


def _encode(obj):
    if isinstance(obj, np.ndarray | np.generic):
        dt = obj.dtype
        if not dt.isnative:
            obj = obj.astype(dt.newbyteorder("="))  # openpi's peers read native byte order
        if obj.dtype.str not in _DTYPES:
            raise TypeError(f"cannot send {'arrays' if isinstance(obj, np.ndarray) else 'scalars'} of dtype {dt} "
                            f"(accepted: {', '.join(sorted(_DTYPES))})")
    if isinstance(obj, np.ndarray):  # tobytes() is C order; (ascontiguousarray would make a 0-d array 1-d)
        return {_ARRAY: True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return {_GENERIC: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot send {type(obj).__name__}")


def packb(obj) -> bytes:
    """Encode `obj` as openpi's client does; numpy arrays and scalars of the accepted dtypes only."""
    return msgpack.packb(obj, default=_encode, use_bin_type=True)


def _where(path: tuple) -> str:
    """A field path for error messages: `images/cam_high`, `language[0]/text`; `message` for the whole message."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("/" if out else "") + (part if len(part) <= 40 else part[:40] + "...")
    return out or "message"


def _show(value) -> str:
    """A client's value for an error message, clipped; containers and arrays by type only (their text is unbounded)."""
    if value is None or type(value) in (bool, int, float, str, bytes):
        text = repr(value)
        return text if len(text) <= 40 else text[:40] + "..."
    return type(value).__name__


def _scalar_error(e: ValueError, path: tuple) -> WireError:
    """msgpack's error for a string or bytes it refused (over its length limit, not UTF-8), with the field's path."""
    if isinstance(e, WireError):
        return e
    if isinstance(e, UnicodeDecodeError):
        return WireError(f"{_where(path)}: a string that is not UTF-8")
    if "exceeds max_" in str(e):  # "N exceeds max_str_len(M)", checked by msgpack from the header
        return WireError(f"{_where(path)}: {str(e)[:100]}, over the decoding limit")
    return WireError(f"{_where(path)}: not a msgpack message: {type(e).__name__}: {str(e)[:100]}")


def _ext(code, data):
    raise WireError(f"msgpack extension type {code} is not accepted")


class _Walk:
    """One message's decoder: a depth-first walk over msgpack's `Unpacker` that charges each element to a budget
    before reading it. Hot loops use bound methods held in locals: the walk's cost per object is what bounds a message."""

    def __init__(self, data: bytes, limits: Limits):
        self.data, self.limits = data, limits
        self.objects, self.containers = limits.max_objects, limits.max_containers
        unpacker = msgpack.Unpacker(
            raw=False, strict_map_key=True, ext_hook=_ext, max_buffer_size=max(len(data), 1),
            max_str_len=len(data) if limits.max_str_len is None else limits.max_str_len, max_bin_len=len(data),
            max_array_len=limits.max_array_len, max_map_len=limits.max_map_len, max_ext_len=0,
        )
        unpacker.feed(data)
        self.tell, self.unpack = unpacker.tell, unpacker.unpack
        self.read_map, self.read_list = unpacker.read_map_header, unpacker.read_array_header

    def message(self):
        kind = _KIND[self.data[0]]  # IndexError on an empty message: unpackb reports it as truncated
        value = self.unpack() if kind == _SCALAR else self.container(kind, (), 1)
        if self.tell() != len(self.data):
            raise WireError(f"{len(self.data) - self.tell()} bytes of extra data after the message")
        return value

    def container(self, kind: int, path: tuple, depth: int):
        """The map or array starting at the current position (`kind` from its first byte), charged before it is read."""
        if kind == _EXT:
            raise WireError(f"{_where(path)}: msgpack extension types are not accepted")
        if depth > self.limits.max_depth:
            raise WireError(f"{_where(path)}: nesting deeper than the limit of {self.limits.max_depth}")
        self.containers -= 1
        if self.containers < 0:
            raise WireError(f"{_where(path)}: more than {self.limits.max_containers} maps and arrays in one message")
        if kind == _MAP:
            n = self.read_map()
            if n > self.limits.max_map_len:
                raise WireError(f"{_where(path)}: map of {n} entries, over the limit of {self.limits.max_map_len}")
            self._charge(2 * n, path)
            return self._map(n, path, depth)
        n = self.read_list()
        if n > self.limits.max_array_len:
            raise WireError(f"{_where(path)}: array of {n} elements, over the limit of {self.limits.max_array_len}")
        self._charge(n, path)
        data, tell, unpack, container = self.data, self.tell, self.unpack, self.container
        depth += 1
        try:
            return [
                unpack() if _KIND[data[tell()]] == _SCALAR else container(_KIND[data[tell()]], (*path, i), depth)
                for i in range(n)
            ]
        except ValueError as e:
            raise _scalar_error(e, path) from None

    def _charge(self, n: int, path: tuple) -> None:
        self.objects -= n
        if self.objects < 0:
            raise WireError(f"{_where(path)}: more than {self.limits.max_objects} msgpack objects in one message")

    def _map(self, n: int, path: tuple, depth: int):
        data, tell, unpack, container = self.data, self.tell, self.unpack, self.container
        out, n_bytes, depth = {}, 0, depth + 1
        for _ in range(n):
            if _KIND[data[tell()]] != _SCALAR:
                raise WireError(f"{_where(path)}: map keys must be strings, got a map, array or extension")
            key = unpack()
            if type(key) is bytes:
                n_bytes += 1
                kind = _KIND[data[tell()]]
                out[key] = unpack() if kind == _SCALAR else container(kind, path, depth)
            elif type(key) is str:
                kind = _KIND[data[tell()]]
                try:
                    out[key] = unpack() if kind == _SCALAR else container(kind, (*path, key), depth)
                except ValueError as e:
                    raise _scalar_error(e, (*path, key)) from None
            else:
                raise WireError(f"{_where(path)}: map keys must be strings, got {_show(key)}")
        if not n_bytes:
            return out
        if n_bytes != n or not (_ARRAY in out or _GENERIC in out):
            raise WireError(f"{_where(path)}: map keys must be strings (bytes keys only in a numpy array's map)")
        return _array(out, path, len(data), self.limits) if _ARRAY in out else _scalar(out, path)


def _dtype(raw, path: tuple) -> tuple[np.dtype, int | float, int | float]:
    """An accepted dtype by its `dtype.str` spelling (never parsed by numpy: it accepts far more), with its bounds."""
    name = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    found = _DTYPES.get(name) if isinstance(name, str) else None
    if found is None:
        raise WireError(f"{_where(path)}: dtype {_show(raw)} is not accepted "
                        f"(expected one of {', '.join(sorted(_DTYPES))})")
    return found


def _array(obj: dict, path: tuple, message_bytes: int, limits: Limits) -> np.ndarray:
    """An `__ndarray__` map as a read-only numpy array, after checking its shape against its data, cheaply."""
    if obj.keys() != _ARRAY_KEYS or obj[_ARRAY] is not True:
        keys = sorted(k.decode() for k in _ARRAY_KEYS)
        raise WireError(f"{_where(path)}: an array's map must have exactly the keys {keys}, '__ndarray__' True")
    data, shape, dt = obj[b"data"], obj[b"shape"], _dtype(obj[b"dtype"], path)[0]
    if not isinstance(data, bytes):
        raise WireError(f"{_where(path)}: array 'data' must be bytes, got {type(data).__name__}")
    if not isinstance(shape, list):
        raise WireError(f"{_where(path)}: array 'shape' must be a list of ints, got {type(shape).__name__}")
    if len(shape) > limits.max_rank:
        raise WireError(f"{_where(path)}: array rank {len(shape)} over the limit of {limits.max_rank}")
    count, empty = 1, False
    for n in shape:
        if type(n) is not int or n < 0:
            raise WireError(f"{_where(path)}: array 'shape' must be non-negative ints, got {_show(n)}")
        empty = empty or n == 0
        count *= n or 1  # count is at most the message size before each step: never a product of unbounded numbers
        if count > message_bytes:
            raise WireError(f"{_where(path)}: array shape {str(shape)[:120]} has more elements than the message has "
                            "bytes")
    needed = 0 if empty else count * dt.itemsize
    if needed != len(data):
        raise WireError(f"{_where(path)}: array of shape {tuple(shape)} and dtype {dt} needs {needed} bytes, "
                        f"got {len(data)}")
    if dt.kind == "b" and data.translate(None, b"\x00\x01"):
        raise WireError(f"{_where(path)}: a bool array's bytes must be 0 or 1")
    return np.frombuffer(data, dtype=dt).reshape(shape)


def _scalar(obj: dict, path: tuple) -> np.generic:
    """An `__npgeneric__` map as a numpy scalar; its value must fit its dtype (no silent overflow or wrap)."""
    if obj.keys() != _GENERIC_KEYS or obj[_GENERIC] is not True:
        keys = sorted(k.decode() for k in _GENERIC_KEYS)
        raise WireError(f"{_where(path)}: a scalar's map must have exactly the keys {keys}, '__npgeneric__' True")
    (dt, low, high), value = _dtype(obj[b"dtype"], path), obj[b"data"]
    if dt.kind == "b":
        ok = type(value) is bool
    elif dt.kind in "iu":
        ok = type(value) is int and low <= value <= high
    else:  # inf and nan pass: openpi sends them, and the observation checks refuse them where they matter
        ok = (type(value) is float or type(value) is int) and not abs(value) > high
    if not ok:
        raise WireError(f"{_where(path)}: scalar {_show(value)} is not a valid {dt}")
    return dt.type(value)


def unpackb(data: bytes, max_bytes: int | None = None, *, limits: Limits = DEFAULT_LIMITS):
    """Decode one message. Raises WireError (never anything else) for input that is not openpi msgpack or is over
    `max_bytes` or `limits`; the work done is bounded by `limits` whatever the message holds."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise WireError(f"expected a binary msgpack message, got {type(data).__name__}")
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if max_bytes is not None and size > max_bytes:
        raise WireError(f"message of {size} bytes exceeds the limit of {max_bytes}")
    data = data if isinstance(data, bytes) else bytes(data)
    try:
        return _Walk(data, limits).message()
    except WireError:
        raise
    except (IndexError, msgpack.OutOfData):
        raise WireError("the message ends early (truncated)") from None
    except UnicodeDecodeError:
        raise WireError("message: a string that is not UTF-8") from None
    except ValueError as e:
        if "exceeds max_" in str(e):  # msgpack's own length limits, checked from the header
            raise WireError(f"message: {str(e)[:100]}, over the decoding limit") from None
        raise WireError(f"not a msgpack message: {type(e).__name__}: {str(e)[:120]}") from None
    except Exception as e:  # noqa: BLE001 - msgpack raises many types for garbage input
        raise WireError(f"not a msgpack message: {type(e).__name__}: {str(e)[:120]}") from None
