"""Writing files atomically, and safetensors without the safetensors package."""

import json
import os
import struct


def write_atomically(path, data):
    """Writes to a unique temporary name next to `path`, then renames it into place."""
    temporary = f"{path}.{os.getpid()}.tmp"
    mode = "wb" if isinstance(data, bytes) else "w"
    try:
        with open(temporary, mode) as handle:
            handle.write(data)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


SAFETENSORS_DTYPES = {
    "float16": "F16", "float32": "F32", "float64": "F64", "int8": "I8", "int16": "I16", "int32": "I32",
    "int64": "I64", "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL",
}


def safetensors_bytes(named_arrays):
    """Arrays as a safetensors file: 8-byte header length, JSON header, data."""
    import numpy as np

    header, chunks, offset = {}, [], 0
    for name, array in named_arrays:
        # (`np.ascontiguousarray` alone would make a 0-d array 1-d: a ReLU6's bounds.)
        array = np.ascontiguousarray(array).reshape(np.shape(array))
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[str(array.dtype)],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks)


def write_safetensors(path, named_arrays):
    write_atomically(path, safetensors_bytes(named_arrays))


def read_safetensors(path):
    """A safetensors file's arrays by name (of the dtypes SAFETENSORS_DTYPES lists).

    Raises ValueError for a file that is not one."""
    import numpy as np

    dtypes = {code: np.dtype(name).newbyteorder("<") for name, code in SAFETENSORS_DTYPES.items()}
    with open(path, "rb") as handle:
        data = handle.read()
    if len(data) < 8:
        raise ValueError("the file is shorter than a safetensors header")
    (length,) = struct.unpack("<Q", data[:8])
    if 8 + length > len(data):
        raise ValueError(f"the header claims {length} bytes, more than the file holds")
    header = json.loads(data[8 : 8 + length])
    body = data[8 + length :]
    arrays = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in dtypes:
            raise ValueError(f"tensor `{name}` has dtype {entry['dtype']}, which is not supported here")
        start, end = entry["data_offsets"]
        dtype = dtypes[entry["dtype"]]
        count = int(np.prod(entry["shape"], dtype=np.int64))
        if not 0 <= start <= end <= len(body) or end - start != count * dtype.itemsize:
            raise ValueError(f"tensor `{name}` has data offsets {start}..{end} that do not fit its shape")
        arrays[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(entry["shape"]).astype(dtype.newbyteorder("="))
    return arrays
