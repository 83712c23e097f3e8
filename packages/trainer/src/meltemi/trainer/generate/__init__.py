"""Text from a trained model: KV-cache generation and the sampling rules."""
