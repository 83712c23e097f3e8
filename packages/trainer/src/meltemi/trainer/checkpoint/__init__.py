"""Checkpoints: their format on disk or in a bucket, writing and committing them, restoring and resuming,
auditing a run, and loading a trained model for export, sampling and evaluation."""
