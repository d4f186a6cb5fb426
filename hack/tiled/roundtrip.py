"""Write data to a running Tiled server and read it back, for the conformance suite.

Usage: roundtrip.py write|read|register|register-refused URL [PATH]

The API key comes from the environment variable TILED_API_KEY. Exit status 0 means every check
passed; failures print what differed.
"""

import asyncio
import os
import sys

import numpy
import pandas
import pyarrow

from tiled.client import from_uri

ARRAY = numpy.arange(100, dtype="float64").reshape(10, 10)
TABLE = pandas.DataFrame({"motor": [1.0, 2.0, 3.0], "det": [10, 20, 30]})
ROWS = pandas.DataFrame({"t": [0.5, 1.5], "i0": [7, 8]})


def client(url):
    return from_uri(url, api_key=os.environ["TILED_API_KEY"])


def write(url):
    c = client(url)
    c.write_array(ARRAY, key="conformance_array")
    c.write_table(TABLE, key="conformance_table")
    # An appendable table lives in the SQL storage database (writable_storage's postgresql:// entry).
    rows = pyarrow.Table.from_pandas(ROWS, preserve_index=False)
    t = c.create_appendable_table(rows.schema, key="conformance_rows")
    t.append_partition(0, rows)
    t.append_partition(0, rows)
    read(url)


def read(url):
    c = client(url)
    numpy.testing.assert_array_equal(c["conformance_array"].read(), ARRAY)
    pandas.testing.assert_frame_equal(c["conformance_table"].read(), TABLE, check_dtype=False)
    rows = c["conformance_rows"].read()
    expected = pandas.concat([ROWS, ROWS], ignore_index=True)
    pandas.testing.assert_frame_equal(rows.reset_index(drop=True), expected, check_dtype=False)
    sources = c["conformance_rows"].data_sources()
    uris = [a.data_uri for s in sources for a in s.assets]
    assert any(u.startswith("postgresql") for u in uris), f"appendable table not in SQL storage: {uris}"
    print("read back: array", ARRAY.shape, "table", TABLE.shape, "appendable rows", rows.shape)


def register(url, path):
    from tiled.client.register import register as reg

    c = client(url)
    asyncio.run(reg(c, path, prefix="/detector"))
    frame = c["detector"]["scan1"].read()
    assert list(frame["counts"]) == [3, 1, 4], frame
    print("registered and read", path)


def register_refused(url, path):
    try:
        register(url, path)
    except Exception as err:  # the server refuses data outside readable storage
        print("refused as expected:", type(err).__name__, str(err).splitlines()[0][:200])
        return
    sys.exit("registering data outside readable_storage was accepted")


if __name__ == "__main__":
    cmd, url = sys.argv[1], sys.argv[2]
    if cmd == "write":
        write(url)
    elif cmd == "read":
        read(url)
    elif cmd == "register":
        register(url, sys.argv[3])
    elif cmd == "register-refused":
        register_refused(url, sys.argv[3])
    else:
        sys.exit(f"unknown command {cmd}")
