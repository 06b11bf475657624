"""The embedded local stack: Tansu, Redis and tritonserver as subprocesses, and what they need."""
