"""The autotuner: measure each backend per op and size, pick the fastest, write a table."""
