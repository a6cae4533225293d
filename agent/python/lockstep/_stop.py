"""lockstep.stopping(): whether the agent has asked this worker to stop (SIGTERM).

Note [Stopping in Python]
The agent stops its workers with SIGTERM and, at the end of its grace period (--grace-period,
25 s by default), SIGKILL: when Kueue preempts the job, when the pod is deleted, when another
rank failed. By default SIGTERM ends a Python process at once, so a program cannot checkpoint.
The first call of stopping() from the main thread, under the agent (LOCKSTEP_METRICS_SOCKET is
set), installs a SIGTERM handler that only records the signal (and says so on stderr); from
then on stopping() returns True once SIGTERM has come, and the program decides when to stop
(ranks agree with an all-reduce of the flag: docs/agent.md, "Stopping on request"). Nothing is
installed
  * outside the agent: stopping() is False and SIGTERM keeps its default;
  * when the program has a SIGTERM handler of its own (or ignores SIGTERM): it stays, and
    stopping() stays False (said once on stderr);
  * before the first call, and in a program that never calls stopping(): SIGTERM ends it at
    once, as before. So only a program that asks is ever kept alive by the handler.
A program that asked once and then neither asks again nor exits runs on until the agent's
SIGKILL at the end of the grace period: the handler never ends the process itself, so that a
checkpoint being written is not cut short by a second SIGTERM. Python runs the handler in the
main thread between bytecodes, so the flag shows once the main thread is back from a long C
call (a backward pass, a collective).
"""

import os

_SOCKET_ENV = "LOCKSTEP_METRICS_SOCKET"

_asked = False
_state = "unarmed"  # unarmed | armed | theirs | outside


def stopping():
    """True once this worker has been asked to stop (SIGTERM from the agent); False otherwise."""
    if _state == "unarmed":
        _arm()
    return _asked


def _arm():
    global _state
    import signal
    import threading

    if not os.environ.get(_SOCKET_ENV):
        _state = "outside"
        return
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal() works only there: the main thread's first call arms it
    current = signal.getsignal(signal.SIGTERM)
    if current is not signal.SIG_DFL:
        _state = "theirs"
        _say("lockstep.stopping(): the program handles SIGTERM itself (%s); that handler stays and "
             "lockstep.stopping() stays False" % ("ignored" if current is signal.SIG_IGN else "its own handler"))
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    _state = "armed"


def _on_sigterm(signum, frame):
    global _asked
    again = _asked
    _asked = True
    _say("lockstep: SIGTERM%s: lockstep.stopping() is True; stop within the agent's grace period (SIGKILL after it)"
         % (" again" if again else ""))


def _say(text):
    # os.write, not sys.stderr: a handler may interrupt a write to sys.stderr, whose buffer is not
    # reentrant.
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass
