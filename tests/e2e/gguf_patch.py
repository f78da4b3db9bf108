#!/usr/bin/env python3
"""Make a broken copy of a GGUF file for the CLI tests (a tool, not a test).

    gguf_patch.py IN OUT arch NEWNAME          replace general.architecture's value (same length)
    gguf_patch.py IN OUT type TENSOR TYPEID    change one tensor's type id in the tensor table
    gguf_patch.py IN OUT drop TENSOR           rename a tensor so the model lacks it
"""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(b, off, t):
    if t in SIZES:
        return off + SIZES[t]
    if t == 8:
        (n,) = struct.unpack_from("<Q", b, off)
        return off + 8 + n
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, off)
        off += 12
        for _ in range(n):
            off = skip_value(b, off, et)
        return off
    raise ValueError(f"bad value type {t}")


def main():
    src, dst, what = sys.argv[1], sys.argv[2], sys.argv[3]
    b = bytearray(open(src, "rb").read())
    _, _, n_t, n_kv = struct.unpack_from("<IIQQ", b, 0)
    off = 24
    for _ in range(n_kv):
        (kl,) = struct.unpack_from("<Q", b, off)
        key = b[off + 8 : off + 8 + kl].decode()
        off += 8 + kl
        (t,) = struct.unpack_from("<I", b, off)
        off += 4
        if what == "arch" and key == "general.architecture":
            (sl,) = struct.unpack_from("<Q", b, off)
            new = sys.argv[4].encode()
            assert len(new) == sl, "the new name must have the old name's length"
            b[off + 8 : off + 8 + sl] = new
        off = skip_value(b, off, t)
    for _ in range(n_t):
        (nl,) = struct.unpack_from("<Q", b, off)
        name = b[off + 8 : off + 8 + nl].decode()
        name_off = off + 8
        off += 8 + nl
        (nd,) = struct.unpack_from("<I", b, off)
        off += 4 + 8 * nd
        if what == "type" and name == sys.argv[4]:
            struct.pack_into("<I", b, off, int(sys.argv[5]))
        if what == "drop" and name == sys.argv[4]:
            b[name_off] = ord("X")
        off += 4 + 8
    open(dst, "wb").write(b)


main()
