"""The probe's channel to the agent: the step socket, claimed by one process of the worker, and
the reports sent on it in batches, as datagrams.

Note [Reports in batches]
-------------------------
A step's report goes out when 0.25 s or more have passed since the probe last sent; otherwise
it waits to go with the next ones: one datagram per 0.25 s at most (16 KB at most each, one
line per step; agent/step_report.hpp), whatever the step rate. Each datagram wakes the agent's
receiver, which costs the sending worker about 40 us (60-175 us before the receiver ran as
SCHED_BATCH, Note [A receiver that never preempts a worker]), against 3 us when no one is woken;
and formatting several reports in a row costs less than one each step, cold. Steps of 0.25 s
or longer are each sent at their end. A faster program's reports reach the agent up to 0.25 s
and one step late (Note [Late reads]); if it then pauses (an evaluation, a checkpoint), the
agent shows the step reached up to that much before the pause until the next step; at exit
the held reports are sent (atexit), and a worker killed by a signal loses them.
"""

import os

from lockstep._step_report import _format

_SEND_EVERY_S = 0.25  # Note [Reports in batches]; also the longest step read late, Note [Late reads]
_MAX_BATCH_BYTES = 16384  # a datagram's size, well below agent/step_report.hpp's kMaxDatagramBytes (32768)
_MAX_BATCH_REPORTS = 64  # reports held at most before they are sent


class _Channel:
    """The step socket of one process: its claim, and the reports not sent yet."""

    def __init__(self, socket_path):
        self.socket_path = socket_path
        self._sock = None
        self.batch = []  # reports not sent yet, as records (_format; Note [Reports in batches])
        self._last_send = None
        self._lock_fd = None
        self.claimed = False

    def claim(self):
        """Note [The Python probe], one reporter per socket: False when another process of this
        worker holds the claim."""
        import fcntl

        self.claimed = True
        try:
            fd = os.open(self.socket_path + ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError:
            return True  # nowhere to coordinate: report
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def flush_if_due(self, now):
        """Note [Reports in batches]: sends the reports not sent yet once 0.25 s have passed since
        the last send (or when they are many); now: time.perf_counter()."""
        if self.batch and (self._last_send is None or now - self._last_send >= _SEND_EVERY_S
                           or len(self.batch) >= _MAX_BATCH_REPORTS):
            self._last_send = now
            self.flush()

    def flush(self):
        """Sends the reports not sent yet, as few datagrams as fit them."""
        records = self.batch
        if not records:
            return
        self.batch = []
        chunk = []
        size = 0
        for record in records:
            line = _format(record)
            if chunk and size + len(line) > _MAX_BATCH_BYTES:
                self.send("\n".join(chunk))
                chunk = []
                size = 0
            chunk.append(line)
            size += len(line) + 1
        self.send("\n".join(chunk))

    def send(self, text):
        sock = self._sock
        if sock is None:
            import socket

            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            # Connected once: a send then skips the kernel's look-up of the socket's path that
            # sendto() makes each time (a third of the send's cost, bench/agent/probe_pieces.py).
            sock.connect(self.socket_path)
            self._sock = sock
        try:
            sock.send(text.encode("ascii"))
        except BlockingIOError:
            pass  # the agent's queue is full: these steps' reports are dropped, training never waits
