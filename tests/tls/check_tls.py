#!/usr/bin/python3
"""HTTPS and WSS against a real gpuexd started with a certificate (--tls-cert/--tls-key).

A self-signed certificate for 127.0.0.1 is made with the openssl command; the client trusts only it.
Over HTTPS: health, a pool and asks. Over WSS (a WebSocket client written here from RFC 6455, on
Python's ssl module): the handshake's accept hash, a book snapshot and every delta of a burst of asks
in order with no seq gap, a ping answered by a pong, a heartbeat, and the close handshake.

    check_tls.py GPUEXD   (GPUEX_TEST_DSN set, as scripts/test does)
"""
import base64
import hashlib
import http.client
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 10


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


class Wss:
    """A minimal WebSocket client over TLS: masked client frames, unfragmented server frames."""

    def __init__(self, port, context):
        raw = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        self.buffer = b""
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (port, key)).encode())
        while b"\r\n\r\n" not in self.buffer:
            self.fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        check(lines[0].startswith("HTTP/1.1 101"), "upgrade answered: " + lines[0])
        headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        expected = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        check(headers.get("sec-websocket-accept") == expected, "Sec-WebSocket-Accept is the RFC 6455 hash")

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            fail("the server closed the connection")
        self.buffer += data

    def send(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        header = bytes([0x80 | opcode])
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", n)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send_json(self, message):
        self.send(0x1, json.dumps(message).encode())

    def frame(self):
        """The next frame: (opcode, payload). Server frames are whole and unmasked."""
        while len(self.buffer) < 2:
            self.fill()
        b0, b1 = self.buffer[0], self.buffer[1]
        check(b0 & 0x80, "server frames are final (FIN)")
        check(b0 & 0x70 == 0, "no reserved bits: no compression")
        check(not b1 & 0x80, "server frames are not masked")
        n, at = b1 & 0x7F, 2
        if n == 126:
            while len(self.buffer) < 4:
                self.fill()
            n, at = struct.unpack("!H", self.buffer[2:4])[0], 4
        elif n == 127:
            while len(self.buffer) < 10:
                self.fill()
            n, at = struct.unpack("!Q", self.buffer[2:10])[0], 10
        while len(self.buffer) < at + n:
            self.fill()
        payload, self.buffer = self.buffer[at:at + n], self.buffer[at + n:]
        return b0 & 0x0F, payload

    def message(self, wanted=None):
        """The next JSON text message (of type `wanted`, skipping others)."""
        deadline = time.time() + TIMEOUT_S
        while time.time() < deadline:
            opcode, payload = self.frame()
            if opcode != 0x1:
                fail("expected a text frame, got opcode %d" % opcode)
            m = json.loads(payload)
            if wanted is None or m.get("type") == wanted:
                return m
        fail("no %s message in time" % wanted)


def main():
    gpuexd = sys.argv[1]
    dsn = os.environ.get("GPUEX_TEST_DSN") or sys.exit("GPUEX_TEST_DSN is not set: run through scripts/test")
    base = dsn.rsplit("/", 1)[0]
    db = "gpuex_t_tls_%d" % os.getpid()
    scratch = tempfile.mkdtemp(prefix="gpuex-tls-")
    cert, key = os.path.join(scratch, "cert.pem"), os.path.join(scratch, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    subprocess.run(["psql", base + "/postgres", "-qc", "CREATE DATABASE " + db], check=True)
    dsn = base + "/" + db
    server = None
    log_path = os.path.join(scratch, "gpuexd.log")
    try:
        subprocess.run([gpuexd, "migrate", "--dsn", dsn], check=True, capture_output=True)
        provider = json.loads(subprocess.run([gpuexd, "admin", "create-account", "--dsn", dsn, "--name", "provider",
                                              "--scopes", "provide,read"], check=True, capture_output=True,
                                             text=True).stdout)
        port_file = os.path.join(scratch, "port")
        with open(log_path, "w") as log:
            server = subprocess.Popen([gpuexd, "serve", "--dsn", dsn, "--listen", "127.0.0.1:0", "--port-file", port_file,
                                       "--tls-cert", cert, "--tls-key", key, "--ws-heartbeat-ms", "500"],
                                      stdout=log, stderr=log)
        for _ in range(600):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            check(server.poll() is None, "gpuexd exited at start")
            time.sleep(0.05)
        port = int(open(port_file).read())
        run_checks(port, cert, provider["api_key"])
        print("tls: ok")
    except SystemExit:
        if os.path.exists(log_path):
            print("gpuexd log:\n" + "".join(open(log_path).readlines()[-20:]))
        raise
    finally:
        if server:
            server.terminate()
            server.wait(timeout=30)
        subprocess.run(["psql", base + "/postgres", "-qc", "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db])
        shutil.rmtree(scratch, ignore_errors=True)  # the certificate, the port file and the log (its tail printed above)


def run_checks(port, cert, provider_key):
    context = ssl.create_default_context(cafile=cert)  # trusts only the server's own certificate

    def https(method, path, body=None):
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=TIMEOUT_S)
        headers = {"Authorization": "Bearer " + provider_key, "Content-Type": "application/json"}
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, json.loads(data) if data else None

    status, _ = https("GET", "/healthz")
    check(status == 200, "GET /healthz over HTTPS: %d" % status)
    # A client that does not trust the certificate is refused by its own TLS check.
    try:
        https_untrusted = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(),
                                                      timeout=TIMEOUT_S)
        https_untrusted.request("GET", "/healthz")
        fail("an untrusted certificate was accepted")
    except ssl.SSLCertVerificationError:
        pass
    # TLS below 1.2 is refused by the server: the client offers only 1.1 (its own floor lowered) and gets
    # the server's protocol_version alert.
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(cert)
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    old.minimum_version = ssl.TLSVersion.TLSv1_1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as raw:
            with old.wrap_socket(raw, server_hostname="127.0.0.1"):
                fail("a TLS 1.1 handshake was accepted")
    except ssl.SSLError as e:
        check("PROTOCOL_VERSION" in str(e).upper() or "UNSUPPORTED_PROTOCOL" in str(e).upper(),
              "TLS 1.1 refused by the server's alert, not by the client: %s" % e)
    # Plain HTTP on the TLS port gets no HTTP answer.
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        try:
            answer = raw.recv(64)
        except (ConnectionResetError, socket.timeout):
            answer = b""
        check(not answer.startswith(b"HTTP/"), "plain HTTP on the TLS port was answered: %r" % answer)

    status, pool = https("POST", "/v1/pools", {
        "market": "H100-SXM-80G", "region": "DE", "tier": "bare_metal", "gpus_per_node": 8, "nodes": 100,
        "fabric": "infiniband", "fabric_gbps": 400, "pue": "1.2", "renewable_pct": 50, "carbon_g_per_kwh": 200})
    check(status == 201, "pool over HTTPS: %d %s" % (status, pool))
    now = int(time.time())

    def ask(price):
        body = {"side": "sell", "pool_id": pool["id"], "price": price, "quantity": 8,
                "start": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 60)),
                "end": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 86400))}
        status, res = https("POST", "/v1/orders", body)
        check(status == 201, "ask over HTTPS: %d %s" % (status, res))

    ask("3.0000")
    ws = Wss(port, context)
    channel = "book:H100-SXM-80G:spot"
    ws.send_json({"op": "subscribe", "channels": [channel]})
    check(ws.message("subscribed")["channels"] == [channel], "subscribed")
    snapshot = ws.message("snapshot")
    check(snapshot["asks"] == [["3.0000", 8]], "the snapshot holds the ask: %s" % snapshot)
    seq = snapshot["seq"]

    # A burst of asks at distinct prices: every delta arrives, in order, one seq apart.
    prices = ["%.4f" % (3.01 + i / 100) for i in range(30)]
    for p in prices:
        ask(p)
    seen = []
    while len(seen) < len(prices):
        m = ws.message()
        if m["type"] == "heartbeat":
            check(m["seq"] == seq, "a heartbeat repeats the current seq")
            continue
        check(m["type"] == "delta" and m["seq"] == seq + 1, "delta %d after %d: %s" % (m.get("seq", -1), seq, m))
        seq = m["seq"]
        seen += [c[1] for c in m["changes"] if c[0] == "sell"]
    check(seen == prices, "the deltas carry the asks in order: %s" % seen)

    ws.send(0x9, b"tls-ping")
    for _ in range(20):
        opcode, payload = ws.frame()
        if opcode == 0xA:
            check(payload == b"tls-ping", "the pong echoes the ping's payload")
            break
        check(opcode == 0x1, "only text frames before the pong")
    else:
        fail("no pong")
    heartbeat = ws.message("heartbeat")
    check(heartbeat["channel"] == channel and heartbeat["seq"] == seq, "heartbeat on the idle channel: %s" % heartbeat)

    ws.send(0x8, struct.pack("!H", 1000))
    for _ in range(20):
        opcode, payload = ws.frame()
        if opcode == 0x8:
            check(struct.unpack("!H", payload[:2])[0] == 1000, "the close is echoed with 1000")
            break
    else:
        fail("no close frame")


if __name__ == "__main__":
    main()
