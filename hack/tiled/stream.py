"""Live streaming through a Tiled server's streaming cache, checked end to end.

Usage:
    stream.py check WRITER_URL READER_URL [--updates N] [--timeout S]
    stream.py latency WRITER_URL READER_URL [--updates N] [--timeout S]
    stream.py latency-pair WRITER_A WRITER_B READER_URL [--updates N] [--timeout S]
    stream.py replay URL [--key PATH --from SEQ] [--updates N] [--timeout S]
    stream.py probe URL [--timeout S]

What a beamline scientist does, with Tiled's own client (Tiled 0.2.20, tiled.client.stream):

    sub = client["scan/primary"].subscribe()     # ArraySubscription / TableSubscription /
                                                 # ContainerSubscription, by the node's family
    sub.new_data.add_callback(cb)                # arrays, tables: LiveArrayData, LiveTableData
    sub.child_created.add_callback(cb)           # containers: LiveChildCreated
    sub.start_in_thread(start=None)              # None: from the next update; N: replay from
                                                 # sequence N (as far back as the cache keeps)
    ...
    sub.disconnect()

Every update carries `sequence`, numbered per node by the cache (Redis INCR); a writer's
array.write/write_block/patch publishes `array-data`, a table's write/append_partition publishes
`table-data`, and creating a node publishes `container-child-created` to its parent.

Commands (each prints one JSON line on stdout and exits 0, or prints what failed on stderr and exits
1; waits are bounded by --timeout):

  check    creates a container, subscribes to it through READER_URL, then through WRITER_URL creates
           an array and an appendable table in it (the container's subscriber must see both children,
           in order); subscribes to each through READER_URL; patches N new rows into the array and
           appends N rows to the table, one at a time, each waited for; every update must arrive, in
           order, with consecutive sequence numbers and the payload written. Reports counts and the
           array's write-to-callback latency. WRITER_URL and READER_URL may be two replicas.
  latency  only the array part of check: {"p50_ms", "p99_ms", "n", ...}.
  latency-pair WRITER_A WRITER_B READER_URL
           the same, the writes alternating between two servers (A, B, A, B, ...) to one array,
           all seen by one subscriber through READER_URL: {"a": {"n", "p50_ms", "p99_ms", ...},
           "b": {...}}, each writer timed under the same load as the other.
  replay   subscribes with start=SEQ to the array at --key (one `check` wrote, e.g. through another
           server, or before Tiled restarted) and checks that the cached updates from SEQ to its last
           row are replayed in order, then that one more write arrives live after them (no gap, no
           duplicate). Without --key it first writes its own array (N rows) and replays from its first
           row's sequence (or --from).
  probe    reports, without judging, what a client sees: whether a subscription to the root is
           accepted, whether a write succeeds (the error and its correlation ID if not), and whether
           the subscriber hears of it. For the cases where streaming is off or misconfigured.

The API key comes from --api-key or the environment variable TILED_API_KEY; it is never printed.
Needs only what the Tiled image has: python with tiled[client], numpy and pyarrow.
"""

import argparse
import json
import os
import re
import sys
import threading
import time
import uuid

import numpy
import pyarrow

from tiled.client import from_uri

WIDTH = 8  # elements per array row: one detector frame of the fake scan
TABLE_SCHEMA = pyarrow.schema([("seq", pyarrow.int64()), ("motor", pyarrow.float64())])


class Failure(Exception):
    """A check failed: the message says what was expected and what arrived."""


class Refused(Exception):
    """The server refused the subscription (e.g. HTTP 500 at the websocket handshake)."""


def client(url, api_key):
    return from_uri(url, api_key=api_key)


# --- receiving -------------------------------------------------------------------------------------


class Collector:
    """A subscription callback that records every update with the time it arrived.

    Tiled's client runs callbacks on the subscription's executor, one worker thread by default, so
    they run one at a time in the order the websocket delivered the updates. The callback registry
    holds only a weak reference: the caller must keep this object alive.
    """

    def __init__(self, decode):
        self._decode = decode
        self._cond = threading.Condition()
        self.updates = []  # dicts: seq, arrived (time.monotonic()), and what decode returned

    def __call__(self, update):
        arrived = time.monotonic()
        try:
            fields = self._decode(update)
        except Exception as err:  # a payload that does not decode is a failure, reported later
            fields = {"error": f"{type(err).__name__}: {err}", "row": None, "values": None, "rows": None, "key": None}
        with self._cond:
            self.updates.append({"seq": update.sequence, "arrived": arrived, **fields})
            self._cond.notify_all()

    def wait(self, predicate, timeout):
        """Wait until predicate(updates) holds; return whether it did within timeout seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.updates), timeout)

    def snapshot(self):
        with self._cond:
            return list(self.updates)


def array_fields(update):
    # A patched row carries its offset; the array's first write (write_array) has none: row 0.
    data = update.data()
    row = update.offset[0] if update.offset else 0
    return {"row": row, "values": sorted(set(data.ravel().tolist()))}


def table_fields(update):
    frame = update.data()  # a pandas DataFrame of the appended rows
    return {"rows": [int(x) for x in frame["seq"]], "append": update.append, "partition": update.partition}


def child_fields(update):
    return {"key": update.key, "family": str(getattr(update.structure_family, "value", update.structure_family))}


def subscribe(node, registry, callback, timeout, start=None):
    """Subscribe to node and wait, bounded, for the websocket to connect.

    Tiled's own sub.start_in_thread() waits for the connection without a limit, and when the server
    refuses the handshake (HTTP 500: a server without a streaming cache) its thread dies and
    start_in_thread() never returns. This runs the same loop (Subscription._run, which reconnects and
    resumes after a dropped connection) in a thread of our own, and raises Refused instead.
    """
    sub = node.subscribe()
    getattr(sub, registry).add_callback(callback)
    errors = []

    def run():
        try:
            sub._run(start)
        except BaseException as err:  # noqa: BLE001 - reported to the caller
            errors.append(err)

    thread = threading.Thread(target=run, daemon=True, name=f"subscription {node.uri}")
    thread.start()
    deadline = time.monotonic() + timeout
    while not sub._connected_event.wait(0.1):
        if not thread.is_alive():
            err = errors[0] if errors else None
            why = f"{type(err).__name__}: {err}" if err else "its thread ended before connecting"
            raise Refused(f"subscription to {node.uri} refused: {why}")
        if time.monotonic() > deadline:
            raise Failure(f"subscription to {node.uri} did not connect within {timeout}s")
    sub._thread = thread  # so that sub.disconnect() joins it
    return sub


def warm_up(collector, write, is_warmup, timeout):
    """Repeat a write the counted updates ignore until the subscriber receives one; return the
    sequence number of the last one written, and how many it took.

    Tiled subscribes its websocket handler to the cache's notifications only after the handshake
    that start_in_thread() waits for, so an update published in between reaches no one (a client
    that must miss nothing passes start=SEQ and gets a replay). Waiting for the last warm-up write
    itself makes every earlier one either delivered already or lost, so the counted updates that
    follow must carry the next sequence numbers.
    """
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        n += 1
        write(n)
        if collector.wait(lambda ups: any(is_warmup(u, n) for u in ups), 1.0):
            last = next(u for u in collector.snapshot() if is_warmup(u, n))
            return last["seq"], n
    raise Failure(f"none of {n} warm-up writes reached the subscriber within {timeout}s (the writes "
                  "returned: does the server reach its streaming cache? its log says)")


def percentile(values, q):
    values = sorted(values)
    if not values:
        return None
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def ms(x):
    return None if x is None else round(x * 1000, 2)


def expect_consecutive(what, got, first_seq):
    """got must be the updates first_seq, first_seq+1, ... in that order."""
    seqs = [u["seq"] for u in got]
    want = list(range(first_seq, first_seq + len(got)))
    if seqs != want:
        raise Failure(f"{what}: sequence numbers {compact(seqs)}, expected consecutive {compact(want)}")


def compact(seqs, n=12):
    return str(seqs) if len(seqs) <= n else f"{seqs[:n // 2]}...{seqs[-n // 2:]} ({len(seqs)})"


# --- the array: a detector writing one frame (row) per point of a scan ------------------------------


def stream_array(writer_node, reader_node, updates, timeout):
    """Patch rows 1..updates into the array one at a time, each waited for at the subscriber.

    Row k holds the value k, so each update's payload says which write it is. writer_node may be a
    list of nodes (the same array through several servers): row k is then written through
    writer_node[(k - 1) % len], so that each writer's updates are timed interleaved with the others',
    under the same load, and the report holds each writer's figures in "by_writer". Returns the
    report and the subscription's first and last counted sequence numbers.
    """
    writers = writer_node if isinstance(writer_node, list) else [writer_node]
    got = Collector(array_fields)
    sub = subscribe(reader_node, "new_data", got, timeout)
    try:
        # Warm-up through each writer in turn: row 0 written again with -n (the counted rows are
        # >= 1); the numbers of one writer's warm-ups follow the previous writer's.
        base, warmups = None, 0
        for w in writers:
            first = warmups
            base, n = warm_up(
                got,
                lambda n, w=w, first=first: w.patch(numpy.full((1, WIDTH), -float(first + n)), offset=(0,)),
                lambda u, n, first=first: u["row"] == 0 and u["values"] == [-float(first + n)],
                timeout,
            )
            warmups += n
        counted_from = len(got.snapshot())
        sent, returned = [], []
        for k in range(1, updates + 1):
            w = writers[(k - 1) % len(writers)]
            sent.append(time.monotonic())
            w.patch(numpy.full((1, WIDTH), float(k)), offset=(k,), extend=True)
            returned.append(time.monotonic())
            if not got.wait(lambda ups: any(u["row"] == k for u in ups[counted_from:]), timeout):
                raise Failure(f"array: update {k} of {updates} (row {k}) did not arrive within {timeout}s; "
                              f"arrived: rows {[u['row'] for u in got.snapshot()[counted_from:]]}")
    finally:
        sub.disconnect()
    counted = got.snapshot()[counted_from:]
    rows = [u["row"] for u in counted]
    if rows != list(range(1, updates + 1)):
        raise Failure(f"array: rows arrived as {compact(rows)}, expected 1..{updates} once each, in order")
    bad = [u for u in counted if u.get("error") or u["values"] != [float(u["row"])]]
    if bad:
        raise Failure(f"array: payloads differ from what was written: {bad[:3]}")
    expect_consecutive("array", counted, base + 1)
    # Latency of each update: from the write call to the subscriber's callback, and from the write
    # call's return. Tiled publishes to the cache before it stores the data and answers, so the
    # callback often runs before the write returns (the second figure is then negative).
    from_call = [u["arrived"] - s for u, s in zip(counted, sent)]
    from_return = [u["arrived"] - r for u, r in zip(counted, returned)]
    write = [r - s for s, r in zip(sent, returned)]
    report = {
        "received": len(counted),
        "expected": updates,
        "warmup_writes": warmups,
        "first_seq": counted[0]["seq"],
        "last_seq": counted[-1]["seq"],
        "p50_ms": ms(percentile(from_call, 50)),
        "p99_ms": ms(percentile(from_call, 99)),
        "max_ms": ms(max(from_call)),
        "after_return_p50_ms": ms(percentile(from_return, 50)),
        "after_return_p99_ms": ms(percentile(from_return, 99)),
        "write_p50_ms": ms(percentile(write, 50)),
    }
    if len(writers) > 1:
        report["by_writer"] = [
            {"n": len(from_call[i::len(writers)]),
             "p50_ms": ms(percentile(from_call[i::len(writers)], 50)),
             "p99_ms": ms(percentile(from_call[i::len(writers)], 99)),
             "write_p50_ms": ms(percentile(write[i::len(writers)], 50))}
            for i in range(len(writers))
        ]
    return report


# --- the table: one row appended per event of a scan ------------------------------------------------


def stream_table(writer_node, reader_node, updates, timeout):
    got = Collector(table_fields)
    sub = subscribe(reader_node, "new_data", got, timeout)

    def append(seq):
        writer_node.append_partition(0, pyarrow.table({"seq": [seq], "motor": [seq * 0.5]}, schema=TABLE_SCHEMA))

    try:
        base, warmups = warm_up(got, lambda n: append(-n), lambda u, n: u["rows"] == [-n], timeout)
        counted_from = len(got.snapshot())
        for k in range(1, updates + 1):
            append(k)
            if not got.wait(lambda ups: any(u["rows"] == [k] for u in ups[counted_from:]), timeout):
                raise Failure(f"table: append {k} of {updates} did not arrive within {timeout}s")
    finally:
        sub.disconnect()
    counted = got.snapshot()[counted_from:]
    rows = [u["rows"] for u in counted]
    if rows != [[k] for k in range(1, updates + 1)]:
        raise Failure(f"table: rows arrived as {compact(rows)}, expected [1]..[{updates}] once each, in order")
    if any(u.get("error") or not u["append"] or u["partition"] != 0 for u in counted):
        raise Failure(f"table: updates are not appends to partition 0: {counted[:3]}")
    expect_consecutive("table", counted, base + 1)
    return {"received": len(counted), "expected": updates, "warmup_writes": warmups,
            "first_seq": counted[0]["seq"], "last_seq": counted[-1]["seq"]}


# --- commands -----------------------------------------------------------------------------------------


def check(args):
    writer, reader = client(args.writer_url, args.api_key), client(args.reader_url, args.api_key)
    run_key = f"stream-check-{uuid.uuid4().hex[:10]}"
    writer.create_container(run_key, metadata={"purpose": "hack/tiled/stream.py check"})
    run_w = writer[run_key]

    # The container: a subscriber of the run hears of each node created in it.
    children = Collector(child_fields)
    csub = subscribe(reader[run_key], "child_created", children, args.timeout)
    try:
        base, warmups = warm_up(
            children,
            lambda n: run_w.create_container(f"warmup-{n}"),
            lambda u, n: u["key"] == f"warmup-{n}",
            args.timeout,
        )
        counted_from = len(children.snapshot())
        run_w.write_array(numpy.zeros((1, WIDTH)), key="array")
        run_w.create_appendable_table(TABLE_SCHEMA, key="table")
        if not children.wait(lambda ups: len(ups) >= counted_from + 2, args.timeout):
            raise Failure(f"container: {len(children.snapshot()) - counted_from} of 2 child-created updates "
                          f"arrived within {args.timeout}s")
    finally:
        csub.disconnect()
    counted = children.snapshot()[counted_from:]
    got = [(u["key"], u["family"]) for u in counted]
    if got != [("array", "array"), ("table", "table")]:
        raise Failure(f"container: children arrived as {got}, expected array then table")
    expect_consecutive("container", counted, base + 1)
    container = {"received": len(counted), "expected": 2, "warmup_writes": warmups,
                 "first_seq": counted[0]["seq"], "last_seq": counted[-1]["seq"]}

    array = stream_array(run_w["array"], reader[run_key]["array"], args.updates, args.timeout)
    table = stream_table(run_w["table"], reader[run_key]["table"], args.updates, args.timeout)
    # What the subscribers saw is what was stored.
    stored = reader[run_key]["array"].read()
    if stored.shape != (args.updates + 1, WIDTH) or stored[1:, 0].tolist() != [float(k) for k in range(1, args.updates + 1)]:
        raise Failure(f"array: stored rows differ from what was streamed (shape {stored.shape})")
    array["key"] = f"{run_key}/array"
    return {"ok": True, "run": run_key, "container": container, "array": array, "table": table}


def latency(args):
    writer, reader = client(args.writer_url, args.api_key), client(args.reader_url, args.api_key)
    key = f"stream-latency-{uuid.uuid4().hex[:10]}"
    writer.write_array(numpy.zeros((1, WIDTH)), key=key)
    report = stream_array(writer[key], reader[key], args.updates, args.timeout)
    return {"n": report["received"], "p50_ms": report["p50_ms"], "p99_ms": report["p99_ms"],
            "max_ms": report["max_ms"], "after_return_p50_ms": report["after_return_p50_ms"],
            "after_return_p99_ms": report["after_return_p99_ms"], "write_p50_ms": report["write_p50_ms"],
            "key": key}


def latency_pair(args):
    """Two writers timed interleaved: write k goes through WRITER_A when k is odd, WRITER_B when even,
    each waited for at one subscriber through READER_URL, so that both are timed under the same
    load, write for write (two runs one after another differ by more than the two paths do on a
    busy machine). Reports {"a": {...}, "b": {...}} with each writer's n, p50_ms, p99_ms."""
    reader = client(args.reader_url, args.api_key)
    a, b = client(args.writer_a, args.api_key), client(args.writer_b, args.api_key)
    key = f"stream-latency-{uuid.uuid4().hex[:10]}"
    reader.write_array(numpy.zeros((1, WIDTH)), key=key)
    report = stream_array([a[key], b[key]], reader[key], 2 * args.updates, args.timeout)
    ra, rb = report["by_writer"]
    return {"a": ra, "b": rb, "warmup_writes": report["warmup_writes"], "key": key}


def replay(args):
    c = client(args.url, args.api_key)
    if args.key is None:
        # Write an array of our own, learning its sequence numbers through a live subscriber.
        key = f"stream-replay-{uuid.uuid4().hex[:10]}"
        c.write_array(numpy.zeros((1, WIDTH)), key=key)
        written = stream_array(c[key], c[key], args.updates, args.timeout)
        start = args.start if args.start is not None else written["first_seq"]
    else:
        if args.start is None:
            sys.exit("replay: --key needs --from SEQ (the sequence number to replay from)")
        key, start = args.key, args.start
    node = c[key]
    last_row = node.shape[0] - 1
    got = Collector(array_fields)
    sub = subscribe(node, "new_data", got, args.timeout, start=start)
    try:
        if not got.wait(lambda ups: any(u["row"] == last_row for u in ups), args.timeout):
            raise Failure(f"replay from {start}: the update of the last row ({last_row}) did not arrive within "
                          f"{args.timeout}s; arrived: {compact([u['seq'] for u in got.snapshot()])}")
        replayed = got.snapshot()
        # Then a live write: it must follow the replayed updates with the next number, once.
        node.patch(numpy.full((1, WIDTH), float(last_row + 1)), offset=(last_row + 1,), extend=True)
        if not got.wait(lambda ups: any(u["row"] == last_row + 1 for u in ups), args.timeout):
            raise Failure(f"replay from {start}: a write after the replay did not arrive within {args.timeout}s")
    finally:
        sub.disconnect()
    everything = got.snapshot()
    if not replayed or replayed[0]["seq"] != start:
        raise Failure(f"replay from {start}: first update replayed is {replayed[0]['seq'] if replayed else None}")
    expect_consecutive(f"replay from {start}", everything, start)
    # Each row's payload is its own number (row 0's warm-ups hold -n and its first write 0), and a
    # row's sequence number is its row plus a constant: the updates are this array's, not another
    # node's left in the cache.
    offsets = {u["seq"] - u["row"] for u in everything if not u.get("error") and u["row"] >= 1}
    bad = [u for u in everything if u.get("error") or (u["row"] >= 1 and u["values"] != [float(u["row"])])
           or (u["row"] == 0 and max(u["values"]) > 0)]
    if bad or len(offsets) > 1:
        raise Failure(f"replay from {start}: updates that are not this array's rows: {(bad or everything)[:3]}")
    return {"ok": True, "key": key, "from": start, "replayed": len(replayed), "to": replayed[-1]["seq"],
            "live_after_replay": everything[-1]["seq"]}


def probe(args):
    c = client(args.url, args.api_key)
    out = {}
    children = Collector(child_fields)
    sub = None
    try:
        sub = subscribe(c, "child_created", children, args.timeout)
        out["subscribe"] = "connected"
    except Refused as err:
        out["subscribe"] = "refused"
        out["subscribe_error"] = str(err)[:300]
    except Failure as err:
        out["subscribe"] = "not connected"
        out["subscribe_error"] = str(err)[:300]
    key = f"stream-probe-{uuid.uuid4().hex[:10]}"
    try:
        c.write_array(numpy.zeros((1, WIDTH)), key=key)
        out["write"] = "ok"
    except Exception as err:
        out["write"] = "failed"
        message = str(err)
        out["write_error"] = message.splitlines()[0][:300]
        found = re.search(r"correlation ID ([0-9a-f]+)", message)
        if found:
            out["correlation_id"] = found.group(1)
    if sub is not None:
        # The subscription may have connected before the server subscribed to the cache (see
        # warm_up): a second child gives it one more chance.
        if out["write"] == "ok" and not children.wait(lambda ups: any(u["key"] == key for u in ups), 2):
            try:
                c.create_container(key + "-again")
            except Exception:
                pass
        out["received"] = children.wait(lambda ups: any(u["key"].startswith(key) for u in ups), args.timeout)
        sub.disconnect()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api-key", default=os.environ.get("TILED_API_KEY"),
                        help="Tiled API key (default: the environment variable TILED_API_KEY)")
    parser.add_argument("--timeout", type=float, default=30, help="seconds to wait for each update (default 30)")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("check", "latency"):
        p = commands.add_parser(name)
        p.add_argument("writer_url")
        p.add_argument("reader_url")
        p.add_argument("--updates", type=int, default=20 if name == "check" else 200)
    p = commands.add_parser("latency-pair")
    p.add_argument("writer_a")
    p.add_argument("writer_b")
    p.add_argument("reader_url")
    p.add_argument("--updates", type=int, default=200, help="writes through each writer (default 200)")
    p = commands.add_parser("replay")
    p.add_argument("url")
    p.add_argument("--key", help="path of an array written earlier (e.g. the array key `check` printed)")
    p.add_argument("--from", dest="start", type=int, metavar="SEQ", help="sequence number to replay from")
    p.add_argument("--updates", type=int, default=10, help="rows to write first, without --key")
    p = commands.add_parser("probe")
    p.add_argument("url")
    # Options may come before or after the command.
    for sub in commands.choices.values():
        sub.add_argument("--timeout", type=float, default=argparse.SUPPRESS)
        sub.add_argument("--api-key", default=argparse.SUPPRESS)
    args = parser.parse_args()
    run = {"check": check, "latency": latency, "latency-pair": latency_pair, "replay": replay, "probe": probe}[args.command]
    try:
        result = run(args)
    except (Failure, Refused) as err:
        print(f"stream.py {args.command}: FAIL: {err}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
