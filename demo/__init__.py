"""The demo corpus (attempts.jsonl, malformed.jsonl, checkpoints/), shipped as package data: the inputs of a
release when none are given and nothing was imported (`pipelines.core.settings`). The scripts beside it build
and check the corpus from a checkout."""
