"""A stand-in sandbox child for tests/test_child_process.py (run as a script, not collected).

It speaks the framed channel on fds 0/1 like the real `sandbox.child`, and obeys one command per
message, so the tests can make it misbehave in every way the host must survive.
"""

import os
import signal
import sys
import time

from flowdata import framing


def main() -> None:
    read_fd, write_fd = framing.claim_stdio()
    while True:
        message = framing.recv(read_fd)
        if message is None:
            return
        op = message.get("op")
        if op == "echo":
            framing.send(write_fd, {"echo": message.get("value")})
        elif op == "env":
            framing.send(write_fd, {
                "environ": dict(os.environ),
                "cwd": os.getcwd(),
                "listing": sorted(os.listdir(".")),
                "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
                "flags": {"no_user_site": sys.flags.no_user_site, "safe_path": sys.flags.safe_path,
                          "hash_randomization": sys.flags.hash_randomization},
                "hash": hash("flow"),
                "net": os.readlink("/proc/self/ns/net"),
            })
        elif op == "connect":
            import socket
            try:
                socket.create_connection((message["host"], message["port"]), timeout=2).close()
                framing.send(write_fd, {"connected": True})
            except OSError as exc:
                framing.send(write_fd, {"connected": False, "errno": exc.errno})
        elif op == "print":
            print("stray output on stdout", flush=True)
            framing.send(write_fd, {"printed": True})
        elif op == "write_file":
            try:
                with open("out.txt", "w") as handle:
                    handle.write("x")
                framing.send(write_fd, {"wrote": True})
            except OSError as exc:
                framing.send(write_fd, {"wrote": False, "error": exc.errno})
        elif op == "alloc":
            hoard = []
            while True:
                hoard.append(bytearray(16 * 1024 * 1024))
        elif op == "spin":
            while True:
                pass
        elif op == "signal":
            os.kill(os.getpid(), message["signal"])
            time.sleep(10)
        elif op == "exit":
            sys.stderr.write(message.get("stderr", ""))
            sys.stderr.flush()
            os._exit(message["code"])
        elif op == "close":
            os.close(write_fd)
            time.sleep(message.get("sleep", 30))
        elif op == "fork":
            pid = os.fork()
            if pid == 0:
                while True:
                    time.sleep(1)
            framing.send(write_fd, {"grandchild": pid})
        elif op == "huge_header":
            os.write(write_fd, framing.HEADER.pack(framing.MAX_FRAME + 1))
            time.sleep(30)
        elif op == "partial":
            os.write(write_fd, framing.HEADER.pack(100) + b'{"a"')
            os._exit(3)
        elif op == "last_words":
            framing.send(write_fd, {"bye": True})
            os._exit(0)
        elif op == "sleep":
            time.sleep(message["seconds"])
            framing.send(write_fd, {"slept": True})
        elif op == "stderr_flood":
            chunk = "e" * 1023 + "\n"
            for _ in range(message["kib"]):
                sys.stderr.write(chunk)
            sys.stderr.write("THE END\n")
            sys.stderr.flush()
            framing.send(write_fd, {"flooded": True})
        elif op == "next_flags":  # which flags the host set on the frame it sends next
            header = os.read(read_fd, framing.HEADER.size)
            (length,) = framing.HEADER.unpack(header)
            os.read(read_fd, framing.frame_length(header))
            framing.send(write_fd, {"busy": bool(length & framing.BUSY), "exact": bool(length & framing.EXACT),
                                    "crowded": bool(length & framing.CROWDED)})
        else:
            framing.send(write_fd, {"error": f"unknown op {op!r}"})


if __name__ == "__main__":
    main()
