"""The Python client of the decision service (`dpbandits.service`) drives whole experiments on a
real `dpbandits serve` (loopback only, a free port, bounded: each test stops its server)."""

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

import pytest

from dpbandits.service import Client, Pending, ServiceError

ADMIN = "py-client-admin-token-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PG_ENV = "DPBANDITS_TEST_PG"


def fresh_database(tmp_path):
    """The database of one server: an SQLite file, or (the `postgresql` parameter, in the
    PostgreSQL pass of scripts/test, which sets DPBANDITS_TEST_PG to a server's `postgres`
    database) a fresh PostgreSQL database with its audit key file. Returns (db, serve flags)."""
    base = os.environ.get(PG_ENV, "")
    if not base:
        return str(tmp_path / "trial.sqlite"), []
    name = f"dpbt_py_{os.getpid()}_{random.randrange(1 << 32):08x}"
    subprocess.run(["psql", "-q", base, "-c", f"CREATE DATABASE {name}"], check=True,
                   timeout=30, capture_output=True)
    key = tmp_path / "audit.key"
    return base.rsplit("/", 1)[0] + "/" + name, ["--audit-key-file", str(key)]


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request, cli, tmp_path, monkeypatch):
    """A running `serve` on SQLite, and on PostgreSQL when DPBANDITS_TEST_PG names a server
    (skipped otherwise). Yields (url, db, process, flags that name the audit key)."""
    if request.param == "sqlite":
        monkeypatch.delenv(PG_ENV, raising=False)
    elif not os.environ.get(PG_ENV):
        pytest.skip(f"no {PG_ENV}: the PostgreSQL pass of scripts/test sets it")
    token = tmp_path / "admin.token"
    token.write_text(ADMIN + "\n")
    port = free_port()
    db, key_flags = fresh_database(tmp_path)
    log = open(tmp_path / "server.log", "w")
    env = {k: v for k, v in os.environ.items() if k != "DPBANDITS_ADMIN_TOKEN"}
    p = subprocess.Popen(
        [str(cli), "serve", "--db", str(db), "--listen", f"127.0.0.1:{port}",
         "--admin-token-file", str(token), *key_flags]
        + (["--allow-async-replication"] if key_flags else []),
        stdout=subprocess.DEVNULL, stderr=log, env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            Client(url, retries=0, timeout=1).health()
            break
        except ServiceError:
            assert p.poll() is None, (tmp_path / "server.log").read_text()
            assert time.monotonic() < deadline, "server not healthy within 30 s"
            time.sleep(0.02)
    try:
        yield url, db, p, key_flags
    finally:
        p.terminate()
        try:
            p.wait(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
            log.close()


def test_a_whole_trial_through_the_client(server, cli):
    """Create (idempotent), decide and reward with several sites at once (409 waits handled),
    abandon, status, ledger, close, report (JSON and HTML), export, audit; then the database
    verifies. 3 arms, 120 patients, AdaC-UCB at rho = 0.5."""
    url, db, _, key_flags = server
    admin = Client(url, token=ADMIN)
    means = [0.2, 0.5, 0.8]
    exp = admin.create("trial-1", arms=3, policy={"kind": "adac_ucb", "rho": 0.5},
                       dropout_reward=0.0, request_id="create-trial-1")
    assert exp.created["kind"] == "adac_ucb" and exp.client_token
    assert exp.created["guarantee"]["noise"] == "deployment-grade"
    # A lost create answer: the same request again gets the experiment and a new token; the
    # first token is revoked.
    again = admin.create("trial-1", arms=3, policy={"kind": "adac_ucb", "rho": 0.5},
                         dropout_reward=0.0, request_id="create-trial-1")
    assert again.created.get("repeat") is True and again.client_token != exp.client_token
    with pytest.raises(ServiceError) as e:
        exp.status()
    assert e.value.status == 401
    exp = again
    site = Client(url)  # a site holds only the client token
    trial = site.experiment("trial-1", client_token=exp.client_token)

    rng = random.Random(5)
    lock = threading.Lock()
    outcomes = {}
    errors = []

    def patient_site(n):
        try:
            for _ in range(n):
                d = trial.decide(wait=20)
                r = 1.0 if rng.random() < means[d["arm"]] else 0.0
                with lock:
                    outcomes[d["decision_id"]] = (d["arm"], r)
                if d["decision_id"] % 29 == 0:
                    trial.abandon(d["decision_id"])
                else:
                    trial.reward(d["decision_id"], r)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    sites = [threading.Thread(target=patient_site, args=(30,)) for _ in range(4)]
    for t in sites:
        t.start()
    for t in sites:
        t.join(timeout=120)
    assert not errors, errors
    assert len(outcomes) == 120

    # A retried reward is a duplicate, never applied twice; a different value says so.
    some = next(i for i in outcomes if i % 29 != 0)
    dup = trial.reward(some, outcomes[some][1])
    assert dup["status"] == "duplicate"
    assert trial.reward(some, 1.0 - outcomes[some][1]).get("differs") is True
    # A decision retried with the same request_id is the stored one.
    d1 = trial.decide(request_id="retry-me")
    d2 = trial.decide(request_id="retry-me")
    assert d2["decision_id"] == d1["decision_id"] and d2.get("repeat") is True
    trial.reward(d1["decision_id"], 1.0)

    st = trial.status()
    assert st["decisions"] == 121 and st["rewarded"] == 121 and st["pending"] == 0, st
    ledger = trial.ledger(limit=5)
    assert len(ledger["rows"]) <= 5
    # Bad input: the service's message names the field.
    with pytest.raises(ServiceError) as e:
        trial.reward(10_000, 0.5)
    assert e.value.status == 404 and "decision_id" in e.value.message
    with pytest.raises(TypeError):
        trial.reward(1, "0.5")

    report = admin.experiment("trial-1").close(level=0.9)
    assert report["level"] == 0.9 and len(report["estimates"]) == 3
    assert report["audit_hash"]
    assert trial.report()["audit_hash"] == report["audit_hash"]
    assert "<html" in trial.report("html").lower()
    with pytest.raises(ServiceError) as e:
        trial.decide(wait=1)
    assert e.value.status == 409 and e.value.body.get("closed") is True

    rows = admin.experiment("trial-1").export()
    assert len(rows) == 121
    abandoned = [r for r in rows if r["outcome"] == "abandoned"]
    assert [r["decision_id"] for r in abandoned] == [i for i in sorted(outcomes) if i % 29 == 0]
    assert admin.audit("trial-1", limit=10)[0]["event"] == "config"
    assert any(x["experiment"] == "trial-1" for x in admin.experiments())

    # /metrics parses with the Prometheus text-format parser and agrees with the status.
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(admin.metrics())}
    requests = {
        (s.labels["route"], s.labels["status"]): s.value
        for s in families["dpbandits_requests"].samples
        if s.name == "dpbandits_requests_total"
    }
    assert requests[("decision", "200")] >= 122 and requests[("reward", "200")] >= 118
    assert requests.get(("decision", "409"), 0) >= 1  # the closed experiment's refusal
    charged = {
        s.labels["experiment"]: s.value
        for s in families["dpbandits_ledger_charged_total"].samples
    }
    assert charged["trial-1"] == pytest.approx(report["ledger"]["charged_total"]), report["ledger"]
    lat = [s for s in families["dpbandits_request_duration_seconds"].samples
           if s.labels.get("route") == "decision" and s.name.endswith("_bucket")]
    assert [s.value for s in lat] == sorted(s.value for s in lat) and lat[-1].labels["le"] == "+Inf"
    # Process and connection figures (this client's connection is open now).
    assert families["dpbandits_connections_open"].samples[0].value >= 1
    assert families["dpbandits_connections_accepted"].samples[0].value >= 1
    assert families["process_resident_memory_bytes"].samples[0].value > 1e6
    assert families["process_open_fds"].samples[0].value >= 4
    assert families["process_cpu_seconds"].samples[0].value > 0
    assert abs(families["process_start_time_seconds"].samples[0].value - time.time()) < 3600
    with pytest.raises(ServiceError) as e:
        Client(url).metrics()
    assert e.value.status == 401

    out = subprocess.run([str(cli), "audit-log", "verify", "--json", "--db", str(db), *key_flags],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    v = json.loads(out.stdout)
    assert v["decisions"] == 121 and v["rewards"] == 121


def test_the_client_waits_at_a_boundary_then_says_pending(server):
    """A per-step kind serves one decision at a time: a second request waits on the 409's
    Retry-After and raises Pending after `wait`; once the reward arrives it is served."""
    url = server[0]
    admin = Client(url, token=ADMIN)
    exp = admin.create("steps", arms=2, policy={"kind": "dp_ts", "epsilon": 1.0})
    d = exp.decide()
    t0 = time.monotonic()
    with pytest.raises(Pending):
        exp.decide(wait=1.5)
    waited = time.monotonic() - t0
    assert 0.9 <= waited <= 10, waited
    exp.reward(d["decision_id"], 1.0)
    assert exp.decide()["decision_id"] == d["decision_id"] + 1


def test_the_client_refuses_bad_arguments_and_retries_a_dead_server(tmp_path):
    with pytest.raises(ValueError, match="base_url"):
        Client("localhost:1")
    with pytest.raises(ValueError, match="retries"):
        Client("http://127.0.0.1:1", retries=-1)
    with pytest.raises(TypeError, match="token"):
        Client("http://127.0.0.1:1", token=3)
    # Nobody listens: bounded retries, then a ServiceError naming the attempts.
    c = Client(f"http://127.0.0.1:{free_port()}", retries=2, backoff=0.01, timeout=1)
    t0 = time.monotonic()
    with pytest.raises(ServiceError, match="3 attempts"):
        c.health()
    assert time.monotonic() - t0 < 10
    # No cap on the count: the retry window bounds the attempts (a restart fits in the default
    # 30 s; here 0.6 s), and the error names the window.
    with pytest.raises(ValueError, match="retry_window"):
        Client("http://127.0.0.1:1", retry_window=-1)
    c = Client(f"http://127.0.0.1:{free_port()}", backoff=0.01, timeout=1, retry_window=0.6)
    t0 = time.monotonic()
    with pytest.raises(ServiceError, match="retry_window = 0.6"):
        c.health()
    took = time.monotonic() - t0
    assert 0.55 <= took < 5, took


def test_the_client_rides_out_a_restart(tmp_path):
    """A service that goes away and comes back on the same port within the retry window: the
    request that was sent while it was down is answered once it is back (no error)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    c = Client(url, backoff=0.02, timeout=2, retry_window=20)
    answer = {}

    def ask():
        answer["health"] = c.health()

    t = threading.Thread(target=ask)
    t.start()
    time.sleep(0.5)  # the client is retrying against a closed port
    srv = _CountingServer.on_port(port, per_conn=100)
    try:
        t.join(20)
        assert not t.is_alive()
        assert answer["health"] == {"status": "ok", "n": 1}, answer
    finally:
        srv.close()


class _CountingServer:
    """A loopback HTTP/1.1 server that counts connections and answers each request with JSON;
    it closes a connection after `per_conn` answers without saying so (as a server closes an idle
    kept-alive connection). Stops by itself when the test closes it."""

    def __init__(self, per_conn, port=0):
        self.per_conn = per_conn
        self.connections = 0
        self.requests = 0
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        conn.settimeout(5)
        buf = b""
        with conn:
            for _ in range(self.per_conn):
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v)
                while len(buf) < length:
                    buf += conn.recv(4096)
                buf = buf[length:]
                with self.lock:
                    self.requests += 1
                    n = self.requests
                body = json.dumps({"status": "ok", "n": n}).encode()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode() + b"\r\n\r\n" + body
                )

    @classmethod
    def on_port(cls, port, per_conn):
        return cls(per_conn, port)

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)
        self.sock.close()


def test_the_client_keeps_one_connection_per_thread_and_reopens_a_closed_one():
    s = _CountingServer(per_conn=1000)
    try:
        c = Client(s.url, retries=0, timeout=5)
        assert [c.health()["n"] for _ in range(10)] == list(range(1, 11))
        assert s.connections == 1, "ten requests on one kept-alive connection"
        # Threads sharing the client each get their own connection.
        out = []
        ts = [threading.Thread(target=lambda: out.extend(c.health()["n"] for _ in range(5)))
              for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=30)
        assert sorted(out) == list(range(11, 31))
        assert s.connections == 5
        c.close()
    finally:
        s.close()
    # A server that closes each connection after one answer (an idle timeout): every request
    # still succeeds without a retry (retries=0), on a new connection each time.
    s = _CountingServer(per_conn=1)
    try:
        with Client(s.url, retries=0, timeout=5) as c:
            assert [c.health()["n"] for _ in range(5)] == [1, 2, 3, 4, 5]
        assert s.connections == 5
    finally:
        s.close()


class _ScriptedServer:
    """A loopback HTTP/1.1 server answering requests from a script of ``(status, headers, body)``
    (the last answer repeats), recording each request's JSON body and arrival time. Stops by
    itself when the test closes it."""

    def __init__(self, script):
        self.script = list(script)
        self.seen = []  # (monotonic time, JSON body)
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        conn.settimeout(5)
        buf = b""
        with conn:
            for _ in range(100):
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v)
                while len(buf) < length:
                    buf += conn.recv(4096)
                body, buf = buf[:length], buf[length:]
                with self.lock:
                    self.seen.append((time.monotonic(), json.loads(body) if body else None))
                    n = len(self.seen)
                status, headers, answer = self.script[min(n, len(self.script)) - 1]
                payload = json.dumps(answer).encode()
                extra = b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items())
                reason = b"OK" if status == 200 else b"Conflict"
                conn.sendall(
                    b"HTTP/1.1 " + str(status).encode() + b" " + reason + b"\r\n"
                    + b"Content-Type: application/json\r\n" + extra
                    + b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
                )

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)
        self.sock.close()


BOUNDARY = {"error": "pending = 1: every round of the open commitment is decided", "pending": 1}


def test_the_client_waits_the_sub_second_retry_hint_of_a_409():
    """A 409 with ``retry_after_ms: 20`` in its body (and ``Retry-After: 1``, the header's whole
    seconds) twice, then the decision: the client asks again after ~20 ms, not 1 s, with the same
    request_id."""
    s = _ScriptedServer([
        (409, {"Retry-After": "1"}, {**BOUNDARY, "retry_after_ms": 20}),
        (409, {"Retry-After": "1"}, {**BOUNDARY, "retry_after_ms": 20}),
        (200, {}, {"decision_id": 7, "arm": 1}),
    ])
    try:
        exp = Client(s.url, token="t", retries=0, timeout=5).experiment("e")
        t0 = time.monotonic()
        assert exp.decide(wait=5) == {"decision_id": 7, "arm": 1}
        took = time.monotonic() - t0
        assert len(s.seen) == 3
        gaps = [b[0] - a[0] for a, b in zip(s.seen, s.seen[1:])]
        assert all(0.018 <= g < 0.5 for g in gaps), gaps
        assert took < 0.9, took  # one Retry-After second would be 1 s at least
        assert len({body["request_id"] for _, body in s.seen}) == 1
    finally:
        s.close()


def test_the_client_falls_back_to_retry_after_and_bounds_the_wait():
    # Without the body's hint: the header's seconds.
    s = _ScriptedServer([
        (409, {"Retry-After": "1"}, BOUNDARY),
        (200, {}, {"decision_id": 2, "arm": 0}),
    ])
    try:
        exp = Client(s.url, token="t", retries=0, timeout=5).experiment("e")
        assert exp.decide(wait=5)["decision_id"] == 2
        gap = s.seen[1][0] - s.seen[0][0]
        assert 0.95 <= gap < 3, gap
    finally:
        s.close()
    # A hint that keeps coming: Pending once the retry window is spent (not before, not long
    # after); a 409 without any hint (closed) at once.
    s = _ScriptedServer([(409, {}, {**BOUNDARY, "retry_after_ms": 30})])
    try:
        exp = Client(s.url, token="t", retries=0, timeout=5).experiment("e")
        t0 = time.monotonic()
        with pytest.raises(Pending):
            exp.decide(wait=0.3)
        took = time.monotonic() - t0
        assert 0.2 <= took < 1.5, took
        assert 5 <= len(s.seen) <= 12, len(s.seen)
    finally:
        s.close()
    s = _ScriptedServer([(409, {}, {"error": "closed", "closed": True})])
    try:
        exp = Client(s.url, token="t", retries=0, timeout=5).experiment("e")
        with pytest.raises(ServiceError) as e:
            exp.decide(wait=5)
        assert not isinstance(e.value, Pending) and e.value.body["closed"] is True
        assert len(s.seen) == 1
    finally:
        s.close()


def test_the_http_client_imports_without_the_compiled_core():
    """`dpbandits.service` is standard library only: with the compiled core and numpy made
    unimportable, it imports and builds a client, and any other name of the package raises an
    ImportError that says what is missing (issue 41)."""
    code = r'''
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy.") or name == "dpbandits._native":
            raise ImportError(f"blocked: {name}")
        return None
sys.meta_path.insert(0, Block())
from dpbandits.service import Client, ServiceError
c = Client("http://127.0.0.1:1", retries=0, timeout=0.5)
import dpbandits
try:
    dpbandits.run
except ImportError as e:
    assert "compiled core" in str(e) and "dpbandits.service" in str(e), e
else:
    raise SystemExit("dpbandits.run did not raise")
print("ok")
'''
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
