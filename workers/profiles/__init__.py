"""Profile ingestion: platform-supplied account and domain facts -> the Redis hashes the decision model reads.

:mod:`.contract` derives the key and field contract from :mod:`schemas.profiles` and plans
each batch's writes; :mod:`.app` is ``modstream ingest-profiles``, a confluent-kafka
consumer that writes them (one script call per batch) and dead-letters invalid records.
"""
