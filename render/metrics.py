"""tiled-operator's metrics sidecar of the Tiled pods (spec.monitoring.serviceMonitor).

The operator writes this file into the instance's ConfigMap beside entrypoint.py when the instance asks
for a ServiceMonitor; the pod runs

    python /deploy/config/metrics.py exec python /deploy/config/entrypoint.py serve ...
        (container "tiled": empties PROMETHEUS_MULTIPROC_DIR, then becomes the command after `exec`)
    python /deploy/config/metrics.py serve
        (container "metrics", on the Tiled image: serves the metrics Tiled left in that directory)

Why: Tiled 0.2.20 serves its Prometheus metrics at /api/v1/metrics only to a key with the `metrics`
scope, and in single-user mode its only key is the single-user API key, which has every scope. So the
Tiled container gets PROMETHEUS_MULTIPROC_DIR, a directory on an emptyDir shared with the sidecar:
prometheus_client then keeps Tiled's metrics in memory-mapped files there (Tiled's own /api/v1/metrics
reads them back with MultiProcessCollector). The sidecar reads the same files, with the same
collector, and answers GET /metrics only to `Authorization: Bearer <token>`, the token of the
instance's metrics Secret: Prometheus never holds a Tiled key, and it works under OIDC alike.

The directory is emptied each time the Tiled container starts (`exec`): an emptyDir survives container
restarts, and the restarted Tiled (pid 1 again) would otherwise carry on from the old files.

Environment of `serve`: METRICS_DIR (the shared directory, mounted read-only), METRICS_PORT, and
METRICS_TOKEN (from the metrics Secret). It uses only the Python standard library and prometheus_client,
which the Tiled image holds.
"""

import hmac
import os
import shutil
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"  # render.EnvMetricsDir, in the Tiled container
PATH = "/metrics"


def say(msg):
    print(f"[tiled-operator metrics] {msg}", file=sys.stderr, flush=True)


# exec: the Tiled container.


def empty(directory):
    """Remove everything inside directory (not the directory: it is the emptyDir's mount point)."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def exec_(args):
    if not args:
        sys.exit("usage: metrics.py exec COMMAND [ARGS...]")
    directory = os.environ.get(DIR_VARIABLE)
    if directory:
        empty(directory)
    os.execvp(args[0], args)


# serve: the sidecar.


def collect(directory):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)
    return generate_latest(registry)


def handler(directory, token):
    from prometheus_client import CONTENT_TYPE_LATEST

    expected = ("Bearer " + token).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "tiled-operator-metrics"
        sys_version = ""

        def reply(self, code, body, content_type="text/plain; charset=utf-8", head=False):
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if code == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="metrics"')
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def answer(self, head):
            if self.path.split("?", 1)[0] != PATH:
                return self.reply(404, b"not found\n", head=head)
            given = self.headers.get("Authorization", "").encode("latin-1", "replace")
            if not hmac.compare_digest(given, expected):
                return self.reply(401, b"unauthorized\n", head=head)
            try:
                body = collect(directory)
            except Exception as err:  # noqa: BLE001 - e.g. a file removed while Tiled restarts
                say(f"reading {directory}: {type(err).__name__}: {err}")
                return self.reply(503, b"metrics unavailable\n", head=head)
            return self.reply(200, body, CONTENT_TYPE_LATEST, head=head)

        def do_GET(self):  # noqa: N802 - http.server's name
            self.answer(head=False)

        def do_HEAD(self):  # noqa: N802
            self.answer(head=True)

        def log_message(self, format, *args):  # noqa: A002 - quiet: Prometheus scrapes every interval
            pass

    return Handler


def serve(args):
    if args:
        sys.exit("usage: metrics.py serve (configured by METRICS_DIR, METRICS_PORT, METRICS_TOKEN)")
    directory = os.environ.get("METRICS_DIR", "")
    token = os.environ.get("METRICS_TOKEN", "")
    port = int(os.environ.get("METRICS_PORT", "9090"))
    if not directory or not os.path.isdir(directory):
        sys.exit(f"[tiled-operator metrics] METRICS_DIR {directory!r} is not a directory")
    if not token:
        sys.exit("[tiled-operator metrics] METRICS_TOKEN is empty")
    server = ThreadingHTTPServer(("", port), handler(directory, token))
    server.daemon_threads = True
    # The sidecar is pid 1 of its container, and the kernel does not give pid 1 a signal's default
    # action: without a handler SIGTERM is ignored, and every Tiled pod waited out its whole grace
    # period (30 s) before SIGKILL on each rollout, upgrade or eviction. Stop at once instead.
    signal.signal(signal.SIGTERM, stop)
    say(f"serving {PATH} on port {port} from {directory}")
    try:
        server.serve_forever()
    except SystemExit:
        say("SIGTERM: stopped")
    return 0


def stop(signum, frame):  # noqa: ARG001 - a signal handler's signature
    raise SystemExit(0)


COMMANDS = {"exec": exec_, "serve": serve}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit("usage: metrics.py exec COMMAND [ARGS...] | metrics.py serve")
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
