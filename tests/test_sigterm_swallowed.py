"""A SIGTERM whose Terminated Python swallows still stops the command (QA11 verification N5).

The handler raises where the main thread happens to be; inside a garbage collector's or a
weakref's callback Python prints "Exception ignored in ..." and runs on, so the audit ran
to its end (every output written, exit 143 with no "Error:" line). The handler's
``sys.unraisablehook`` sends SIGTERM again, raised at the next bytecode. Deterministic:
the handler is called inside a ``__del__``, as a signal landing there runs it, and the
run then sleeps: only the SIGTERM sent again ends it before the test's timeout.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SWALLOWED = '''
import signal, sys, time
import auditor.cli._termination as termination
from auditor.cli._termination import stopped_by_sigterm, term_handler

termination._RESEND_DELAY_S = float(sys.argv[1])

seen = []
def recorder(unraisable):
    seen.append(type(unraisable.exc_value).__name__)
sys.unraisablehook = recorder

class Other:
    def __del__(self):
        raise ValueError("not a SIGTERM")

class SignalInCallback:
    def __del__(self):  # Python swallows what a finaliser raises, as in a weakref callback
        term_handler(signal.SIGTERM, None)

def step():
    pass

try:
    with stopped_by_sigterm():
        other = Other()
        del other
        victim = SignalInCallback()
        del victim
        step()
        time.sleep(20)  # the SIGTERM sent again ends the sleep
        print("ran on")
except SystemExit as exc:
    print("exit", exc.code)
print("passed on", seen)
print("hook restored", sys.unraisablehook is recorder)
'''


@pytest.mark.parametrize("delay", ["0.01", "0"])  # 0: sent again before the hook returns, where it must not raise
def test_a_sigterm_swallowed_in_a_finaliser_is_sent_again_and_stops_the_command(delay: str) -> None:
    done = subprocess.run([sys.executable, "-c", SWALLOWED, delay], capture_output=True, text=True, timeout=60)
    # before: "ran on", the Terminated passed to the previous hook ("Exception ignored in"), no exit
    assert done.stdout.splitlines() == ["exit 143", "passed on ['ValueError']", "hook restored True"], \
        done.stdout + done.stderr
