"""A client for the dpbandits decision service (``dpbandits serve``, docs/service.md).

Standard library only (``http.client``). It handles what a site's integration gets wrong at 3 a.m.:

* **one kept-alive connection per thread** (HTTP/1.1; a client may be shared by threads): no TCP
  handshake per request, and a connection the server closed while idle is reopened at once;

* **tokens**: the admin token for creating, closing and exporting; each experiment's client token
  (returned once by the create call) for decisions and rewards;
* **retries that cannot double-apply**: every decision request carries a ``request_id`` (generated
  when the caller gives none) and is retried with the *same* one after a connection error or a
  5xx, so a lost answer returns the stored decision (``"repeat": true``) instead of a second one;
  a reward is idempotent per ``decision_id`` and is retried as is; experiment creation carries a
  ``request_id`` too (a repeated create answers with the experiment and a fresh client token);
* **409 with a retry hint** at a commitment boundary (every round issued, rewards pending): the
  decision request waits the answer's ``"retry_after_ms"`` (milliseconds, in the JSON body; the
  ``Retry-After`` header's seconds when the body has none) and tries again, up to ``wait``
  seconds in all, then raises :class:`Pending` (enrolment should not block forever on a missing
  outcome: abandon it, or create the experiment with a ``reward_deadline``, or with
  ``while_pending="pipeline"``).

Errors from the service are raised as :class:`ServiceError` with the HTTP status and the
service's message (which names the field, the value and what is allowed).

Example::

    from dpbandits.service import Client
    admin = Client("http://127.0.0.1:8787", token=open("admin.token").read().strip())
    exp = admin.create("trial-1", arms=3, policy={"kind": "adac_ucb", "rho": 0.5},
                       dropout_reward=0.0)
    d = exp.decide()                  # {"decision_id": 1, "arm": 2}
    exp.reward(d["decision_id"], 1.0)
    report = admin.experiment("trial-1").close(level=0.9)
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
import uuid
from typing import Any, Mapping, Sequence

__all__ = ["Client", "Experiment", "ServiceError", "Pending"]


class ServiceError(Exception):
    """An error answer of the service: ``status`` (HTTP), ``body`` (its JSON, if any) and
    ``retry_after`` (its ``Retry-After`` header, if any)."""

    def __init__(self, status: int, message: str, body: Any = None):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.body = body
        self.retry_after: str | None = None


class Pending(ServiceError):
    """A decision request still refused (409, rewards pending) after the client's ``wait``."""


def _retry_pause(e: ServiceError) -> float | None:
    """How long to wait before asking again after a 409 ``e``, in seconds: the body's
    ``"retry_after_ms"`` (integer milliseconds) when present and valid, else the ``Retry-After``
    header's seconds; ``None`` when the answer has neither (a refusal that waiting cannot
    cure)."""
    ms = e.body.get("retry_after_ms") if isinstance(e.body, dict) else None
    if isinstance(ms, (int, float)) and not isinstance(ms, bool) and 0 <= ms < float("inf"):
        return max(float(ms) / 1000.0, 0.001)
    header = e.retry_after
    if header is None:
        return None
    try:
        seconds = float(header)
    except ValueError:
        return None
    return max(seconds, 0.01) if seconds == seconds else None


def _check_token(token: Any, what: str) -> str:
    if not isinstance(token, str) or not token:
        raise TypeError(f"{what}: expected a non-empty string, got {token!r}")
    return token


class Client:
    """A connection to one service: ``base_url`` (e.g. ``http://127.0.0.1:8787``) and a token.

    ``timeout`` bounds each HTTP request (seconds). A request that failed on the network or
    with a 5xx is sent again (with the same ``request_id``) until ``retry_window`` seconds have
    passed since its first attempt (default 30: longer than a restart of the service, whose
    start-up check answers 503 with ``Retry-After``), waiting ``backoff * 2**attempt`` seconds
    between attempts (at most 1 s; a 503's ``Retry-After`` when it has one); ``retries``, when
    given, caps the number of retries (``retries=0``: one attempt).
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        retries: int | None = None,
        backoff: float = 0.05,
        retry_window: float = 30.0,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url = {base_url!r}: expected an http:// or https:// URL")
        if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and 0 < timeout < float("inf")):
            raise ValueError(f"timeout = {timeout!r}: expected a positive number of seconds")
        if not (retries is None or (isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0)):
            raise ValueError(f"retries = {retries!r}: expected None (no cap) or an integer >= 0")
        if not (isinstance(backoff, (int, float)) and not isinstance(backoff, bool) and 0 <= backoff < float("inf")):
            raise ValueError(f"backoff = {backoff!r}: expected a number of seconds >= 0")
        if not (
            isinstance(retry_window, (int, float))
            and not isinstance(retry_window, bool)
            and 0 <= retry_window < float("inf")
        ):
            raise ValueError(f"retry_window = {retry_window!r}: expected a number of seconds >= 0")
        self.base_url = base_url.rstrip("/")
        self.token = None if token is None else _check_token(token, "token")
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.retry_window = float(retry_window)
        parts = urllib.parse.urlsplit(self.base_url)
        if not parts.hostname:
            raise ValueError(f"base_url = {base_url!r}: expected a host, as in http://127.0.0.1:8787")
        self._https = parts.scheme == "https"
        self._netloc = parts.netloc
        self._prefix = parts.path
        # One connection per thread (http.client connections are not thread-safe).
        self._local = threading.local()

    def close(self) -> None:
        """Close this thread's connection (a later request opens a new one)."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------

    def _once(
        self, method: str, path: str, body: Any, token: str | None
    ) -> tuple[int, Mapping[str, str], bytes]:
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        tok = token if token is not None else self.token
        if tok is not None:
            headers["Authorization"] = f"Bearer {tok}"
        while True:
            conn = getattr(self._local, "conn", None)
            reused = conn is not None
            if conn is None:
                cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                conn = self._local.conn = cls(self._netloc, timeout=self.timeout)
            try:
                conn.request(method, self._prefix + path, body=data, headers=headers)
                r = conn.getresponse()
                payload = r.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if reused:
                    # Most likely the server closed the kept-alive connection while it was idle
                    # (its header timeout): send once more on a new connection, not counted as a
                    # retry. Safe as any retry here: decisions carry a request_id, rewards are
                    # idempotent per decision_id.
                    continue
                raise
            except BaseException:
                self.close()
                raise
            if r.will_close:
                self.close()
            return r.status, dict(r.getheaders()), payload

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        raw: bool = False,
    ) -> Any:
        """Send one request (retried on network errors and 5xx); return the decoded JSON answer
        (or the bytes with ``raw=True``). Raises :class:`ServiceError` for a 4xx, or for a 5xx
        that persists. A 409 is raised too (see :meth:`Experiment.decide` for the waiting)."""
        last: Exception | None = None
        started = time.monotonic()
        attempt = 0
        while True:
            pause: float | None = None
            try:
                status, headers, payload = self._once(method, path, body, token)
            except (http.client.HTTPException, ConnectionError, TimeoutError, OSError) as e:
                last = e
            else:
                if status >= 500:
                    last = ServiceError(status, payload.decode(errors="replace"), None)
                    header = headers.get("Retry-After") or headers.get("retry-after")
                    try:
                        pause = float(header) if header is not None else None
                    except ValueError:
                        pause = None
                elif status >= 400:
                    try:
                        parsed = json.loads(payload)
                    except ValueError:
                        parsed = None
                    message = (
                        parsed.get("error", payload.decode(errors="replace"))
                        if isinstance(parsed, dict)
                        else payload.decode(errors="replace")
                    )
                    err = ServiceError(status, message, parsed)
                    err.retry_after = headers.get("Retry-After") or headers.get("retry-after")
                    raise err
                elif raw:
                    return payload
                else:
                    return json.loads(payload) if payload else None
            attempt += 1
            left = self.retry_window - (time.monotonic() - started)
            if (self.retries is not None and attempt > self.retries) or left <= 0:
                break
            if pause is None or not (0 <= pause < float("inf")):
                pause = self.backoff * 2 ** (attempt - 1)
            time.sleep(max(0.0, min(pause, 1.0, left)))
        if isinstance(last, ServiceError):
            raise last
        raise ServiceError(
            0,
            f"{method} {path}: no answer after {attempt} attempts in "
            f"{time.monotonic() - started:.1f} s (retry_window = {self.retry_window}): {last}",
        )

    # -- admin -------------------------------------------------------------------------------

    def health(self) -> dict:
        """``GET /v1/health``."""
        return self.request("GET", "/v1/health")

    def create(
        self,
        name: str,
        *,
        policy: Mapping[str, Any] | str,
        arms: int | Sequence[Sequence[float]] | None = None,
        dim: int | None = None,
        horizon: int | None = None,
        delta: float | None = None,
        dropout_reward: float | None = None,
        reward_deadline: float | None = None,
        allow_non_private: bool = False,
        request_id: str | None = None,
        **extra: Any,
    ) -> "Experiment":
        """Create an experiment (admin) and return it with its client token. Idempotent: the
        create carries a ``request_id`` (generated when not given), so a retry after a lost
        answer gets the experiment (and a fresh client token) instead of a 409."""
        body: dict[str, Any] = {"name": name, "policy": policy}
        for k, v in (
            ("arms", arms),
            ("dim", dim),
            ("horizon", horizon),
            ("delta", delta),
            ("dropout_reward", dropout_reward),
            ("reward_deadline", reward_deadline),
        ):
            if v is not None:
                body[k] = v
        if allow_non_private:
            body["allow_non_private"] = True
        body.update(extra)
        body["request_id"] = request_id or f"create-{uuid.uuid4()}"
        answer = self.request("POST", "/v1/experiments", body)
        return Experiment(self, name, client_token=answer["client_token"], created=answer)

    def metrics(self) -> str:
        """``GET /metrics`` (admin): the Prometheus text format."""
        return self.request("GET", "/metrics", raw=True).decode()

    def experiments(self) -> list[dict]:
        """``GET /v1/experiments`` (admin)."""
        return self.request("GET", "/v1/experiments")["experiments"]

    def experiment(self, name: str, client_token: str | None = None) -> "Experiment":
        """An existing experiment; without ``client_token`` its calls use this client's token
        (the admin token can do everything)."""
        return Experiment(self, name, client_token=client_token)

    def audit(self, experiment: str | None = None, after: int = 0, limit: int = 1000) -> list[dict]:
        """``GET /v1/audit`` (admin): audit entries after ``after``."""
        q: dict[str, Any] = {"after": after, "limit": limit}
        if experiment is not None:
            q["experiment"] = experiment
        return self.request("GET", "/v1/audit?" + urllib.parse.urlencode(q))["entries"]


class Experiment:
    """One experiment of a service: decisions, rewards, status, close and report."""

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        client_token: str | None = None,
        created: dict | None = None,
    ):
        if not isinstance(name, str) or not name:
            raise ValueError(f"name = {name!r}: expected a non-empty string")
        self.client = client
        self.name = name
        self.client_token = client_token
        self.created = created
        self._path = "/v1/experiments/" + urllib.parse.quote(name, safe="")

    def _call(self, method: str, sub: str, body: Any = None, **kw: Any) -> Any:
        return self.client.request(method, self._path + sub, body, token=self.client_token, **kw)

    def decide(
        self,
        *,
        actions: Sequence[Sequence[float]] | None = None,
        request_id: str | None = None,
        wait: float = 30.0,
    ) -> dict:
        """Ask for the next decision: ``{"decision_id", "arm", "propensity"?}``. Retried with
        the same ``request_id`` (generated when not given) after a lost answer; at a commitment
        boundary (409 with ``"retry_after_ms"`` in the body, or a ``Retry-After`` header) it
        waits that long and asks again, for at most ``wait`` seconds, then raises
        :class:`Pending`. A stopped (BAI) or closed experiment raises :class:`ServiceError` with
        status 409 at once (``body["stopped"]`` / ``body["closed"]``)."""
        body: dict[str, Any] = {"request_id": request_id or f"decide-{uuid.uuid4()}"}
        if actions is not None:
            body["actions"] = [list(map(float, a)) for a in actions]
        deadline = time.monotonic() + wait
        while True:
            try:
                return self._call("POST", "/decisions", body)
            except ServiceError as e:
                pause = _retry_pause(e) if e.status == 409 else None
                if pause is None:
                    raise
                if time.monotonic() + pause > deadline:
                    raise Pending(e.status, e.message, e.body) from None
                time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))

    def reward(self, decision_id: int, reward: float) -> dict:
        """Report a decision's reward (idempotent per ``decision_id``: a retry is answered
        ``"duplicate"`` and not applied; ``"differs": true`` when the first value differed)."""
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise TypeError(f"reward = {reward!r}: expected a number")
        if not float(reward) == float(reward) or float(reward) in (float("inf"), float("-inf")):
            raise ValueError(f"reward = {reward!r}: expected a finite number (NaN and inf are refused)")
        return self._call(
            "POST", "/rewards", {"decision_id": int(decision_id), "reward": float(reward)}
        )

    def abandon(self, decision_id: int) -> dict:
        """Abandon a pending decision: the experiment's ``dropout_reward`` is recorded."""
        return self._call("POST", f"/decisions/{int(decision_id)}/abandon", {})

    def status(self) -> dict:
        """``GET /v1/experiments/{name}``: counts, the open commitment, guarantee, ledger."""
        return self._call("GET", "")

    def ledger(self, after: int = 0, limit: int = 1000) -> dict:
        """One page of the ledger (``next_after`` when more follow)."""
        return self._call("GET", "/ledger?" + urllib.parse.urlencode({"after": after, "limit": limit}))

    def rotate_token(self) -> str:
        """A new client token (admin); the old one stops working at once."""
        answer = self.client.request("POST", self._path + "/token", {})
        return answer["client_token"]

    def close(self, level: float = 0.95) -> dict:
        """Close the experiment (admin) and return its report (recorded once in the audit log;
        a repeat returns the same report with ``"repeat": true``)."""
        return self.client.request("POST", self._path + "/close", {"level": level})

    def report(self, format: str = "json") -> Any:
        """The closed experiment's report: a dict (``"json"``) or the HTML page (``"html"``)."""
        if format not in ("json", "html"):
            raise ValueError(f"format = {format!r}: expected 'json' or 'html'")
        if format == "html":
            return self._call("GET", "/report?format=html", raw=True).decode()
        return self._call("GET", "/report?format=json")

    def export(self, format: str = "jsonl", after: int = 0, limit: int = 10000) -> Any:
        """Decisions with their rewards (admin; protected data): a list of dicts for
        ``"jsonl"``, the CSV text for ``"csv"``."""
        if format not in ("jsonl", "csv"):
            raise ValueError(f"format = {format!r}: expected 'jsonl' or 'csv'")
        q = urllib.parse.urlencode({"format": format, "after": after, "limit": limit})
        text = self.client.request("GET", f"{self._path}/export?{q}", raw=True).decode()
        if format == "csv":
            return text
        return [json.loads(line) for line in text.splitlines() if line.strip()]
