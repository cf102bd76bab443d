"""A minimal GRPO trainer (nanoatr): RL with verifiable rewards, built around ATR-GRPO (KL3 clipping).

The package loads nothing on import; what is here is how a command's Ctrl-C is one line at start-up."""
import os
import signal
import sys


def quiet_ctrl_c():
    """From now on, Ctrl-C ends the command with one `error:` line and exit code 130, not a traceback
    (train.py, eval.py and sample.py call it before their imports); `ctrl_c_raises()` gives Python's
    KeyboardInterrupt back where a command handles it itself. SIGINT ignored (a background job) stays so."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)


def ctrl_c_raises():
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted(signum, frame):
    # Exit here and now: raising SystemExit would unwind through whatever Python was running, and an import
    # cut half-way (numpy.linalg, inside torch._dynamo) was swallowed by a library's bare except, the process
    # going on to a RecursionError traceback. Before the command's own handler nothing needs cleaning up.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.write(2, b"error: interrupted during start-up\n")
    os._exit(130)
