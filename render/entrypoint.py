"""tiled-operator's entrypoint of the Tiled containers.

The operator writes this file into the instance's ConfigMap beside config.yml; the pod runs

    python /deploy/config/entrypoint.py migrate --wait SECONDS --catalog URI [--auth URI]
        (init container "migrate")
    python /deploy/config/entrypoint.py serve config --host 0.0.0.0 --port 8000 --scalable
        (container "tiled": Tiled's own command line, run in this process)
    python /deploy/config/entrypoint.py revisions --wait SECONDS --catalog URI [--auth URI]
        (the upgrade's check Job: the databases' revisions and the ones this image requires)

migrate and revisions leave a JSON report as the container's termination message: the Tiled version,
and per database its current revision, the one this version requires and whether it knows the
current one.

It uses only what the Tiled image holds (Python, asyncpg, SQLAlchemy, Tiled) and does what Tiled 0.2.20
cannot be configured to do:

- Database credentials stay out of logs and command lines. Tiled logs its catalog URI at start, and
  the init steps pass URIs as arguments. A managed database's URIs hold no credentials at all (PGUSER
  and PGPASSWORD do: asyncpg, for the catalog and auth databases, and libpq, for SQL storage through
  ADBC, both read them). A password inside an external catalog or auth URI (CATALOG_DATABASE_URI,
  AUTH_DATABASE_URI) is moved into a private .pgpass file (PGPASSFILE) before anything reads the URI.
  (An external storage URI is left as it is: Tiled keeps its credentials apart and never logs them,
  and would turn a user without a password into the password "None".)
- The single-user API key is handed to `tiled serve` as --api-key inside this process: Tiled prints the
  key in its start-up banner unless the key was given on its command line, and the process's visible
  command line (/proc) keeps only the arguments above.
- Pooled connections are checked before use (SQLAlchemy's pool pre-ping): Tiled creates its catalog
  pool with pool_pre_ping=False, so the first request after PostgreSQL restarts would otherwise fail
  on a stale connection.
- migrate never initialises a catalog for an instance that had one: once the operator recorded the
  instance's catalog, its ConfigMap holds catalog-expected ("true"), mounted beside this file, and an
  empty (unstamped) catalog database is then a lost one (a database claim deleted and made again, a
  database dropped). migrate refuses it, exits non-zero and reports {"catalogLost": true, ...}: the
  operator stops Tiled and names the loss (status.catalogLost), rather than Tiled serving a new,
  empty catalog as if nothing had happened.
- serve leaves for the readiness check (ready.py, beside this file) what this Tiled runs with: its
  port, its catalog's URI and its streaming cache, as config.yml names them (secrets as ${VAR}), in
  a file of the pod's own (HOME/.tiled-operator-serving.json, mode 600): a ConfigMap changed under a
  running pod does not change what the pod is judged on.
- migrate waits (bounded) until the database accepts connections, with one log line per ten seconds,
  instead of failing into a restart back-off, and migrates under a PostgreSQL advisory lock, so that
  of several replicas starting on a new database exactly one creates the tables.
"""

import asyncio
import os
import subprocess
import sys
import time
from urllib.parse import unquote, urlsplit, urlunsplit

# Environment variables that may hold external database URIs whose password is moved to .pgpass
# (render.EnvCatalogURI, render.EnvAuthURI).
URI_VARIABLES = ("CATALOG_DATABASE_URI", "AUTH_DATABASE_URI")
# The single-user API key (render.EnvAPIKey).
API_KEY_VARIABLE = "TILED_SINGLE_USER_API_KEY"
# pg_advisory_lock key held while migrating: "tiledmig" as a 64-bit integer.
MIGRATION_LOCK = int.from_bytes(b"tiledmig", "big")
# How often migrate says that it is still waiting.
LOG_EVERY = 10.0


def say(msg):
    print(f"[tiled-operator] {msg}", flush=True)


# Credentials.


def split_password(uri):
    """Return (uri without its password, user, password); password is None when there is none."""
    parts = urlsplit(uri)
    userinfo, at, hostinfo = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return uri, None, None
    user, _, password = userinfo.partition(":")
    bare = urlunsplit(parts._replace(netloc=f"{user}@{hostinfo}"))
    return bare, unquote(user), unquote(password)


def pgpass_field(s):
    return s.replace("\\", "\\\\").replace(":", "\\:")


def hide_passwords(uris):
    """Move passwords out of URIs into a .pgpass file; return the URIs without them.

    Entries match any host and port (libpq and asyncpg read PGPASSFILE) by database and user.
    """
    out, lines = [], []
    for uri in uris:
        bare, user, password = split_password(uri)
        out.append(bare)
        if password is not None:
            database = urlsplit(bare).path.lstrip("/") or "*"
            lines.append(":".join(["*", "*", pgpass_field(database), pgpass_field(user), pgpass_field(password)]))
    if lines:
        path = os.path.join(os.environ.get("HOME") or "/tmp", ".tiled-operator.pgpass")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.environ["PGPASSFILE"] = path
    return out


def hide_passwords_in_environment():
    names = [n for n in URI_VARIABLES if os.environ.get(n)]
    for name, bare in zip(names, hide_passwords([os.environ[n] for n in names])):
        os.environ[name] = bare


# Pool pre-ping.


def install_pool_pre_ping():
    """Check every pooled connection when it is checked out, replacing it when the check fails."""
    from sqlalchemy import event, exc
    from sqlalchemy.pool import Pool

    def ping(dbapi_connection, connection_record, connection_proxy):
        try:
            if hasattr(dbapi_connection, "ping"):  # SQLAlchemy's asyncpg and aiosqlite adapters
                dbapi_connection.ping()
            else:  # ADBC connections of SQL storage
                cursor = dbapi_connection.cursor()
                try:
                    cursor.execute("SELECT 1")
                    cursor.fetchall()
                finally:
                    cursor.close()
        except Exception as err:
            raise exc.DisconnectionError(f"stale pooled connection: {type(err).__name__}") from err

    event.listen(Pool, "checkout", ping)


# serve.


def summary(err):
    """One line naming what is wrong: pydantic's errors as `location: message`, else the exception."""
    errors = getattr(err, "errors", None)
    if callable(errors):
        try:
            return "; ".join(".".join(str(x) for x in e.get("loc", ())) + ": " + e.get("msg", "") for e in errors())
        except Exception:  # noqa: BLE001 - fall back to the exception's own text
            pass
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def check_config():
    """Parse the configuration as `tiled serve config` is about to. On failure print Tiled's message
    and then one line naming the problem: the kubelet keeps the log's tail as the container's
    termination message, and the instance's CrashLoopBackOff condition quotes its last line (Tiled's
    own output ends in "Aborted!")."""
    from tiled.config import parse_configs

    path = os.environ.get("TILED_CONFIG") or "config.yml"
    try:
        parse_configs(path)
    except Exception as err:  # noqa: BLE001 - whatever Tiled refuses, say what it is
        print(str(err), file=sys.stderr, flush=True)
        raise SystemExit(f"[tiled-operator] Tiled refuses its configuration {path}: {summary(err)}")


# What the readiness check (ready.py, render.ReadyCommand) reads: the port and the streaming cache
# this process serves with, under HOME (the pod's own emptyDir). ready.py.SERVING_FILE.
SERVING_FILE = ".tiled-operator-serving.json"


def record_serving(args):
    """Leave for ready.py what this Tiled is started with: its port, its catalog's URI and its
    streaming cache, as config.yml has them (secrets only as ${VAR} references, which ready.py
    expands from the container's environment as Tiled does). The ConfigMap may change under a
    running pod (its new template waiting for a rollout); the check must judge the pod on the
    configuration it runs."""
    import glob
    import json

    import yaml

    cfg = {}
    path = os.environ.get("TILED_CONFIG") or "config.yml"
    files = sorted(glob.glob(os.path.join(path, "*.yml")) + glob.glob(os.path.join(path, "*.yaml"))) if os.path.isdir(path) else [path]
    for f in files:
        with open(f) as fh:
            cfg.update(yaml.safe_load(fh) or {})
    port = 8000
    for i, a in enumerate(args[:-1]):
        if a == "--port":
            port = int(args[i + 1])
    serving = {"port": port, "catalog": (cfg.get("catalog") or {}).get("uri"), "streaming_cache": cfg.get("streaming_cache")}
    target = os.path.join(os.environ.get("HOME") or "/tmp", SERVING_FILE)
    fd = os.open(target + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(serving, fh)
    os.replace(target + ".new", target)


def serve(args):
    hide_passwords_in_environment()
    check_config()
    try:
        record_serving(args)
    except Exception as err:  # noqa: BLE001 - Tiled serves all the same; the readiness check says it lacks the file
        say(f"cannot record what this Tiled serves with for the readiness check: {summary(err)}")
    install_pool_pre_ping()
    key = os.environ.get(API_KEY_VARIABLE)
    if key and "--api-key" not in args:
        args = args + ["--api-key", key]
    from tiled.commandline.main import main

    sys.argv = ["tiled", "serve"] + args
    return main()


# migrate.

# Errors retrying cannot mend: wrong password, unknown role or database.
FATAL = ("InvalidPasswordError", "InvalidAuthorizationSpecificationError", "InvalidCatalogNameError")


def is_postgres(uri):
    return urlsplit(uri).scheme.split("+")[0] in ("postgresql", "postgres")


def dsn(uri):
    """The URI as asyncpg takes it: without a SQLAlchemy driver suffix."""
    parts = urlsplit(uri)
    return urlunsplit(parts._replace(scheme="postgresql"))


def where(uri):
    parts = urlsplit(uri)
    return f"{parts.hostname}:{parts.port or 5432}{parts.path}"


async def wait_for(uri, deadline, limit):
    import asyncpg

    start, last_log = time.monotonic(), None
    while True:
        try:
            conn = await asyncpg.connect(dsn(uri), timeout=10)
            await conn.close()
            if last_log is not None:
                say(f"database {where(uri)} accepts connections after {time.monotonic() - start:.0f}s")
            return
        except Exception as err:  # noqa: BLE001 - any failure to connect is reported and retried
            reason = f"{type(err).__name__}: {err}"
            if type(err).__name__ in FATAL:
                raise SystemExit(f"[tiled-operator] database {where(uri)} refuses the connection: {reason}")
            now = time.monotonic()
            if now >= deadline:
                raise SystemExit(
                    f"[tiled-operator] database {where(uri)} did not accept connections within {limit}s: {reason}"
                )
            if last_log is None or now - last_log >= LOG_EVERY:
                say(f"waiting for database {where(uri)} ({now - start:.0f}s of {limit}s): {reason}")
                last_log = now
            await asyncio.sleep(1)


def error_line(output):
    """The last line of a failed command's output that names an exception, without its SQL: what the
    instance's condition quotes."""
    for line in reversed(output.splitlines()):
        line = line.strip()
        if ("Error" in line or "Exception" in line) and ":" in line and not line.startswith("[SQL"):
            return line
    return ""


def run(*args, check=True):
    say("running tiled " + " ".join(args))
    # Plain tracebacks (Typer draws framed ones otherwise), lines not wrapped mid-message.
    env = dict(os.environ, _TYPER_STANDARD_TRACEBACK="1", COLUMNS="200")
    r = subprocess.run([sys.executable, "-m", "tiled", *args], env=env, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(r.stderr)
    sys.stderr.flush()
    if check and r.returncode != 0:
        why = error_line(r.stderr)
        raise SystemExit(
            f"[tiled-operator] tiled {args[0]} {args[1]} failed with exit code {r.returncode}" + (f": {why}" if why else "")
        )
    return r.returncode


# Revisions.

# Where the kubelet reads a container's termination message: the operator reads the revisions the
# migrate and revisions steps report there (status.database.catalogRevision, the upgrade's check).
TERMINATION_LOG = "/dev/termination-log"


async def current_revision(uri):
    """The alembic revision a database is stamped with, None when it has none (a new database)."""
    import asyncpg

    conn = await asyncpg.connect(dsn(uri), timeout=10)
    try:
        if await conn.fetchval("SELECT to_regclass('alembic_version')") is None:
            return None
        rows = await conn.fetch("SELECT version_num FROM alembic_version")
        if len(rows) != 1:
            raise SystemExit(f"[tiled-operator] database {where(uri)} is stamped with {len(rows)} alembic revisions")
        return rows[0]["version_num"]
    finally:
        await conn.close()


def revision_report(catalog, auth):
    """What this image's Tiled expects of the databases and what they hold: the version, and for the
    catalog (and auth) database its current revision, the revision this version requires and whether
    this version knows the current one (an unknown one is newer: a downgrade)."""
    import tiled
    from tiled.authn_database import core as authn
    from tiled.catalog import core as cat

    def one(uri, module):
        current = asyncio.run(current_revision(uri)) if uri and is_postgres(uri) else None
        return {
            "current": current,
            "required": module.REQUIRED_REVISION,
            "known": current is None or current in module.ALL_REVISIONS,
        }

    report = {"version": tiled.__version__, "catalog": one(catalog, cat)}
    if auth:
        report["auth"] = one(auth, authn)
    return report


def publish(report):
    """Print the report and leave it as the container's termination message (one JSON line)."""
    import json

    line = json.dumps(report, sort_keys=True, separators=(",", ":"))
    print(line, flush=True)
    if not os.path.exists(TERMINATION_LOG):
        return  # not in a pod: the kubelet mounts the file
    with open(TERMINATION_LOG, "w") as f:
        f.write(line)


# The ConfigMap key (render.CatalogExpectedKey) saying the instance had a catalog, mounted as a file
# beside this one.
CATALOG_EXPECTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "catalog-expected")


def catalog_expected():
    """Whether the operator recorded a catalog for this instance (the ConfigMap's catalog-expected)."""
    try:
        with open(CATALOG_EXPECTED) as f:
            return f.read().strip().lower() == "true"
    except FileNotFoundError:
        return False


def refuse_lost_catalog(uri, report):
    """The catalog database is empty where the instance had a catalog: report it and exit non-zero,
    initialising nothing."""
    report = dict(report, catalogLost=True)
    publish(report)
    raise SystemExit(
        f"[tiled-operator] the catalog database {where(uri)} holds no catalog, but this instance had one "
        f"(catalog-expected in its ConfigMap): it was lost (a new, empty database volume?); refusing to "
        f"initialise an empty catalog in its place. Restore a backup (spec.backup.onCatalogLost: RestoreLatest) "
        f"or accept the loss (annotation tiled.blueskyproject.io/accept-catalog-loss); docs/backups.md"
    )


def migrate_steps(catalog, auth):
    """Bring the databases to the revisions this Tiled requires.

    A database without a revision stamp is new: `catalog init` creates its tables and stamps the
    latest revision. One stamped with an older revision is upgraded: `upgrade-database` runs the
    revisions between its stamp and this version's. One already at this version's revision is left
    alone: `upgrade-database` would find nothing to run, after a second Python process had imported
    Tiled's command line (seconds of CPU at every start of every Tiled pod). `catalog init
    --if-not-exists` is not used on an existing database: a newer Tiled's init refuses an older
    database (DatabaseUpgradeNeeded) before the upgrade could run. The auth database likewise:
    `admin initialize-database` for a new one, `admin upgrade-database` for an older one."""
    before = revision_report(catalog, auth)
    for name, uri in (("catalog", catalog), ("auth", auth)):
        if name in before and not before[name]["known"]:
            raise SystemExit(
                f"[tiled-operator] the {name} database {where(uri)} is at revision {before[name]['current']}, "
                f"which Tiled {before['version']} does not know (a newer Tiled migrated it): restore a backup taken before"
            )
    if catalog and is_postgres(catalog) and before["catalog"]["current"] is None and catalog_expected():
        refuse_lost_catalog(catalog, before)
    steps = (
        ("catalog", catalog, ("catalog", "init"), ("catalog", "upgrade-database")),
        ("auth", auth, ("admin", "initialize-database"), ("admin", "upgrade-database")),
    )
    for name, uri, init, upgrade in steps:
        if not uri:
            continue
        rev = before[name]
        if rev["current"] is None:
            run(*init, uri)
        elif rev["current"] != rev["required"]:
            run(*upgrade, uri)
        else:
            say(f"the {name} database {where(uri)} is at revision {rev['current']}, the one Tiled {before['version']} requires: nothing to migrate")


async def migrate_locked(catalog, auth):
    import asyncpg

    conn = await asyncpg.connect(dsn(catalog), timeout=10)
    try:
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", MIGRATION_LOCK):
            start = last_log = time.monotonic()
            say(f"another replica is migrating {where(catalog)}; waiting for it to finish")
            while not await conn.fetchval("SELECT pg_try_advisory_lock($1)", MIGRATION_LOCK):
                if time.monotonic() - last_log >= 3 * LOG_EVERY:
                    last_log = time.monotonic()
                    say(f"still waiting for another replica's migration ({last_log - start:.0f}s)")
                await asyncio.sleep(1)
        await asyncio.to_thread(migrate_steps, catalog, auth)
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
    finally:
        await conn.close()


def uris_from(args, prog):
    import argparse

    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--wait", type=int, default=300, help="seconds to wait for the database")
    p.add_argument("--catalog", required=True, help="catalog database URI; ${VAR} is expanded")
    p.add_argument("--auth", default="", help="authentication database URI; ${VAR} is expanded")
    a = p.parse_args(args)
    catalog, auth = (os.path.expandvars(u) if u else "" for u in (a.catalog, a.auth))
    catalog, auth = hide_passwords([catalog, auth])
    deadline = time.monotonic() + a.wait
    for uri in (catalog, auth):
        if uri and is_postgres(uri):
            asyncio.run(wait_for(uri, deadline, a.wait))
    return catalog, auth


def migrate(args):
    catalog, auth = uris_from(args, "entrypoint.py migrate")
    if is_postgres(catalog):
        asyncio.run(migrate_locked(catalog, auth))
    else:
        migrate_steps(catalog, auth)
    report = revision_report(catalog, auth)
    say(f"databases are at the revisions Tiled {report['version']} requires")
    publish(report)
    return 0


def revisions(args):
    """Report the databases' revisions and the ones this image's Tiled requires; change nothing."""
    catalog, auth = uris_from(args, "entrypoint.py revisions")
    publish(revision_report(catalog, auth))
    return 0


COMMANDS = {"migrate": migrate, "revisions": revisions, "serve": serve}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit("usage: entrypoint.py migrate|revisions|serve ARGS...")
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
