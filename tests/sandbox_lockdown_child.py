"""A sandbox child for the isolation-layer tests (run as a script, not collected).

It locks itself down exactly as `sandbox.child` does (`sandbox.lockdown`, with what the host put
after `--lockdown`), reports the layers, and then tries one forbidden thing per message: plain
Python past the language guards, standing for generated code that got out of them. Every attempt
answers {"done": True} if it worked, {"done": False, "errno": n} if the kernel refused it; a
seccomp kill ends the process instead (the host sees SIGSYS).
"""

import ctypes
import errno
import os
import socket
import sys

from flowdata import framing
from sandbox import lockdown

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
CLONE_NEWNET = 0x40000000


def attempt(op: str, message: dict) -> None:
    if op == "open":
        os.close(os.open(message.get("path", "/etc/hostname"), os.O_RDONLY))
    elif op == "write_file":
        fd = os.open(message["path"], os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
    elif op == "connect":
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(("127.0.0.1", message["port"]))
    elif op == "fork":
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    elif op == "exec":
        os.execv("/bin/true", ["/bin/true"])
    elif op == "ptrace":
        if libc.ptrace(PTRACE_ATTACH, message["pid"], None, None) != 0:
            raise OSError(ctypes.get_errno(), "ptrace")
    elif op == "setuid":
        os.setuid(0)
    elif op == "unshare_net":  # needs CAP_SYS_ADMIN: a capability test
        if libc.unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
    elif op == "signal_host":  # signal 0 only probes: nothing is delivered
        os.kill(os.getppid(), 0)
    else:
        raise OSError(errno.ENOSYS, f"unknown op {op!r}")


def main() -> None:
    read_fd, write_fd = framing.claim_stdio()
    config = lockdown.parse_argv(sys.argv[1:])
    layers = lockdown.lock(**config)
    lockdown.install_excepthook()
    framing.send(write_fd, {"op": "sandbox", "layers": layers})
    while True:
        message = framing.recv(read_fd)
        if message is None:
            return
        op = message["op"]
        if op == "hello":
            framing.send(write_fd, {"hello": True})
            continue
        if op == "compute":  # what the real child still does: allocate, collect, time
            import gc

            hoard = [bytearray(1 << 20) for _ in range(64)]
            del hoard
            gc.collect()
            framing.send(write_fd, {"sum": sum(range(message["n"]))})
            continue
        try:
            attempt(op, message)
            framing.send(write_fd, {"done": True})
        except OSError as problem:
            framing.send(write_fd, {"done": False, "errno": problem.errno})


if __name__ == "__main__":
    main()
