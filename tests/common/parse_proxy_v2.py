"""An independent, strict PROXY protocol v2 parser for tests/foreign/handoff_interop.rs.

Reads what a target received (header then payload) on stdin and prints one
JSON object naming every field. Written from the spec
(https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt) with
`struct` only, so the sidecar's encoder (the `ppp` crate) is not checked
against itself. Strict: a length that does not add up, a TLV or sub-TLV
overrunning its container, or a repeated TLV is an error (exit 1).

With `--docs FILE`, also runs the first ```python block of FILE (the
example in docs/proxy-protocol.md) on the same bytes through a socket pair
and prints what its `read_proxy_v2` returned under "docs".
"""

import json
import socket
import struct
import sys

SIG = b"\r\n\r\n\x00\r\nQUIT\n"
# TCP over IPv4 and over IPv6: the address family and the size of one address.
ADDRESSES = {0x11: (socket.AF_INET, 4), 0x21: (socket.AF_INET6, 16)}
SSL_SUB = {0x21: "version", 0x22: "cn", 0x23: "cipher", 0x24: "sig_alg", 0x25: "key_alg"}


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def tlvs(buf, what):
    """Splits buf into (type, value) pairs; every byte must belong to one."""
    out = []
    off = 0
    while off < len(buf):
        if len(buf) - off < 3:
            fail(f"{what}: {len(buf) - off} trailing bytes, short of a TLV header")
        kind = buf[off]
        (length,) = struct.unpack_from("!H", buf, off + 1)
        if off + 3 + length > len(buf):
            fail(f"{what}: TLV 0x{kind:02x} of {length} bytes overruns its container")
        out.append((kind, buf[off + 3 : off + 3 + length]))
        off += 3 + length
    kinds = [k for k, _ in out]
    if len(set(kinds)) != len(kinds):
        fail(f"{what}: repeated TLV types {kinds}")
    return out


def parse(data):
    if len(data) < 16:
        fail(f"{len(data)} bytes: shorter than the fixed part")
    if data[:12] != SIG:
        fail(f"bad signature {data[:12]!r}")
    ver_cmd, fam, length = struct.unpack_from("!BBH", data, 12)
    if 16 + length > len(data):
        fail(f"header length {length} overruns the {len(data)} bytes received")
    body = data[16 : 16 + length]
    info = {
        "version": ver_cmd >> 4,
        "command": {0: "LOCAL", 1: "PROXY"}.get(ver_cmd & 0x0F, ver_cmd & 0x0F),
        "family": fam >> 4,
        "transport": fam & 0x0F,
        "header_len": 16 + length,
        "payload": data[16 + length :].decode("latin-1"),
    }
    if fam in ADDRESSES:
        af, size = ADDRESSES[fam]
        if length < 2 * size + 4:
            fail(f"address block of family 0x{fam:02x} truncated")
        src, dst, sport, dport = struct.unpack_from(f"!{size}s{size}sHH", body)
        shown = "{}:{}" if af == socket.AF_INET else "[{}]:{}"
        info["src"] = shown.format(socket.inet_ntop(af, src), sport)
        info["dst"] = shown.format(socket.inet_ntop(af, dst), dport)
        rest = body[2 * size + 4 :]
    elif fam == 0x00:
        rest = body
    else:
        fail(f"unexpected family/transport 0x{fam:02x}")
    info["tlv_types"] = []
    for kind, value in tlvs(rest, "header"):
        info["tlv_types"].append(kind)
        if kind == 0x20:
            if len(value) < 5:
                fail("PP2_TYPE_SSL shorter than client + verify")
            client, verify = struct.unpack_from("!BI", value)
            ssl = {"client": client, "verify": verify, "sub_types": []}
            for sub, sval in tlvs(value[5:], "PP2_TYPE_SSL"):
                ssl["sub_types"].append(sub)
                ssl[SSL_SUB.get(sub, f"0x{sub:02x}")] = sval.decode("utf-8")
            info["ssl"] = ssl
        else:
            name = {0x01: "alpn", 0x02: "authority", 0x05: "unique_id", 0xE0: "matched", 0xE1: "sans"}
            info[name.get(kind, f"0x{kind:02x}")] = value.decode("utf-8")
    return info


def docs_example(path, data):
    text = open(path, encoding="utf-8").read()
    start = text.index("```python\n") + len("```python\n")
    code = text[start : text.index("```", start)]
    scope = {}
    exec(compile(code, path, "exec"), scope)
    a, b = socket.socketpair()
    a.sendall(data)
    a.close()
    got = scope["read_proxy_v2"](b)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in got.items()}


def main():
    data = sys.stdin.buffer.read()
    info = parse(data)
    if len(sys.argv) == 3 and sys.argv[1] == "--docs":
        info["docs"] = docs_example(sys.argv[2], data)
    print(json.dumps(info))


main()
