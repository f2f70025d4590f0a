"""fp8rl: fully-FP8 RL benchmark harness."""
