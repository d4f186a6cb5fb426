"""tiled-operator's readiness check of a Tiled container.

The operator writes this file into the instance's ConfigMap beside config.yml; the kubelet runs

    python -S /deploy/config/ready.py

as the Tiled container's readiness probe (render.ReadyCommand). It succeeds, silently, when this pod
can serve a beamline:

1. Tiled answers its catalog: a search of the catalog's root for no entries, sent to this container's
   own Tiled on 127.0.0.1, which runs a query on the catalog database's `nodes` table. It fails when
   Tiled does not answer, when the database is unreachable, or when the catalog's tables are gone
   (HTTP 500), and succeeds on an empty catalog. The request carries the single-user API key from
   the container's environment (TILED_SINGLE_USER_API_KEY), never from a command line. Without that
   key (OIDC) it is sent anonymously; when Tiled then asks for credentials (no anonymous access),
   the catalog database is queried directly instead, with asyncpg from the image.
2. The streaming cache Tiled was started with, when it has one, answers: AUTH (its password from the
   environment, as Tiled's configuration references it) and PING over the Redis protocol, through
   a Sentinel when Tiled uses one, over TLS when Tiled does. Tiled publishes every write to the cache
   before it stores it, so a cache that does not answer fails every write.

Otherwise it prints one line naming each part that fails, e.g.

    catalog: HTTP 500; database 10.0.0.7:5432/catalog: relation "nodes" does not exist
    streaming cache e2e-cache.beamlines.svc:6379: connection refused

and exits 1: the kubelet puts that line in the pod's Unhealthy Event. No secret is ever printed.

Which cache it checks is what the running Tiled was started with, not what the ConfigMap says now:
entrypoint.py's serve writes it, with the port, to the file SERVING_FILE under HOME (the pod's own
emptyDir) before it starts Tiled, with secrets only as the ${VAR} references of config.yml. The
ConfigMap is updated in place while a changed pod template waits for its rollout; the pods that
still run the old configuration are judged on it.

Its cost is paid every period by every Tiled pod: it uses only the standard library (asyncpg is
imported only to say why the catalog failed, or when it is the catalog check), runs without the site
module (-S) and sends one request over a plain socket. Each network step is bounded (STEP_SECONDS),
and all of them together (BUDGET_SECONDS), so that the check ends, with its line, before the
kubelet's timeout (render.ReadyTimeoutSeconds), whose enforcement on exec probes is not prompt.
"""

import json
import os
import re
import socket
import sys
import time

# What entrypoint.py's serve leaves for this check (entrypoint.SERVING_FILE), under HOME.
SERVING_FILE = ".tiled-operator-serving.json"
# The single-user API key (render.EnvAPIKey).
API_KEY_VARIABLE = "TILED_SINGLE_USER_API_KEY"
# How long each network step may take, in seconds: the HTTP request to Tiled, the cache's
# connection and replies, the database query that explains a failure. render.ReadyTimeoutSeconds
# leaves room for all three.
STEP_SECONDS = 3.0
# How long the whole check may take: less than render.ReadyTimeoutSeconds (10 s), so that the
# kubelet gets this check's line, not its own "command timed out".
BUDGET_SECONDS = 8.0
# The catalog check: the root's children, none of them returned (Tiled still runs its query on the
# nodes table and counts a bounded number of rows), without links.
SEARCH_PATH = "/api/v1/search/?page%5Blimit%5D=0&fields=&omit_links=true"
# The catalog table every request reads.
CATALOG_QUERY = "SELECT 1 FROM nodes LIMIT 1"

VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


DEADLINE = time.monotonic() + BUDGET_SECONDS


def remaining():
    """The time the next network step may take: STEP_SECONDS, or what is left of the budget."""
    return max(0.05, min(STEP_SECONDS, DEADLINE - time.monotonic()))


class Failed(Exception):
    """A part that fails; its text is the line printed (no secret in it)."""


def expand(text):
    """Expand ${VAR} as Tiled expands its configuration, from this process's environment (the
    container's). A variable that is not set stays as it is."""
    return VARIABLE.sub(lambda m: os.environ.get(m.group(1), m.group(0)), text)


def short(err):
    """The error in a few words, without the exception's class when its text says enough."""
    if isinstance(err, socket.timeout) or isinstance(err, TimeoutError):
        return "no answer in time"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, socket.gaierror):
        return f"cannot resolve the name ({err.strerror or err})"
    text = " ".join(str(err).split())
    return text or type(err).__name__


# The catalog, through Tiled.


def search(port, key):
    """GET the catalog search from this container's Tiled; return (status, body, request id).
    HTTP/1.0 over a socket, not http.client, whose import (the email package) would cost more than
    the request: this runs every period in every Tiled pod."""
    request = [f"GET {SEARCH_PATH} HTTP/1.0", f"Host: 127.0.0.1:{port}", "Accept: application/json"]
    if key:
        request.append("Authorization: Apikey " + key)
    sock = socket.create_connection(("127.0.0.1", port), timeout=remaining())
    try:
        sock.sendall(("\r\n".join(request) + "\r\n\r\n").encode())
        data = b""
        while True:  # HTTP/1.0: the server closes the connection after the response
            sock.settimeout(remaining())
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise ConnectionError(f"not an HTTP response: {lines[0][:80]!r}")
    request_id = ""
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "x-tiled-request-id":
            request_id = value.strip()
    return status, body[:2048], request_id


def detail(body):
    """Tiled's own words from an error response ({"detail": ...}), one line, bounded."""
    try:
        d = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        d = None
    text = " ".join(str(d if d is not None else body.decode("utf-8", "replace")).split())
    return text[:200]


def check_catalog(serving):
    """Raise Failed naming what is wrong with the catalog as Tiled serves it."""
    key = os.environ.get(API_KEY_VARIABLE) or ""
    try:
        status, body, request = search(serving.get("port", 8000), key)
    except Exception as err:  # noqa: BLE001 - whatever stops the request, say what it is
        raise Failed(f"catalog: Tiled on 127.0.0.1:{serving.get('port', 8000)}: {short(err)}")
    if status == 200:
        return
    if status in (401, 403) and not key:
        # No single-user key (OIDC) and no anonymous access: Tiled cannot be asked without a
        # person's credentials; ask the catalog database what Tiled would.
        why = query_database(serving.get("catalog"))
        if why:
            raise Failed(f"catalog: {why}")
        return
    line = f"catalog: HTTP {status}"
    if status >= 500:
        # Tiled answers "Internal server error" and logs the cause under the request's ID; the
        # database says it in words. The ID only when the database does not: the same failure
        # prints the same line, which the kubelet counts as one Event.
        why = query_database(serving.get("catalog"))
        if why:
            line += f"; {why}"
        else:
            line += f": {detail(body)}" + (f" (request {request} in Tiled's log)" if request else "")
    else:
        line += f": {detail(body)}"
    raise Failed(line)


def query_database(uri):
    """Run CATALOG_QUERY on the catalog database Tiled uses; return what fails ("" when it works,
    or when it cannot be asked). Credentials come from the environment (PGUSER and PGPASSWORD, or
    the external URI's variable), as Tiled's own connections have them."""
    if not uri:
        return ""
    uri = expand(uri)
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.split("+")[0] not in ("postgresql", "postgres"):
        return ""
    where = rest.rpartition("@")[2].partition("?")[0]
    try:
        import site

        site.main()  # -S left the image's packages off sys.path
        import asyncio

        import asyncpg
    except Exception as err:  # noqa: BLE001 - an image without asyncpg: say so, Tiled's log has the rest
        return f"database {where}: cannot be asked ({short(err)})"

    async def ask():
        conn = await asyncpg.connect("postgresql://" + rest, timeout=remaining())
        try:
            await conn.execute(CATALOG_QUERY, timeout=remaining())
        finally:
            await conn.close(timeout=remaining())

    try:
        asyncio.run(asyncio.wait_for(ask(), remaining()))
    except Exception as err:  # noqa: BLE001 - what the database says is the point
        return f"database {where}: {short(err)}"
    return ""


# The streaming cache, over the Redis protocol (RESP).


def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Redis:
    """One connection: send a command, read its reply (simple, error, bulk or array of bulks)."""

    def __init__(self, host, port, tls=False, verify=True):
        sock = socket.create_connection((host, port), timeout=remaining())
        if tls:
            import ssl

            ctx = ssl.create_default_context()
            # As Tiled's client (redis-py): certificates verified unless the URI says
            # ssl_cert_reqs=none, host names not checked.
            ctx.check_hostname = False
            if not verify:
                ctx.verify_mode = ssl.CERT_NONE
            sock = ctx.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.buf = b""

    def close(self):
        self.sock.close()

    def line(self):
        while b"\r\n" not in self.buf:
            self.sock.settimeout(remaining())
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the connection was closed")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line.decode("utf-8", "replace")

    def exact(self, n):
        while len(self.buf) < n + 2:
            self.sock.settimeout(remaining())
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the connection was closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data.decode("utf-8", "replace")

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == "-":
            raise Failed(rest)
        if kind == "$":
            return None if int(rest) < 0 else self.exact(int(rest))
        if kind == "*":
            return None if int(rest) < 0 else [self.reply() for _ in range(int(rest))]
        return rest

    def call(self, *args):
        self.sock.sendall(command(*args))
        return self.reply()


def ping(host, port, username, password, db, tls, verify):
    """AUTH (when there is a password), SELECT (a database other than 0), PING."""
    r = Redis(host, port, tls, verify)
    try:
        if password is not None:
            try:
                r.call(*(["AUTH", username, password] if username else ["AUTH", password]))
            except Failed as err:
                # The server's refusal (WRONGPASS, ERR invalid password...) names no password.
                raise Failed(f"AUTH refused: {err}")
        if db:
            r.call("SELECT", db)
        answer = r.call("PING")
        if answer != "PONG":
            raise Failed(f"PING answered {answer!r}")
    finally:
        r.close()


def split_address(hostport, default_port):
    host, sep, port = hostport.rpartition(":")
    if not sep:
        return hostport, default_port
    return host.strip("[]"), int(port)


def check_uri(uri):
    """A standalone cache by URI: redis://[[user]:password@]host[:port][/db][?ssl_cert_reqs=none]."""
    from urllib.parse import parse_qs, unquote, urlsplit

    u = urlsplit(expand(uri))
    if u.scheme not in ("redis", "rediss"):
        return  # not a Redis-protocol cache (Tiled's memory datastore): nothing to reach
    host, port = u.hostname or "localhost", u.port or 6379
    username = unquote(u.username) if u.username else ""
    password = unquote(u.password) if u.password is not None else None
    db = u.path.strip("/") or (parse_qs(u.query).get("db") or [""])[0]
    verify = (parse_qs(u.query).get("ssl_cert_reqs") or ["required"])[0].lower() not in ("none", "cert_none")
    name = f"streaming cache {host}:{port}"
    try:
        ping(host, port, username, password, db if db not in ("", "0") else "", u.scheme == "rediss", verify)
    except Failed as err:
        raise Failed(f"{name}: {err}")
    except Exception as err:  # noqa: BLE001 - connection refused, a name that does not resolve, a timeout
        raise Failed(f"{name}: {short(err)}")


def check_sentinels(cache):
    """A cache behind Redis Sentinel: the first Sentinel that answers names the primary of the
    service (Sentinels are asked without a password, as Tiled asks them), which must answer."""
    service = cache.get("service_name") or ""
    tls = bool(cache.get("ssl"))
    password = cache.get("password")
    password = expand(password) if password is not None else None
    errors = []
    for s in cache.get("sentinels") or []:
        host, port = split_address(s, 26379)
        try:
            r = Redis(host, port, tls)
            try:
                primary = r.call("SENTINEL", "get-master-addr-by-name", service)
            finally:
                r.close()
        except Exception as err:  # noqa: BLE001 - try the next Sentinel
            errors.append(f"{s}: {short(err)}")
            continue
        if not primary:
            raise Failed(f"streaming cache: Sentinel {s} knows no service {service!r}")
        name = f"streaming cache {primary[0]}:{primary[1]} (primary of {service!r})"
        try:
            ping(primary[0], int(primary[1]), "", password, "", tls, True)
        except Failed as err:
            raise Failed(f"{name}: {err}")
        except Exception as err:  # noqa: BLE001
            raise Failed(f"{name}: {short(err)}")
        return
    raise Failed("streaming cache: no Sentinel answers (" + "; ".join(errors) + ")")


def check_cache(serving):
    cache = serving.get("streaming_cache")
    if not cache:
        return
    if cache.get("sentinels"):
        check_sentinels(cache)
    elif cache.get("uri"):
        check_uri(cache["uri"])


def main():
    path = os.path.join(os.environ.get("HOME") or "/tmp", SERVING_FILE)
    try:
        with open(path) as f:
            serving = json.load(f)
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else short(err)
        print(f"ready: {path}: {why} (entrypoint.py serve writes it before Tiled starts)", flush=True)
        return 1
    failed = []
    for check in (check_catalog, check_cache):
        try:
            check(serving)
        except Failed as err:
            failed.append(str(err))
    if failed:
        # The same words for the same failure: the kubelet counts a repeated Event instead of
        # recording a new one.
        print("; ".join(failed)[:1000], flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
