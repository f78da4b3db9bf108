#!/usr/bin/env python3
"""Make a broken copy of a GGUF file for the CLI tests (a tool, not a test).

    gguf_patch.py IN OUT arch NEWNAME          replace general.architecture's value (same length)
    gguf_patch.py IN OUT str KEY NEWVALUE      replace string KEY's value (same length)
    gguf_patch.py IN OUT type TENSOR TYPEID    change one tensor's type id in the tensor table
    gguf_patch.py IN OUT drop TENSOR           rename a tensor so the model lacks it
    gguf_patch.py IN OUT template FILE         set tokenizer.chat_template to FILE's text
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


def set_template(b, text):
    """b with tokenizer.chat_template set (replaced or added); tensor data realigned."""
    _, _, n_t, n_kv = struct.unpack_from("<IIQQ", b, 0)
    off, kvs, align = 24, [], 32
    for _ in range(n_kv):
        start = off
        (kl,) = struct.unpack_from("<Q", b, off)
        key = b[off + 8 : off + 8 + kl].decode()
        off += 8 + kl
        (t,) = struct.unpack_from("<I", b, off)
        if key == "general.alignment":
            (align,) = struct.unpack_from("<I", b, off + 4)
        off = skip_value(b, off + 4, t)
        if key != "tokenizer.chat_template":
            kvs.append(bytes(b[start:off]))
    infos_start = off
    for _ in range(n_t):
        (nl,) = struct.unpack_from("<Q", b, off)
        off += 8 + nl
        (nd,) = struct.unpack_from("<I", b, off)
        off += 4 + 8 * nd + 4 + 8
    infos = bytes(b[infos_start:off])
    data = bytes(b[(off + align - 1) // align * align :])
    key, val = b"tokenizer.chat_template", text.encode()
    kvs.append(struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(val)) + val)
    head = struct.pack("<IIQQ", *struct.unpack_from("<II", b, 0), n_t, len(kvs)) + b"".join(kvs) + infos
    return head + b"\0" * ((-len(head)) % align) + data


def main():
    src, dst, what = sys.argv[1], sys.argv[2], sys.argv[3]
    b = bytearray(open(src, "rb").read())
    if what == "template":
        open(dst, "wb").write(set_template(b, open(sys.argv[4], encoding="utf-8").read()))
        return
    _, _, n_t, n_kv = struct.unpack_from("<IIQQ", b, 0)
    off = 24
    for _ in range(n_kv):
        (kl,) = struct.unpack_from("<Q", b, off)
        key = b[off + 8 : off + 8 + kl].decode()
        off += 8 + kl
        (t,) = struct.unpack_from("<I", b, off)
        off += 4
        if (what == "arch" and key == "general.architecture") or (what == "str" and key == sys.argv[4]):
            (sl,) = struct.unpack_from("<Q", b, off)
            new = sys.argv[4 if what == "arch" else 5].encode()
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
