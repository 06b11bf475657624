"""modstream workers: the hot-path moderation worker and the feedback worker."""
