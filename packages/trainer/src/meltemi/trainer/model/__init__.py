"""The model: the Llama, its rotary positions and the key/value cache decoding reads."""
