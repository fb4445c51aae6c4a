"""The delivery bench's baseline: a plain loop of urllib3 requests at a given concurrency.

``python -m bench.http_loop URL --concurrency 32 --warm 2 --window 10 [--keepalive]``
runs ``concurrency`` threads, each POSTing a small JSON body to ``URL`` in a
loop, and prints one JSON line: the requests completed during the window and
the rate. By default each request opens a new connection, as each delivery
of ``pgsched.http`` does (a connection pinned to the address vetted for that
attempt); ``--keepalive`` reuses connections (urllib3's pool), for reference.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import urllib3

BODY = b'{"type":"bench.event","data":{"id":1}}'


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warm", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--keepalive", action="store_true")
    args = parser.parse_args()
    pool = urllib3.PoolManager(maxsize=args.concurrency, retries=False)
    headers = {"Content-Type": "application/json"}
    if not args.keepalive:
        headers["Connection"] = "close"
    start = time.monotonic()
    t0, t1 = start + args.warm, start + args.warm + args.window
    counts = [0] * args.concurrency
    errors = [0] * args.concurrency

    def loop(i: int) -> None:
        while (now := time.monotonic()) < t1:
            try:
                response = pool.request("POST", args.url, body=BODY, headers=headers)
                ok = 200 <= response.status < 300
            except urllib3.exceptions.HTTPError:
                ok = False
            done = time.monotonic()
            if t0 <= done < t1:
                if ok:
                    counts[i] += 1
                else:
                    errors[i] += 1
            del now

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = sum(counts)
    print(json.dumps({"completed": total, "errors": sum(errors), "rate": total / args.window}))


if __name__ == "__main__":
    main()
