"""Stream state: the Redis keyspace, stream-kept signals, reputation, the feature contract and the profile fields."""
