"""modstream: stream spam moderation — the serving side, the local stack and the CLI."""
