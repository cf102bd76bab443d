"""nanoatr: a minimal GRPO trainer for RL with verifiable rewards, built around ATR-GRPO (KL3 clipping)."""
import signal
import sys


def quiet_ctrl_c():
    """From now on, Ctrl-C ends the command with one `error:` line and exit code 130, not a traceback
    from wherever Python was (a command spends seconds importing torch and loading a model first).
    train.py, eval.py and sample.py call it before their imports; `ctrl_c_raises()` gives Python's
    KeyboardInterrupt back where a command handles it itself (train.py's run folder, its loop that
    finishes the step and saves; eval.py's sampling, which keeps what it sampled). A process started
    with SIGINT ignored (a shell's background job) keeps ignoring it."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)


def ctrl_c_raises():
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted(signum, frame):
    print("error: interrupted during start-up", file=sys.stderr)
    raise SystemExit(130)
