"""The run machinery: what keeps a run safe and reproducible, behind the core.

Skip it on a first reading: nothing in the core (nanoatr/*.py, model/, verifier/) imports it, and the
commands (train.py, eval.py, sft.py, sample.py) are where the two meet. Flags and configs (cli.py,
parser.py, train_config.py, reward_flags.py), the run's life and folder (session.py, folder.py,
metrics_log.py, resume.py, checkpoint.py, step_metrics.py), several processes (distributed.py) and the fast
decode plan of a GPU (decoding.py).
"""
