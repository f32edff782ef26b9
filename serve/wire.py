"""openpi's wire format: msgpack with numpy arrays as maps of bytes keys (`__ndarray__`, `data`, `dtype`, `shape`) and
numpy scalars as (`__npgeneric__`, `data`, `dtype`). This is what `openpi_client.msgpack_numpy` packs and unpacks
(openpi: packages/openpi-client/src/openpi_client/msgpack_numpy.py); written here from the format, and strict on
input: a malformed array names its field instead of crashing the connection.
"""
from __future__ import annotations

import math

import msgpack
import numpy as np

_ARRAY, _GENERIC = b"__ndarray__", b"__npgeneric__"
_REFUSED_KINDS = ("O", "V", "c")  # objects (pickle), structured/void, complex: never accepted, never sent


class WireError(ValueError):
    """A message that is not valid openpi msgpack."""


def _encode(obj):
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in _REFUSED_KINDS:
            raise TypeError(f"cannot send arrays of dtype {obj.dtype}")
        arr = np.ascontiguousarray(obj)
        return {_ARRAY: True, b"data": arr.tobytes(), b"dtype": arr.dtype.str, b"shape": list(arr.shape)}
    if isinstance(obj, np.generic):
        if obj.dtype.kind in _REFUSED_KINDS:
            raise TypeError(f"cannot send scalars of dtype {obj.dtype}")
        return {_GENERIC: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot send {type(obj).__name__}")


def packb(obj) -> bytes:
    return msgpack.packb(obj, default=_encode, use_bin_type=True)


def _dtype(raw) -> np.dtype:
    try:
        dt = np.dtype(raw.decode() if isinstance(raw, bytes) else raw)
    except (TypeError, ValueError, UnicodeDecodeError):
        raise WireError(f"array dtype {raw!r} is not a numpy dtype") from None
    if dt.kind in _REFUSED_KINDS:
        raise WireError(f"array dtype {dt} is not accepted (object, void and complex arrays are refused)")
    return dt


def _decode(obj: dict):
    if _ARRAY in obj:
        data, shape = obj.get(b"data"), obj.get(b"shape")
        dt = _dtype(obj.get(b"dtype"))
        if not isinstance(data, bytes):
            raise WireError("array 'data' must be bytes")
        if not isinstance(shape, list | tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise WireError(f"array 'shape' must be a list of non-negative ints, got {shape!r}")
        if math.prod(shape) * dt.itemsize != len(data):
            raise WireError(f"array of shape {tuple(shape)} and dtype {dt} needs {math.prod(shape) * dt.itemsize} bytes, got {len(data)}")
        return np.frombuffer(data, dtype=dt).reshape(shape)
    if _GENERIC in obj:
        dt = _dtype(obj.get(b"dtype"))
        try:
            return dt.type(obj.get(b"data"))
        except (TypeError, ValueError, OverflowError):
            raise WireError(f"scalar {obj.get(b'data')!r} is not a valid {dt}") from None
    return obj


def unpackb(data: bytes, max_bytes: int | None = None):
    """Decode one message. Raises WireError (never anything else) for input that is not openpi msgpack."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise WireError(f"expected a binary msgpack message, got {type(data).__name__}")
    if max_bytes is not None and len(data) > max_bytes:
        raise WireError(f"message of {len(data)} bytes exceeds the limit of {max_bytes}")
    try:
        return msgpack.unpackb(data, object_hook=_decode, raw=False, strict_map_key=False)
    except WireError:
        raise
    except Exception as e:  # noqa: BLE001 - msgpack raises many types for garbage input
        raise WireError(f"not a msgpack message: {type(e).__name__}: {e}") from None
