"""What is checked before a run starts: that the load fits this process (`admission`),
stays inside a hosted provider's limits and the spend allowed (`hosted`), and that the
target streams, with its tokens per word calibrated (`calibrate`)."""
