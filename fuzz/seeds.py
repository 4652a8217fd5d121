#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into seeds/TARGET/seed-*.

The seeds are committed (the grown corpora are not), so this only needs running again
when a target's input format changes. The credential seeds are minted with
the sidecar's own development PKI (`certs ca|issue|revoke`, the binary given
as MTLS_SIDECAR_BIN or target/debug/mtls-sidecar) and openssl (RSA and
Ed25519 keys); the framing is that of src/frames.rs: [tag][u16 len][bytes],
the tag's low bits the file (0 cert, 1 key, 2 CA, 3 CRL; 0x40 the
intermediates file, numbered 4 here), 0x80 raw, else a
PEM block labelled by bits 2-4 (0 CERTIFICATE, 1 PRIVATE KEY, 2 EC PRIVATE
KEY, 3 RSA PRIVATE KEY, 4 X509 CRL).
"""

import base64
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
BIN = os.environ.get("MTLS_SIDECAR_BIN", str(HERE.parent / "target/debug/mtls-sidecar"))


def write(target, name, data):
    d = HERE / "seeds" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / f"seed-{name}").write_bytes(data if isinstance(data, bytes) else data.encode())


def der_blocks(pem):
    """The DER of every PEM block in a file, with its label."""
    out, label, lines = [], None, []
    for line in pem.decode().splitlines():
        if line.startswith("-----BEGIN "):
            label, lines = line[11:-5], []
        elif line.startswith("-----END "):
            out.append((label, base64.b64decode("".join(lines))))
            label = None
        elif label is not None:
            lines.append(line)
    return out


LABELS = {"CERTIFICATE": 0, "PRIVATE KEY": 1, "EC PRIVATE KEY": 2, "RSA PRIVATE KEY": 3, "X509 CRL": 4}


def record(file, data, label=None):
    tag = (0x40 if file == 4 else file) | (0x80 if label is None else LABELS[label] << 2)
    return bytes([tag]) + struct.pack("!H", len(data)) + data


def wrapped(file, pem):
    return b"".join(record(file, der, label) for label, der in der_blocks(pem))


def run(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def credentials():
    with tempfile.TemporaryDirectory() as t:
        t = pathlib.Path(t)
        run(BIN, "certs", "ca", "--out", str(t / "ca"))
        run(BIN, "certs", "issue", "--ca", str(t / "ca"), "--out", str(t / "leaf"),
            "--dns", "replica-0.env-1.svc", "--uri", "spiffe://td/ns/a/sa/b", "--role", "both")
        run(BIN, "certs", "revoke", "--ca", str(t / "ca"), "--cert", str(t / "leaf/tls.crt"),
            "--out", str(t / "ca.crl"))
        read = lambda p: (t / p).read_bytes()
        cert, key, ca, crl = read("leaf/tls.crt"), read("leaf/tls.key"), read("leaf/ca.crt"), read("ca.crl")
        write("credentials", "dev-pki", wrapped(0, cert) + wrapped(1, key) + wrapped(2, ca))
        write("credentials", "dev-pki-crl",
              wrapped(0, cert) + wrapped(1, key) + wrapped(2, ca) + wrapped(3, crl))
        write("credentials", "raw-pem",
              record(0, cert) + record(1, key) + record(2, ca) + record(3, crl))
        crl_der = der_blocks(crl)[0][1]
        write("credentials", "crl-der", wrapped(0, cert) + wrapped(1, key) + wrapped(2, ca)
              + record(3, crl_der))
        for kind, args in [
            ("rsa", ["-newkey", "rsa:2048", "-traditional"]),
            ("ed25519", ["-newkey", "ed25519"]),
            ("p384", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"]),
        ]:
            args = [a for a in args if a != "-traditional"]
            run("openssl", "req", "-x509", *args, "-nodes", "-subj", "/CN=self.svc",
                "-addext", "subjectAltName=DNS:self.svc", "-days", "30",
                "-keyout", str(t / f"{kind}.key"), "-out", str(t / f"{kind}.crt"))
            k, c = read(f"{kind}.key"), read(f"{kind}.crt")
            if kind == "rsa":
                run("openssl", "rsa", "-in", str(t / "rsa.key"), "-traditional",
                    "-out", str(t / "rsa1.key"))
                k = read("rsa1.key")
            write("credentials", f"self-signed-{kind}", wrapped(0, c) + wrapped(1, k) + wrapped(2, c))
        write("credentials", "key-mismatch",
              wrapped(0, cert) + wrapped(1, read("p384.key")) + wrapped(2, ca))
        write("credentials", "empty", b"")
        return der_blocks(cert)[0][1], der_blocks(read("rsa.crt"))[0][1]


def intermediate():
    """A peer's chain through an intermediate CA (as docs/recipes/
    intermediate.sh builds it), the intermediates file, and a CRL the
    intermediate signed."""
    with tempfile.TemporaryDirectory() as t:
        t = pathlib.Path(t)
        run(BIN, "certs", "ca", "--out", str(t / "root"))
        (t / "inter").mkdir()
        run("openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-keyout", str(t / "inter/ca.key"), "-subj", "/CN=Fuzz Intermediate CA",
            "-out", str(t / "inter/csr.pem"))
        (t / "inter/ext.cnf").write_text("basicConstraints=critical,CA:TRUE,pathlen:0\n"
                                         "keyUsage=critical,keyCertSign,cRLSign\n"
                                         "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
        run("openssl", "x509", "-req", "-in", str(t / "inter/csr.pem"), "-CA", str(t / "root/ca.crt"),
            "-CAkey", str(t / "root/ca.key"), "-set_serial", "0x1234", "-days", "3650",
            "-extfile", str(t / "inter/ext.cnf"), "-out", str(t / "inter/ca.crt"))
        run(BIN, "certs", "issue", "--ca", str(t / "inter"), "--out", str(t / "leaf"),
            "--dns", "controller.env-1.svc", "--role", "both")
        run(BIN, "certs", "revoke", "--ca", str(t / "inter"), "--cert", str(t / "leaf/tls.crt"),
            "--out", str(t / "inter.crl"))
        read = lambda p: (t / p).read_bytes()
        leaf, key, root, inter, crl = (read("leaf/tls.crt"), read("leaf/tls.key"), read("root/ca.crt"),
                                       read("inter/ca.crt"), read("inter.crl"))
        write("credentials", "intermediate",
              wrapped(0, leaf + inter) + wrapped(1, key) + wrapped(2, root) + wrapped(4, inter)
              + wrapped(3, crl))
        write("credentials", "intermediate-file-only",
              wrapped(0, leaf) + wrapped(1, key) + wrapped(2, root) + wrapped(4, inter))


def config():
    for p in ["deploy/sidecar.toml", "deploy/kubernetes/controller-sidecar.toml",
              "deploy/kubernetes/transparent/controller-sidecar.toml"]:
        write("config", p.replace("/", "-"), (HERE.parent / p).read_text())
    write("config", "minimal", 'tls_dir = "/x"\n[[route]]\nmode = "server"\n'
          'listen = "127.0.0.1:1"\ntarget = "127.0.0.1:2"\nallow_any_san = true\n')
    write("config", "limits", 'cert = "/c"\nkey = "/k"\nca = "/a"\ncrl = "/l"\n'
          'trust_grace = "24h"\nreload_interval = "1h"\ndrain_timeout = "0s"\n'
          'worker_threads = 1024\nmark = 4294967295\ncrl_scope = "chain"\nsandbox = "off"\n'
          '[[route]]\nname = "in"\nmode = "server"\nlisten = "unix:/run/x.sock"\n'
          'target = "127.0.0.1:2"\nallow_san = ["*.env-1.svc", "spiffe://td/ns/*/sa/**"]\n'
          'handshake_timeout = "1h"\nconnect_timeout = "1ms"\nmax_connections = 1000000\n'
          'max_handshakes = 1\nmax_connection_lifetime = "365days"\ntls_min_version = "1.2"\n'
          'alpn = ["h2", "postgresql"]\nallow_spki_sha256 = ["' + "A" * 43 + '="]\n'
          'proxy_protocol = "v2"\nexclusive = true\n')


    write("config", "intermediates", 'cert = "/c"\nkey = "/k"\nca = "/a"\ncrl = "/l"\n'
          'intermediates = "/i"\n[[route]]\nmode = "client"\nlisten = "127.0.0.1:1"\n'
          'target = "replica-0.env-1.svc:2"\nallow_san = ["replica-0.env-1.svc"]\n')


def san():
    for name, text in [
        ("dns", "Controller.env-1.svc\ndcontroller.ENV-1.svc\ndother.svc"),
        ("wildcard", "*.env-1.svc\ndreplica-0.env-1.svc\n=x\n=a.b\ndenv-1.svc"),
        ("spiffe", "spiffe://td/ns/*/sa/**\nspiffe://TD/ns/a/sa/b/c\n=x\n=%2F\nspiffe://td/ns/a/sa"),
        ("uri", "https://Host.example:8443/a%2Fb/*\nhttps://host.example:8443/a%2Fb/c\n=%41\n=.."),
        ("ip-literal", "tcp://[::1]:80/x\ntcp://[::1]:80/x\ntcp://[::1]/x"),
        ("refused", "spiffe://td:80/a\n=x"),
    ]:
        write("san_patterns", name, text)


def proxy_protocol(cert_der, rsa_der):
    s = lambda b: bytes([len(b)]) + b
    l = lambda b: struct.pack("!H", len(b)) + b
    v4 = bytes([1]) + bytes([10, 0, 0, 7]) + struct.pack("!H", 51144) + bytes([10, 0, 0, 2]) + struct.pack("!H", 6877)
    full = (v4 + bytes([1]) + bytes([1, 0]) + bytes([1]) + s(b"postgresql") + bytes([1]) + l(b"replica-0.env-1.svc")
            + s(b"42") + bytes([1]) + l(cert_der) + bytes([1]) + l(rsa_der) + bytes([1]) + l(b"controller.env-1.svc")
            + bytes([2]) + l(b"controller.env-1.svc") + l(b"spiffe://td/c"))
    write("proxy_protocol", "full", full)
    v6 = bytes([2]) + bytes([1] + [0] * 15) + b"\x00\x01" + bytes([0] * 15 + [1]) + b"\x00\x02"
    write("proxy_protocol", "mapped-v6", v6 + bytes([2, 1, 3]) + b"\x13\x02")
    write("proxy_protocol", "local", bytes([0, 0, 0, 0, 0]) + s(b"1") + bytes([0, 0, 0, 3]) + l(b"a\nb") + l(b"") + l(b"c"))
    write("proxy_protocol", "mixed", bytes([3]) + bytes(30))


def admin_http():
    for name, text in [
        ("metrics", "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("pipelined", "GET /livez HTTP/1.1\r\n\r\nHEAD /readyz HTTP/1.1\r\n\r\nGET /status?x=1 HTTP/1.1\r\n\r\n"),
        ("not-found", "GET /nope/%2e%2e HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("method", "DELETE /metrics HTTP/1.1\r\n\r\nPOST /livez HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"),
        ("chunked", "PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
        ("http10", "GET /livez HTTP/1.0\r\n\r\n"),
        ("absolute", "GET http://h/livez HTTP/1.1\r\n\r\n"),
        ("garbage", "\x00\x01GET\r\n\r\n"),
    ]:
        write("admin_http", name, text)


def publish_args():
    for name, text in [
        ("names", "0640\ntls.crt=/etc/x/tls.crt\nca.crt\n/dir/tls.key\nextra=a=b"),
        ("paths", "0o600\ndir/x=y\ndir/\n..data=x\n.hidden=/h\nx=\n=y"),
        ("modes", "+640\n.\n..\n./.\nname=../../x"),
    ]:
        write("publish_args", name, text)


PIN = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="


def deny():
    for name, text in [
        ("doc", f"# INC-42\nspki-sha256:{PIN}\nserial:{PIN}:5D:4E:01:A3\n"
                "san:Controller-7.ENV-1.svc   # the workload\nsan:spiffe://td/ns/prod/sa/c7\n"),
        ("spellings", "spki-sha256:47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU\r\n"
                      f"serial:{PIN}:00:00\n\tserial:{PIN}:{'f' * 40}\n"),
        ("bad", f"serial:{PIN}:0x12\nsan:caf\u00e9.svc\nsan:a b\n"),
    ]:
        write("deny", name, text)


def http_identity(cert_der):
    write("http_identity", "names", b"\x00X_Forwarded-Client_CERT")
    write("http_identity", "value", b"\x01bspiffe://td/ns/a\ns a,b+c\ns#x \ns\"q\\\\\n"
          b"uspiffe://td/x;y=z\ndplain.example\ndbad\"\r name%\n")
    write("http_identity", "cert", b"\x02" + cert_der)
    for name, stream in [
        ("pipeline", b"\r\nPOST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nGET /\r\n"
                     b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nGET\r\n0\r\nT: v\r\n\r\n"
                     b"GET /c HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
        ("upgrade", b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET / HTTP/1.1\r\n\r\n"),
        ("lengths", b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"),
        ("codings", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"
                    b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\nA ;e\r\n0123456789\r\n0\r\n\r\n"),
    ]:
        write("http_identity", name, b"\x03\x2a\x40" + stream)


def pb_field(num, data):
    """A length-delimited protobuf field (wire type 2)."""
    def varint(n):
        out = b""
        while True:
            b, n = n & 0x7F, n >> 7
            out += bytes([b | (0x80 if n else 0)])
            if not n:
                return out
    return varint(num << 3 | 2) + varint(len(data)) + data


def pb_svid(spiffe_id, chain, key, bundle, hint=""):
    """An X509SVID message (workload.proto)."""
    out = pb_field(1, spiffe_id.encode()) + pb_field(2, chain) + pb_field(3, key) + pb_field(4, bundle)
    return out + (pb_field(5, hint.encode()) if hint else b"")


def workload_api():
    """X509SVIDResponse messages as the agent sends them, minted with the
    sidecar's development PKI."""
    with tempfile.TemporaryDirectory() as t:
        t = pathlib.Path(t)
        run(BIN, "certs", "ca", "--out", str(t / "ca"))
        run(BIN, "certs", "ca", "--out", str(t / "other"))
        for name, uri in [("a", "spiffe://td/ns/a/sa/b"), ("b", "spiffe://td/ns/a/sa/c"),
                          ("o", "spiffe://other.td/w")]:
            run(BIN, "certs", "issue", "--ca", str(t / ("other" if name == "o" else "ca")),
                "--out", str(t / name), "--dns", "replica-0.env-1.svc", "--uri", uri, "--role", "both")
        run(BIN, "certs", "revoke", "--ca", str(t / "ca"), "--cert", str(t / "b/tls.crt"),
            "--out", str(t / "ca.crl"))
        der = lambda p: der_blocks((t / p).read_bytes())[0][1]
        ca, other = der("ca/ca.crt"), der("other/ca.crt")
        a = pb_svid("spiffe://td/ns/a/sa/b", der("a/tls.crt"), der("a/tls.key"), ca)
        b = pb_svid("spiffe://td/ns/a/sa/c", der("b/tls.crt"), der("b/tls.key"), ca, "internal")
        o = pb_svid("spiffe://other.td/w", der("o/tls.crt"), der("o/tls.key"), other)
        fed = lambda td, bundle: pb_field(3, pb_field(1, td.encode()) + pb_field(2, bundle))
        write("workload_api", "one", pb_field(1, a))
        write("workload_api", "two", pb_field(1, a) + pb_field(1, b))
        write("workload_api", "federated", pb_field(1, a) + fed("other.td", other))
        write("workload_api", "own-federated", pb_field(1, a) + fed("td", other) + fed("other.td", ca + other))
        write("workload_api", "crl", pb_field(1, b) + pb_field(2, der("ca.crl")))
        write("workload_api", "two-domains", pb_field(1, o) + pb_field(1, a) + fed("other.td", other))
        write("workload_api", "chain", pb_field(1, pb_svid("spiffe://td/ns/a/sa/b", der("a/tls.crt") + ca,
                                                             der("a/tls.key"), ca + other)))


def check_secret():
    crt, key = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode(), base64.b64encode(b"k").decode()
    for name, text in [
        ("kubectl-yaml", f"apiVersion: v1\ndata:\n  ca.crt: {crt}\n  tls.crt: {crt}\n  tls.key: {key}\n"
                         "kind: Secret\nmetadata:\n  name: mtls\n  namespace: env-1\ntype: kubernetes.io/tls\n"),
        ("kubectl-json", '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"mtls","namespace":"env-1"},'
                         f'"type":"kubernetes.io/tls","data":{{"tls.crt":"{crt}","tls.key":"!!"}},'
                         '"stringData":{"ca.crt":"x"}}'),
        ("list", "apiVersion: v1\nkind: List\nitems:\n- kind: Secret\n  metadata: {name: z}\n"
                 "  data: {tls.crt: \"\"}\n  type: Opaque\n"),
        ("shapes", "kind: Secret\napiVersion: v2\ntype: [a]\ndata: 3\n"),
        ("hostile", "kind: Secret\na: &a [x, x]\nb: [*a, *a]\n---\nkind: Secret\n"),
    ]:
        write("check_secret", name, text)


def tls_records():
    seq = struct.pack("!Q", 7)
    write("tls_records", "open-128", b"\x00" + seq + bytes(range(40)))
    write("tls_records", "open-256-short", b"\x01" + seq + bytes(15))
    write("tls_records", "tamper-128", b"\x02" + seq + b"\x00\x09\x00" + b"GET / HTTP/1.1\r\n\r\n")
    write("tls_records", "tamper-256", b"\x03" + struct.pack("!Q", 2**64 - 1) + b"\x01\x00\x01" + bytes(64))
    write("tls_records", "inner-padded", b"\x04" + seq + b"hello\x17" + bytes(30))
    write("tls_records", "inner-ccs", b"\x05" + seq + b"\x01\x14\x00")
    write("tls_records", "inner-empty", b"\x04" + seq + bytes(4))
    # The record driver after a handshake: steps of [authentic?][len][bytes].
    write("tls_records", "stream-authentic", b"\x08" + seq + b"\x01\x05hello\x01\x00\x01\x03abc")
    # regression-ccs-then-alert and regression-data-then-bad-record, kept
    # by hand, are the driver's findings.



INJECT_ROUTES = {
    "mtls-sidecar.dev/inject": "enabled",
    "mtls-sidecar.dev/server": "8443:8080",
    "mtls-sidecar.dev/allow-san": "client.shop.svc",
    "mtls-sidecar.dev/identity": "secret:web-tls",
}
INJECT_CSI = dict(INJECT_ROUTES, **{
    "mtls-sidecar.dev/identity": "csi:ClusterIssuer/mtls-ca",
    "mtls-sidecar.dev/san": "db.${POD_NAMESPACE}.svc",
})


def admission_review(pod, operation="CREATE", group=""):
    """An AdmissionReview v1 as the API server sends it for a pod."""
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "0df28fbd-5f5f-11e8-b7cc-42010a800002",
                    "kind": {"group": group, "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": "shop", "operation": operation, "object": pod}})


def webhook_review():
    app = {"name": "web", "image": "web:1", "ports": [{"name": "http", "containerPort": 8080}],
           "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}}}
    replica_pod = {"metadata": {"generateName": "web-7d9f-", "annotations": INJECT_ROUTES,
                                "ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d9f",
                                                     "controller": True}]},
                   "spec": {"containers": [app], "volumes": [{"name": "token", "projected": {
                       "sources": [{"serviceAccountToken": {"path": "token"}}]}}]}}
    set_pod = {"metadata": {"name": "db-0", "annotations": INJECT_CSI,
                            "ownerReferences": [{"kind": "StatefulSet", "name": "db", "controller": True}]},
               "spec": {"hostname": "db-0", "subdomain": "db", "containers": [app]}}
    bad = {"metadata": {"generateName": "web-", "annotations": dict(INJECT_ROUTES, **{
        "mtls-sidecar.dev/server": "8443:x"})}, "spec": {"containers": [app]}}
    silent = {"metadata": {"generateName": "web-"}, "spec": {"containers": [app]}}
    write("webhook_review", "replicaset-pod", admission_review(replica_pod))
    write("webhook_review", "statefulset-csi-pod", admission_review(set_pod))
    write("webhook_review", "bad-annotation", admission_review(bad))
    write("webhook_review", "not-opted-in", admission_review(silent))
    write("webhook_review", "update", admission_review(replica_pod, operation="UPDATE"))
    write("webhook_review", "v1beta1", '{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}')


def inject_manifest():
    template = lambda ann: {"metadata": {"labels": {"app": "web"}, "annotations": ann},
                            "spec": {"containers": [{"name": "web", "image": "web:1",
                                                     "livenessProbe": {"tcpSocket": {"port": 8080}}}]}}
    write("inject_manifest", "deployment-yaml", """apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations:
        mtls-sidecar.dev/inject: enabled
        mtls-sidecar.dev/server: "8443:8080"
        mtls-sidecar.dev/allow-san: client.shop.svc
        mtls-sidecar.dev/identity: secret:web-tls
    spec:
      containers:
      - name: web
        image: web:1
        readinessProbe: {httpGet: {path: /healthz, port: 8080}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: other}
data: {a: "on", b: 010, c: ~}
""")
    write("inject_manifest", "statefulset-csi-json", json.dumps(
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
         "spec": {"serviceName": "db", "template": template(INJECT_CSI)}}, indent=1))
    write("inject_manifest", "list-client-config", json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [
            {"kind": "CronJob", "metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": {
                "template": template({"mtls-sidecar.dev/inject": "enabled",
                                      "mtls-sidecar.dev/client": "2100:db.shop.svc:8443",
                                      "mtls-sidecar.dev/expect-san": "db.shop.svc",
                                      "mtls-sidecar.dev/identity": "spiffe"})}}}},
            {"kind": "Pod", "metadata": {"name": "p", "annotations": {
                "mtls-sidecar.dev/inject": "enabled", "mtls-sidecar.dev/config": "configmap:c",
                "mtls-sidecar.dev/identity": "secret:s"}}, "spec": {"containers": []}}]}))
    write("inject_manifest", "anchors-and-bad-annotation", """kind: Pod
metadata:
  name: p
  annotations: &a
    mtls-sidecar.dev/inject: enabled
    mtls-sidecar.dev/server: 6877:2100
spec: {containers: [{name: app, ports: *a}]}
""")


def h2_blocks():
    """The first byte seeds the splits, the second sizes the budget; then
    frames as the target builds them (type, flags, a length byte, the
    payload), each input also read whole as a field block."""

    def frame(ty, flags, payload):
        assert len(payload) < 256
        return bytes([ty, flags, len(payload)]) + payload

    settings = frame(0x4, 0, b"")
    # :method GET, :scheme https, :path /, a literal with an indexed name.
    fields = b"\x82\x87\x84\x41\x09localhost"
    write("h2_blocks", "one-block", b"\x07\x10" + settings + frame(0x1, 0x4 | 0x1, fields))
    write("h2_blocks", "continued", b"\x03\x01" + frame(0x1, 0, fields[:3]) + frame(0x9, 0, fields[3:6]) + frame(0x9, 0x4, fields[6:]))
    # PADDED and PRIORITY: the pad length, priority and padding are no fields.
    write("h2_blocks", "padded-priority", b"\x05\x02" + frame(0x1, 0x8 | 0x20 | 0x4, b"\x03" + bytes(5) + fields + bytes(3)))
    write("h2_blocks", "references", b"\x00\x00" + frame(0x1, 0, b"\x82" * 250) + frame(0x9, 0, b"\x82" * 250) + frame(0x9, 0, b"\x82" * 100))
    write("h2_blocks", "huffman-literal", b"\x09\x40" + frame(0x1, 0x4, b"\x40\x85" + bytes(5) + b"\x83abc" + b"\x3f\xe1\x1f"))
    write("h2_blocks", "push-promise", b"\x02\x03" + frame(0x5, 0x4, b"\x00\x00\x00\x02" + fields))

def main():
    only = sys.argv[1:]
    if only:
        # Only the targets named, e.g. `fuzz/seeds.py workload_api`.
        for name in only:
            globals()[name]()
        return 0
    intermediate()
    cert_der, rsa_der = credentials()
    config()
    san()
    proxy_protocol(cert_der, rsa_der)
    admin_http()
    publish_args()
    deny()
    http_identity(cert_der)
    workload_api()
    check_secret()
    tls_records()
    webhook_review()
    inject_manifest()
    h2_blocks()


if __name__ == "__main__":
    sys.exit(main())
