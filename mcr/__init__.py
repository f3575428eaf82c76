"""mcr: a message-size-tuned, multi-library communication dispatcher for distributed training."""

__version__ = "0.1.0"
