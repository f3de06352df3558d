"""The test servers' shared plumbing: a free loopback port, a bounded wait until a child server
answers HTTP, and stopping a child (terminate, then kill)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request

__all__ = ["free_port", "stop_process", "wait_http"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen, what: str, seconds: float = 60.0) -> None:
    """Poll ``url`` until the server answers at all (any HTTP status); ``RuntimeError`` when the
    process exits first or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start ({url})") from None
            time.sleep(0.05)  # polling a child process's readiness, not synchronising threads


def stop_process(proc: subprocess.Popen, seconds: float = 10.0) -> None:
    """Terminate ``proc``, kill it if it has not exited within ``seconds``, and reap it."""
    proc.terminate()
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=seconds)
