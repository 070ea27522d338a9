#!/usr/bin/python3
"""Checks real gpuexd responses against schema/openapi.yaml.

Starts a gpuexd on a fresh database of the test cluster (GPUEX_TEST_DSN), calls every operation the
contract lists (and a few error cases), and validates each response body against the schema the
contract gives for that path, method and status. Fails when a response does not match, when a status
is not in the contract, or when an operation of the contract was never exercised or never answered 2xx.
Usage: check_openapi.py GPUEXD OPENAPI_YAML
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import jsonschema
import yaml


def main():
    gpuexd, spec_path = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        spec = yaml.safe_load(f)
    dsn = os.environ.get("GPUEX_TEST_DSN")
    if not dsn:
        sys.exit("GPUEX_TEST_DSN is not set: run through scripts/test")
    base, _ = dsn.rsplit("/", 1)
    db = "gpuex_t_contract_%d" % os.getpid()
    subprocess.run(["psql", base + "/postgres", "-qc", "CREATE DATABASE " + db], check=True)
    dsn = base + "/" + db
    server = None
    tmp = tempfile.TemporaryDirectory(prefix="gpuex-contract-")  # the port file and the server's log
    log_path = os.path.join(tmp.name, "gpuexd.log")
    try:
        subprocess.run([gpuexd, "migrate", "--dsn", dsn], check=True, capture_output=True)

        def account(name, scopes):
            out = subprocess.run([gpuexd, "admin", "create-account", "--dsn", dsn, "--name", name, "--scopes", scopes],
                                 check=True, capture_output=True, text=True).stdout
            return json.loads(out)

        admin, provider, buyer = account("ops", "admin"), account("provider", "provide,read"), account("buyer", "trade,read")
        port_file = os.path.join(tmp.name, "port")
        log = open(log_path, "w")
        server = subprocess.Popen([gpuexd, "serve", "--dsn", dsn, "--listen", "127.0.0.1:0", "--port-file", port_file,
                                   "--test-clock", "--tick-ms", "100"], stdout=log, stderr=log)
        for _ in range(600):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.05)
        port = int(open(port_file).read())
        run_checks(spec, port, admin, provider, buyer)
    except BaseException:
        if os.path.exists(log_path):  # the server's last words, before the folder goes
            sys.stderr.write("gpuexd's log (last 40 lines):\n" + "".join(open(log_path).readlines()[-40:]))
        raise
    finally:
        if server:
            server.terminate()
            server.wait(timeout=30)
        tmp.cleanup()
        subprocess.run(["psql", base + "/postgres", "-qc", "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db])


def run_checks(spec, port, admin, provider, buyer):
    seen = set()
    succeeded = set()  # operations that answered a 2xx at least once: their success schema was checked
    failures = []
    checked = 0

    def call(method, path, template, key=None, body=None, headers=None):
        nonlocal checked
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data, method=method)
        if key:
            req.add_header("Authorization", "Bearer " + key["api_key"])
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                status, text, ctype = r.status, r.read().decode(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, text, ctype = e.code, e.read().decode(), e.headers.get("Content-Type", "")
        seen.add((template, method.lower()))
        if 200 <= status < 300:
            succeeded.add((template, method.lower()))
        op = spec["paths"].get(template, {}).get(method.lower())
        what = "%s %s -> %d" % (method, path, status)
        if op is None:
            failures.append("%s: the contract has no %s %s" % (what, method, template))
            return status, None
        response = op["responses"].get(str(status))
        if response is None:
            failures.append("%s: status %d is not in the contract" % (what, status))
            return status, None
        if "$ref" in response:
            response = resolve(spec, response["$ref"])
        content = response.get("content", {})
        if ctype.startswith("text/csv"):
            if "text/csv" not in content:
                failures.append("%s: CSV is not in the contract" % what)
            return status, text
        if "application/json" in content:
            payload = json.loads(text)
            schema = content["application/json"]["schema"]
            validator = jsonschema.Draft202012Validator(
                schema, resolver=jsonschema.RefResolver.from_schema(spec))
            errors = sorted(validator.iter_errors(payload), key=lambda e: e.path)
            for e in errors[:3]:
                failures.append("%s: %s at %s\n  body: %s" % (what, e.message, list(e.absolute_path), text[:400]))
            checked += 1
            return status, payload
        return status, text

    now = datetime.now(timezone.utc)
    iso = lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")

    call("GET", "/healthz", "/healthz")
    call("GET", "/readyz", "/readyz")
    call("GET", "/metrics", "/metrics")
    call("GET", "/v1/markets", "/v1/markets")
    _, created = call("POST", "/v1/accounts", "/v1/accounts", admin, {"name": "acme", "scopes": ["read", "trade"]})
    acme = created["account"]["id"]
    _, key = call("POST", "/v1/accounts/%s/keys" % acme, "/v1/accounts/{id}/keys", admin, {"scopes": ["read"]})
    call("DELETE", "/v1/keys/%s" % key["id"], "/v1/keys/{key_id}", admin)
    call("PUT", "/v1/accounts/%s/limits" % buyer["account_id"], "/v1/accounts/{id}/limits", admin,
         {"max_open_gpus": 1000, "max_open_notional": "100000", "max_open_orders": 500})
    _, pool = call("POST", "/v1/pools", "/v1/pools", provider,
                   {"market": "H100-SXM-80G", "region": "DE", "tier": "bare_metal", "gpus_per_node": 8, "nodes": 2,
                    "nvlink": True, "fabric": "infiniband", "fabric_gbps": 400, "sla_pct": "99.9", "pue": "1.1",
                    "renewable_pct": 90, "carbon_g_per_kwh": 50, "egress_usd_per_gb": "0.01"})
    pid = pool["id"]
    pool_body = {"market": "A100-PCIE-80G", "region": "US", "tier": "spot", "gpus_per_node": 1, "nodes": 1,
                 "pue": "1.5", "renewable_pct": 10, "carbon_g_per_kwh": 500}
    call("POST", "/v1/pools", "/v1/pools", provider, pool_body, {"Idempotency-Key": "contract-1"})
    call("POST", "/v1/pools", "/v1/pools", provider, pool_body, {"Idempotency-Key": "contract-1"})
    call("POST", "/v1/pools", "/v1/pools", provider, dict(pool_body, nodes=2), {"Idempotency-Key": "contract-1"})
    call("GET", "/v1/pools", "/v1/pools", provider)
    call("GET", "/v1/pools/%s" % pid, "/v1/pools/{id}", provider)
    call("PATCH", "/v1/pools/%s" % pid, "/v1/pools/{id}", provider, {"nodes": 3})
    call("POST", "/v1/pools/%s/verify" % pid, "/v1/pools/{id}/verify", admin,
         {"verified": True, "expires_at": iso(now + timedelta(days=90)), "evidence": "audit 2026-11"})
    _, ask = call("POST", "/v1/orders", "/v1/orders", provider,
                  {"side": "sell", "pool_id": pid, "price": "2.5000", "quantity": 16, "start": iso(now),
                   "end": iso(now + timedelta(days=60)), "client_order_id": "ask-1"})
    call("POST", "/v1/orders", "/v1/orders", provider,
         {"side": "sell", "pool_id": pid, "price": "2.5000", "quantity": 16, "start": iso(now),
          "end": iso(now + timedelta(days=60)), "client_order_id": "ask-1"})
    _, bid = call("POST", "/v1/orders", "/v1/orders", buyer,
                  {"side": "buy", "market": "H100-SXM-80G", "price": "3.0000", "quantity": 4, "duration": 7200,
                   "green_only": True, "regions": ["DE"]})
    _, fwd = call("POST", "/v1/orders", "/v1/orders", buyer,
                  {"side": "buy", "market": "H100-SXM-80G", "price": "1.0000", "quantity": 2,
                   "start": iso(now + timedelta(days=40)), "end": iso(now + timedelta(days=41)), "client_order_id": "fwd"})
    call("POST", "/v1/orders", "/v1/orders", buyer,
         {"side": "buy", "market": "H100-SXM-80G", "price": "1.0000", "quantity": 3, "min_chunk": 2, "duration": 3600})
    call("POST", "/v1/orders", "/v1/orders", buyer, {"side": "buy"})
    _, quote = call("POST", "/v1/quote", "/v1/quote", None,
                    {"side": "buy", "market": "H100-SXM-80G", "price": "3.0000", "quantity": 4, "duration": 3600,
                     "egress_gb_per_gpu_hour": "1.5", "storage_gb": 100})
    if not quote or not quote["fills"]:
        failures.append("POST /v1/quote: no fill quoted against the open ask")
    call("POST", "/v1/quote", "/v1/quote", None, {"side": "sell", "pool_id": pid, "price": "1.0000", "quantity": 1})
    call("POST", "/v1/quote", "/v1/quote", None, {"side": "buy", "market": "NOPE", "price": "1.0000", "quantity": 1,
                                                  "duration": 3600})
    call("POST", "/v1/quote", "/v1/quote", None, {"side": "buy", "market": "H100-SXM-80G", "price": "1.00005",
                                                  "quantity": 1, "duration": 3600})
    call("GET", "/v1/orders?status=all", "/v1/orders", buyer)
    call("GET", "/v1/orders/%s" % fwd["order"]["id"], "/v1/orders/{id}", buyer)
    call("GET", "/v1/orders/by-client-id/fwd", "/v1/orders/by-client-id/{cid}", buyer)
    call("PATCH", "/v1/orders/%s" % fwd["order"]["id"], "/v1/orders/{id}", buyer, {"quantity": 1})
    call("DELETE", "/v1/orders/%s" % fwd["order"]["id"], "/v1/orders/{id}", buyer)
    call("DELETE", "/v1/orders", "/v1/orders", buyer)
    call("GET", "/v1/fills", "/v1/fills", buyer)
    _, leases = call("GET", "/v1/leases", "/v1/leases", buyer)
    lease = leases["leases"][0]["id"]
    _, leased_pool = call("GET", "/v1/pools/%s" % pid, "/v1/pools/{id}", provider)
    if not leased_pool or not leased_pool["schedule"]:
        failures.append("GET /v1/pools/{id}: no schedule for a pool with an open ask and a lease")
    call("GET", "/v1/leases/%s" % lease, "/v1/leases/{id}", provider)
    call("POST", "/v1/leases/%s/release" % lease, "/v1/leases/{id}/release", buyer)
    call("GET", "/v1/markets/H100-SXM-80G/book?bucket=spot", "/v1/markets/{m}/book")
    call("GET", "/v1/markets/H100-SXM-80G/book?bucket=2027-13", "/v1/markets/{m}/book")
    m = "H100-SXM-80G"
    call("POST", "/v1/orders", "/v1/orders", buyer,
         {"side": "buy", "market": m, "price": "1.0000", "quantity": 2,
          "start": iso(now + timedelta(days=70)), "end": iso(now + timedelta(days=71))})
    _, prints = call("GET", "/v1/markets/%s/trades?limit=1" % m, "/v1/markets/{m}/trades")
    if not prints["trades"]:
        failures.append("no trade prints after a trade")
    if prints["next_cursor"] is not None:
        call("GET", "/v1/markets/%s/trades?limit=1&cursor=%s" % (m, prints["next_cursor"]), "/v1/markets/{m}/trades")
    call("GET", "/v1/markets/%s/trades" % m, "/v1/markets/{m}/trades", headers={"Accept": "text/csv"})
    call("GET", "/v1/markets/NOPE/trades", "/v1/markets/{m}/trades")
    call("GET", "/v1/markets/%s/trades?cursor=zz" % m, "/v1/markets/{m}/trades")
    _, candles = call("GET", "/v1/markets/%s/candles?interval=1m&bucket=spot" % m, "/v1/markets/{m}/candles")
    if not candles["candles"]:
        failures.append("no candle after a trade")
    call("GET", "/v1/markets/%s/candles?interval=1d" % m, "/v1/markets/{m}/candles", headers={"Accept": "text/csv"})
    call("GET", "/v1/markets/%s/candles?interval=3m" % m, "/v1/markets/{m}/candles")
    call("GET", "/v1/markets/NOPE/candles", "/v1/markets/{m}/candles")
    _, curve = call("GET", "/v1/markets/%s/forward-curve" % m, "/v1/markets/{m}/forward-curve")
    if not curve["tenors"]:
        failures.append("no forward tenor despite a resting forward bid")
    call("GET", "/v1/markets/NOPE/forward-curve", "/v1/markets/{m}/forward-curve")
    call("GET", "/v1/markets/%s/stats" % m, "/v1/markets/{m}/stats")
    call("GET", "/v1/markets/A100-PCIE-80G/stats", "/v1/markets/{m}/stats")
    call("GET", "/v1/markets/NOPE/stats", "/v1/markets/{m}/stats")
    _, index = call("GET", "/v1/index/%s" % m, "/v1/index/{m}")
    if not index["index"]:
        failures.append("no index day after a spot trade")
    call("GET", "/v1/index/%s?from=2026-01-01&to=2026-02-01" % m, "/v1/index/{m}", headers={"Accept": "text/csv"})
    call("GET", "/v1/index/%s?from=nope" % m, "/v1/index/{m}")
    call("GET", "/v1/index/NOPE", "/v1/index/{m}")
    call("DELETE", "/v1/orders", "/v1/orders", buyer)
    call("POST", "/v1/markets/H100-SXM-80G/halt", "/v1/markets/{m}/halt", admin)
    call("POST", "/v1/markets/H100-SXM-80G/resume", "/v1/markets/{m}/resume", admin)
    call("POST", "/v1/admin/clock", "/v1/admin/clock", admin, {"advance_s": 3600})
    call("GET", "/v1/admin/state-digest", "/v1/admin/state-digest", admin)
    call("DELETE", "/v1/orders/%s" % ask["order"]["id"], "/v1/orders/{id}", provider)
    call("DELETE", "/v1/pools/%s" % pid, "/v1/pools/{id}", provider)

    for template, ops in spec["paths"].items():
        for method in ops:
            if (template, method) not in seen:
                failures.append("never exercised: %s %s" % (method.upper(), template))
            elif (template, method) not in succeeded:
                failures.append("never answered 2xx: %s %s (its success schema went unchecked)" % (method.upper(), template))
    for f in failures:
        print("FAIL " + f)
    print("%d passed, %d failed" % (checked, len(failures)))
    if failures:
        sys.exit(1)


def resolve(spec, ref):
    node = spec
    for part in ref.lstrip("#/").split("/"):
        node = node[part]
    return node


if __name__ == "__main__":
    main()
