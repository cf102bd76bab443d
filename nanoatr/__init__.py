"""nanoatr: a minimal GRPO trainer for RL with verifiable rewards, built around ATR-GRPO (KL3 clipping)."""
