#!/usr/bin/env python3
"""POSTs on one connection, each body written 2 ms after its head (as a client that writes the
head, then the body, does): the load of `SPLIT_BODY=1 POST_BYTES=n callgrind.sh`.

    split_post.py PORT REQUESTS BODY_BYTES
"""
import socket
import sys
import time


def main():
    port, requests, size = (int(a) for a in sys.argv[1:4])
    conn = socket.create_connection(("127.0.0.1", port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = b"p" * size
    head = b"POST / HTTP/1.1\r\nhost: bench\r\ncontent-length: %d\r\n\r\n" % size
    read = b""
    for _ in range(requests):
        conn.sendall(head)
        time.sleep(0.002)
        conn.sendall(body)
        # One response, delimited by its Content-Length.
        while True:
            end = read.find(b"\r\n\r\n")
            if end >= 0:
                fields = read[:end].lower()
                length = int(fields.split(b"content-length:")[1].split(b"\r\n")[0])
                if len(read) >= end + 4 + length:
                    if not read.startswith(b"HTTP/1.1 200"):
                        sys.exit(f"split_post.py: {read[:80]!r}")
                    read = read[end + 4 + length:]
                    break
            data = conn.recv(65536)
            if not data:
                sys.exit("split_post.py: the proxy closed the connection")
            read += data
    conn.close()


main()
