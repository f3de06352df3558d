"""The test servers' shared plumbing: a free loopback port, a bounded wait until a child server
answers HTTP, stopping a child (terminate, then kill), ``ChildServer``, a server in a child
process that its owner starts and stops, and ``serve_until_terminated``, that child's side."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

__all__ = ["ChildServer", "free_port", "serve_until_terminated", "stop_process", "wait_http"]

ROOT = str(Path(__file__).resolve().parents[2])  # the checkout: children run ``-m tests.support...``


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


def serve_until_terminated(stop: Callable[[], None]) -> None:
    """A child server's main thread: wait for SIGTERM (``ChildServer.stop``), then ``stop`` it."""
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    stop()


def stop_process(proc: subprocess.Popen, seconds: float = 10.0) -> None:
    """Terminate ``proc``, kill it if it has not exited within ``seconds``, and reap it."""
    proc.terminate()
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=seconds)


class ChildServer:
    """A server in a child process: ``launch`` starts it and waits (bounded) until ``ready_url``
    answers, stopping it when it does not; ``stop`` (and leaving a ``with``) ends it."""

    proc: subprocess.Popen | None = None

    def launch(self, cmd: list[str], ready_url: str, what: str, seconds: float,
               env: dict[str, str] | None = None, defaults: dict[str, str] | None = None,
               quiet: bool = False) -> None:
        """Run ``cmd`` from the checkout (on ``PYTHONPATH``; this process's environment over
        ``defaults``, ``env`` over both; ``quiet``: its stderr dropped too) and wait for ``ready_url``."""
        full = {**(defaults or {}), **os.environ, **(env or {}),
                "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL if quiet else None)
        try:
            wait_http(ready_url, self.proc, what, seconds)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process(proc)

    def __exit__(self, *exc: object) -> None:
        self.stop()
