"""Kafka mechanics: commit policy, delivery, fetch waits, lag and rebalances, batch ramps, security settings."""
