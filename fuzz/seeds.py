# Writes the seed corpora of the fuzz targets (docs/TESTING.md, "Fuzzing"): run it in fuzz/corpus
# (`cd fuzz/corpus && python3 ../seeds.py`). Inputs of the kinds the parsers' unit tests use.
import json, struct, os, io, tarfile, gzip, hashlib
def w(t, name, data):
    os.makedirs(t, exist_ok=True)
    open(os.path.join(t, name), 'wb').write(data if isinstance(data, bytes) else data.encode())
def frame(h, p=b""):
    hb = json.dumps(h, separators=(',', ':')).encode()
    return struct.pack('<II', len(hb), len(p)) + hb + p
# protocol_frame
w('protocol_frame', 'output', frame({"ev": "output", "proc": 7, "fd": 1}, b"hello"))
w('protocol_frame', 'ready', frame({"ev": "ready", "version": 1}))
w('protocol_frame', 'stdin', frame({"type": "stdin", "proc": 1, "eof": False}, b"ls\n") + frame({"type": "signal", "proc": 1, "signal": 9}))
w('protocol_frame', 'resize', frame({"type": "resize", "proc": 3, "rows": 24, "cols": 80}))
w('protocol_frame', 'watch', frame({"type": "watch", "id": 1, "uid": 1000, "path": "/home/user", "recursive": True}))
w('protocol_frame', 'credit', frame({"type": "credit", "id": 2, "bytes": 65536}) + frame({"type": "connect", "conn": 4, "port": 8080}))
w('protocol_frame', 'garbage', struct.pack('<II', 3, 0) + b"{x}")
# tars
def tarbytes(entries, fmt=tarfile.GNU_FORMAT):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode='w', format=fmt) as t:
        for e in entries:
            ti = tarfile.TarInfo(e[0]); ti.mtime = 1000000
            kind = e[1]
            if kind == 'f':
                ti.size = len(e[2]); ti.mode = 0o644; t.addfile(ti, io.BytesIO(e[2]))
            elif kind == 'd':
                ti.type = tarfile.DIRTYPE; ti.mode = 0o755; t.addfile(ti)
            elif kind == 'l':
                ti.type = tarfile.SYMTYPE; ti.linkname = e[2]; t.addfile(ti)
            elif kind == 'h':
                ti.type = tarfile.LNKTYPE; ti.linkname = e[2]; t.addfile(ti)
    return b.getvalue()
layer = tarbytes([('etc', 'd'), ('etc/passwd', 'f', b"root:x:0:0::/root:/bin/sh\n"), ('bin', 'd'), ('bin/sh', 'f', b"#!"), ('usr', 'l', '/'), ('link', 'h', 'etc/passwd')])
w('linux_unpack', 'layer.tar', layer)
w('linux_unpack', 'whiteout.tar', tarbytes([('a', 'd'), ('a/.wh.b', 'f', b""), ('a/.wh..wh..opq', 'f', b""), ('escape', 'l', '../../x'), ('escape/y', 'f', b"no")]))
w('linux_unpack', 'pax.tar', tarbytes([('long/' + 'n' * 150, 'f', b"x")], tarfile.PAX_FORMAT))
w('linux_unpack', 'layer.tar.gz', gzip.compress(layer, mtime=0))
# oci_context
w('oci_context', 'ctx.tar', tarbytes([('Dockerfile', 'f', b"FROM scratch\nCOPY . /app\n"), ('src', 'd'), ('src/main.py', 'f', b"print(1)\n"), ('ln', 'l', 'src')]))
# oci_archive: docker save, oci layout, rootfs
cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/usr/bin"], "Cmd": ["/bin/sh"]}, "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}}).encode()
ch = hashlib.sha256(cfg).hexdigest(); lh = hashlib.sha256(layer).hexdigest()
w('oci_archive', 'docker-save.tar', tarbytes([('manifest.json', 'f', json.dumps([{"Config": ch + ".json", "RepoTags": ["x:1"], "Layers": [lh + "/layer.tar"]}]).encode()), (ch + ".json", 'f', cfg), (lh, 'd'), (lh + "/layer.tar", 'f', layer)]))
man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + ch, "size": len(cfg)}, "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + lh, "size": len(layer)}]}).encode()
mh = hashlib.sha256(man).hexdigest()
idx = json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + mh, "size": len(man), "annotations": {"org.opencontainers.image.ref.name": "1"}}]}).encode()
w('oci_archive', 'oci-layout.tar', tarbytes([('oci-layout', 'f', b'{"imageLayoutVersion":"1.0.0"}'), ('index.json', 'f', idx), ('blobs', 'd'), ('blobs/sha256', 'd'), ('blobs/sha256/' + ch, 'f', cfg), ('blobs/sha256/' + mh, 'f', man), ('blobs/sha256/' + lh, 'f', layer)]))
w('oci_archive', 'rootfs.tar.gz', gzip.compress(layer, mtime=0))
# oci_manifest (first byte picks the content type)
w('oci_manifest', 'manifest.json', man)
w('oci_manifest', 'index.json', json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + mh, "size": 100, "platform": {"architecture": "amd64", "os": "linux"}}, {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + ch, "size": 100, "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}}]}))
w('oci_manifest', 'docker-v2.json', json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json", "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + ch, "size": 10}, "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": "sha256:" + lh, "size": 10}]}))
w('oci_manifest', 'config.json', cfg)
# oci_dockerfile
w('oci_dockerfile', 'basic', "# syntax=docker/dockerfile:1\nARG BASE=python:3.12\nFROM ${BASE}\nENV A=1 B=\"two words\"\nWORKDIR /app\nCOPY --chown=1000:1000 . /app/\nRUN pip install -r requirements.txt && \\\n    echo $A\nUSER 1000\nEXPOSE 8080\nLABEL k=v\nCMD [\"python\", \"app.py\"]\nENTRYPOINT /bin/sh -c\n")
w('oci_dockerfile', 'scratch', "FROM scratch\nADD rootfs.tar /\nARG V\nRUN echo ${V:-none} ${V:+set}\n")
w('oci_dockerfile', 'multi', "FROM a\nFROM b\n")
# oci_reference
for i, r in enumerate(["python:3.12", "user/app", "ghcr.io/a/b:t", "127.0.0.1:5000/x@sha256:" + "a" * 64, "docker.io/library/debian:12", "localhost/a__b/c-----d/e.f_g", "Python:3", "[::1]:5000/img:tag"]):
    w('oci_reference', f'ref{i}', r)
# netproxy_dns
def q(name, qtype=1, flags=0x0100):
    b = struct.pack('>HHHHHH', 0x1234, flags, 1, 0, 0, 0)
    for l in name.split('.'):
        b += bytes([len(l)]) + l.encode()
    return b + b"\0" + struct.pack('>HH', qtype, 1)
w('netproxy_dns', 'a', q("pypi.org"))
w('netproxy_dns', 'aaaa', q("Files.PythonHosted.org", 28))
w('netproxy_dns', 'ptr', q("_svc.example.com", 12, 0))
# netproxy_sniff: ClientHello with SNI and an HTTP head
def client_hello(name):
    n = name.encode()
    sni = struct.pack('>HBH', len(n) + 3, 0, len(n)) + n
    ext = struct.pack('>HH', 0, len(sni)) + sni
    body = b"\x03\x03" + b"\0" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" + struct.pack('>H', len(ext)) + ext
    hs = b"\x01" + struct.pack('>I', len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack('>H', len(hs)) + hs
w('netproxy_sniff', 'hello', client_hello("pypi.org"))
w('netproxy_sniff', 'http', b"GET / HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: x\r\n\r\n")
w('netproxy_sniff', 'http-partial', b"POST /x HTTP/1.1\r\nhost: a.b")
# netproxy_policy
w('netproxy_policy', 'allowlist', json.dumps({"mode": "allowlist", "allow": ["pypi.org", "*.pythonhosted.org", "203.0.113.0/24", "10.0.0.0/8"], "deny": ["203.0.113.128/25"], "rules": {"api.example.com": {"headers": {"authorization": "Bearer x"}}}}))
w('netproxy_policy', 'allow-all', json.dumps({"mode": "allow-all"}))
w('netproxy_policy', 'deny', json.dumps({"mode": "deny"}))
# envd_connect: the first byte picks the codec (bit 0: JSON) and the chunk size (the rest + 1); then a
# Connect body as the e2b SDKs send it (tests/e2b/test_connect_wire.py): envelopes, or a unary message.
def env(flags, payload):
    return struct.pack('>BI', flags, len(payload)) + payload
def varint(n):
    out = b""
    while True:
        b = n & 0x7f; n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])
def pb(tag, v):
    if isinstance(v, int):
        return varint(tag << 3) + varint(v)
    v = v if isinstance(v, bytes) else v.encode()
    return varint(tag << 3 | 2) + varint(len(v)) + v
def js(o):
    return json.dumps(o, separators=(',', ':')).encode()
end = env(2, b"{}")
start = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"], "envs": {"A": "1"}, "cwd": "/home/user"}, "stdin": False, "tag": "t"}
w('envd_connect', 'start-json', b"\x0f" + env(0, js(start)) + end)
start_pb = pb(1, pb(1, "/bin/bash") + pb(2, "-l") + pb(2, "-c") + pb(2, "echo hi") + pb(3, pb(1, "A") + pb(2, "1")) + pb(4, "/home/user")) + pb(2, pb(1, pb(1, 80) + pb(2, 24))) + pb(4, 0)
w('envd_connect', 'start-proto', b"\x40" + env(0, start_pb) + end)
w('envd_connect', 'stream-input-json', b"\x03" + env(0, js({"start": {"process": {"pid": 3}}})) + env(0, js({"data": {"input": {"stdin": "aGkK"}}})) + env(0, js({"keepalive": {}})) + end)
w('envd_connect', 'stream-input-proto', b"\xfe" + env(0, pb(1, pb(1, pb(2, "t")))) + env(0, pb(2, pb(2, pb(2, b"ls\n")))) + env(0, pb(3, b"")) + end)
w('envd_connect', 'signal-json', b"\x01" + js({"process": {"tag": "t"}, "signal": "SIGNAL_SIGKILL"}))
w('envd_connect', 'update-json', b"\x01" + js({"process": {"pid": 3}, "pty": {"size": {"cols": 120, "rows": 40}}}))
w('envd_connect', 'send-input-proto', b"\x00" + pb(1, pb(1, 7)) + pb(2, pb(2, b"\x03")))
w('envd_connect', 'list-dir-json', b"\x01" + js({"path": "/home/user", "depth": 2}))
w('envd_connect', 'move-json', b"\x01" + js({"source": "/tmp/a", "destination": "/tmp/b"}))
w('envd_connect', 'watch-json', b"\x21" + env(0, js({"path": "/home/user", "recursive": True, "includeEntry": True})) + end)
w('envd_connect', 'oversized', b"\x01" + struct.pack('>BI', 0, 64 << 20))
w('envd_connect', 'end-error', b"\x01" + env(2, js({"error": {"code": "canceled", "message": "bye"}})))
# envd_multipart: a Content-Type line, a shape byte (low 4 bits: the template repeated 2^n times, up
# to 256 KiB; top 2: the part limit, 3 = none), a count of chunk lengths (16-byte units) and the
# lengths, then the body's template. Bodies as the e2b SDKs' `files.write` send them.
def mp(ct, template, shape=0xc0, cuts=b""):
    return ct.encode() + b"\n" + bytes([shape, len(cuts)]) + cuts + template
def part(name, data, b, ctype=True):
    h = f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
    if ctype:
        h += 'Content-Type: application/octet-stream\r\n'
    return h.encode() + b"\r\n" + data + b"\r\n"
hb = "0123456789abcdef0123456789abcdef"
w('envd_multipart', 'python-one', mp(f"multipart/form-data; boundary={hb}", part("/home/user/a.txt", b"hello\n", hb) + f"--{hb}--\r\n".encode()))
jb = "----formdata-undici-012345678901"
w('envd_multipart', 'js-two-cut', mp(f"multipart/form-data; boundary={jb}", part("a/b.txt", b"x" * 40, jb, False) + part("c.bin", bytes(range(64)), jb) + f"--{jb}--\r\n".encode(), cuts=b"\x00\x02\x05"))
w('envd_multipart', 'quoted-limit', mp('multipart/form-data; boundary="a b"', b"preamble\r\n" + part("big", b"y" * 100, "a b") + b"--a b--", shape=0x00))
w('envd_multipart', 'many-parts', mp("multipart/form-data; boundary=x", part("f", b"1", "x", False), shape=0xcb))
w('envd_multipart', 'no-boundary', mp("multipart/form-data; boundary=x", b"z" * 250, shape=0xcb, cuts=b"\x3f"))
w('envd_multipart', 'no-filename', mp("multipart/form-data; boundary=x", b'--x\r\nContent-Disposition: form-data; name="file"\r\n\r\nd\r\n--x--\r\n'))
# pty_frames: the first byte picks the rest's kind: 0 a text frame's payload, 1 the client's bytes on
# the socket (masked frames), 2 the route's query string. As sandlot-client and the CLI send them.
def ws(opcode, payload, key=b"\x12\x34\x56\x78", fin=True):
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack('>H', n)
    else:
        head += bytes([0x80 | 127]) + struct.pack('>Q', n)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))
resize = b'{"type":"resize","rows":24,"cols":80}'
w('pty_frames', 'resize', b"\x00" + resize)
w('pty_frames', 'resize-too-big', b"\x00" + b'{"type":"resize","rows":0,"cols":5000}')
w('pty_frames', 'unknown', b"\x00" + b'{"type":"input","data":"ls"}')
w('pty_frames', 'session', b"\x01" + ws(1, resize) + ws(2, b"ls -l\n") + ws(9, b"p") + ws(10, b"") + ws(8, struct.pack('>H', 1000) + b"bye"))
w('pty_frames', 'fragments', b"\x01" + ws(2, b"ech", fin=False) + ws(0, b"o hi\n") + ws(1, b'{"type":"re', fin=False) + ws(0, b'size","rows":1000,"cols":1}'))
w('pty_frames', 'oversized', b"\x01" + bytes([0x82, 0x80 | 127]) + struct.pack('>Q', 1 << 20) + b"\x12\x34\x56\x78" + b"x" * 64)
w('pty_frames', 'query', b"\x02" + b"argv=ls&argv=-l%20a+b&cwd=%2Ftmp&env=A%3D1&env=B=2=3&user=root&rows=40&cols=120")
w('pty_frames', 'query-pid', b"\x02" + b"pid=7&rows=3&cols=4")
