"""The feedback worker: user reports and moderator labels -> reputation counters and bans in Redis.

A faust-streaming agent (:mod:`.app`) takes small batches off the feedback topic;
:class:`~workers.feedback.handler.FeedbackHandler` (plain asyncio, no faust) validates them,
dead-letters what is invalid, and applies one aggregated :class:`~workers.state.reputation.Plan`
per batch through the :class:`~workers.clients.ReputationStore` in a single round trip.
The moderation worker picks the new bans up on its next ban-list refresh.

Delivery is at-least-once and counting is exactly-once: faust acks a batch only after the
handler returns, and the handler only returns once Redis and the DLQ acknowledged it
(transient failures are retried, never skipped). A redelivery after a crash, or a retry
after a Redis timeout, counts nothing twice: each event's change is applied atomically
with a marker under its id (``FeedbackEvent.event_id``, else topic:partition:offset), so
bans follow exact counts. A graceful stop cancels the agent, and faust then acks the batch in
hand; the agent holds its own reference on each message until the batch is applied
(:func:`~workers.feedback.app.apply`), so that ack commits nothing and the batch comes again.

The package imports nothing itself: whoever reads feedback records (a retrain's join, the handler's
tests) does not pull faust in; the worker is :mod:`.app`, its settings :mod:`.settings`.
"""
